"""How long do the trend queries take as the warehouse grows? (issue 27, item 4)

Builds an embedded chDB store of ``--rows`` synthetic assessments (``benchmarks/trend_data.py``:
generated inside ClickHouse with ``INSERT ... SELECT`` from ``numbers()``, through the
project's migrations, so the schema is the real one) and times, ``--runs`` times each:

- every named query (``warehouse.queries.NAMED_QUERIES``, as ``refusal-audit query NAME``
  runs it: no filter, every day);
- the report's queries (``warehouse.report_queries`` and the named queries the report reads,
  ``refusal_audit.report.html.data.collect``) over the whole stored period, as
  ``refusal-audit report`` does without ``--since``/``--until``;
- every ClickHouse panel, annotation and variable query of the ``refusal-audit`` Grafana
  dashboard as deployed (``refusal_audit.dashboards``), expanded as Grafana and the
  ClickHouse plugin do (``tests/grafana_expand.py``) with its default time range (now-90d to
  now), "All" for every variable and ``$__interval`` the larger of the panel's minimum
  interval and 2 h (90 days over about 1,000 points);
- the alert detectors' reads (``warehouse.drift_assessments.window_counts``): 27 one-hour
  windows (24 of baseline, 3 looked back: the defaults) and 27 one-day windows.

It prints p50 and p95 (seconds) per query and adds them under the store's size to
``--json`` (default ``benchmarks/results/trend_queries.json``). Target (issue 27): every
query's p95 <= 1 s at 100 M rows.

Run: ``python benchmarks/trend_queries.py --rows 1e6 --store /tmp/trend-1m [--runs 5]
[--keep] [--reuse] [--upto VERSION] [--only PARTS]``. The store directory is deleted at the
end unless ``--keep``; ``--reuse`` times an existing store (kept earlier) without generating,
after applying the pending migrations (timed: the migration on a populated store);
``--upto 0021`` applies the migrations up to that version only (the schema before issue 27's
migration, to compare). ``--ab`` also times the named queries that read
``current_assessments`` with the view bodies of 0022 and 0023 inlined, alternately;
``--ab-schema`` (a store at 0023) times every query alternately at 0022's and 0023's schema
(the view replaced, ``LOCAL_FINAL`` switched) instead of the plain timings.
``--dirty-day DAY`` (ISO date or ``today``, repeatable) marks that day dirty after the
refresh, so the plain timings read it live as while a writer is writing it (the next run's
refresh cleans it).
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from trend_data import generate  # noqa: E402

from refusal_audit.dashboards import build_dashboards  # noqa: E402
from refusal_audit.report.html.data import collect  # noqa: E402
from warehouse import daily  # noqa: E402
from warehouse import report_queries as rq  # noqa: E402
from warehouse.client import Client  # noqa: E402
from warehouse.connect import connect  # noqa: E402
from warehouse.drift_assessments import window_counts  # noqa: E402
from warehouse.migrate import applied_migrations, load_migrations, migrate  # noqa: E402
from warehouse.partition_keys import LOCAL_FINAL  # noqa: E402
from warehouse.queries import NAMED_QUERIES, run_named  # noqa: E402

DATABASE = "trend"
RESULTS = REPO / "benchmarks" / "results" / "trend_queries.json"
GRAFANA_INTERVAL_S = 7200
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_LOCAL = "do_not_merge_across_partitions_select_final"

Query = tuple[str, str, Callable[[], Any]]
_GRAFANA: Any = importlib.import_module("grafana_expand")  # tests/grafana_expand.py
_REFERENCE: Any = importlib.import_module("daily_reference")  # tests/daily_reference.py


def named_queries(client: Client, db: str) -> Iterator[Query]:
    """``refusal-audit query NAME`` for every name, no filter."""
    for name in sorted(NAMED_QUERIES):
        yield "named", name, partial(run_named, client, db, name)


def report_queries(client: Client, db: str) -> Iterator[Query]:
    """The report's own queries over the whole stored period, then its whole collection."""
    days = rq.event_day_range(client, db)
    if days is None:
        return
    f = rq.ReportFilter(days[0], days[1])
    yield "report", "event_day_range", lambda: rq.event_day_range(client, db)
    yield "report", "stored_values", lambda: rq.stored_values(client, db, "model")
    yield "report", "period_counts", lambda: rq.period_counts(client, db, f)
    yield "report", "audit_configurations", lambda: rq.audit_configurations(client, db, f)
    yield "report", "false_positives_by_model", lambda: rq.false_positives_by_model(client, db, f)
    yield "report", "top_gap_flags", lambda: rq.top_gap_flags(client, db, f)
    yield "report", "period_alerts", lambda: rq.period_alerts(client, db, f)
    yield (
        "report",
        "collect (whole report)",
        lambda: collect(client, db, f, warehouse="bench", max_width=0.1),
    )


def _seconds(interval: str | None) -> int:
    if not interval:
        return 0
    return int(interval[:-1]) * _UNITS[interval[-1]]


def dashboard_queries(client: Client, db: str) -> Iterator[Query]:
    """Every ClickHouse target of the audit dashboard, expanded for its default range."""
    board = build_dashboards()["refusal-audit.json"]
    now = datetime.now(UTC)
    start = now - timedelta(days=int(board["time"]["from"].removeprefix("now-").rstrip("d")))

    def run(sql: str, variables: dict[str, Any], interval_s: int) -> Any:
        return client.query(_GRAFANA.expand(sql, variables, start, now, interval_s)).result_rows

    options: dict[str, list[str]] = {}
    for variable in board["templating"]["list"]:
        sql = variable["query"]["rawSql"]
        yield "grafana", f"variable {variable['name']}", partial(run, sql, {}, 0)
        options[variable["name"]] = [str(r[0]) for r in run(sql, {}, 0)]
    every = {name: _GRAFANA.Variable([_GRAFANA.ALL], v) for name, v in options.items()}
    for panel in board["panels"]:
        interval_s = max(_seconds(panel.get("interval")), GRAFANA_INTERVAL_S)
        for target in panel.get("targets", []):
            if "rawSql" not in target:
                continue
            sql = target["rawSql"]
            yield (
                "grafana",
                f"{panel['title']} [{target.get('refId', 'A')}]",
                partial(run, sql, every, interval_s),
            )
    for annotation in board["annotations"]["list"][1:]:
        sql = annotation["target"]["rawSql"]
        yield (
            "grafana",
            f"annotation {annotation['name']}",
            partial(run, sql, every, GRAFANA_INTERVAL_S),
        )


def drift_queries(client: Client, db: str) -> Iterator[Query]:
    """The detectors' window counts: 27 hourly and 27 daily windows up to now."""
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    for window in (3600, 86400):
        start = now - timedelta(seconds=27 * window)
        yield (
            "drift",
            f"window_counts {window}s x 27",
            partial(
                window_counts,
                client,
                db,
                window_seconds=window,
                grace_seconds=300,
                start=start,
                end=now,
            ),
        )


def time_queries(
    queries: list[Query], runs: int, only: str | None, warmup: bool = True
) -> dict[str, dict[str, float | int | str]]:
    """Each query ``runs`` times (after one untimed warm-up run unless ``warmup`` is False):
    p50, p95 (nearest rank), max, result rows."""
    out: dict[str, dict[str, float | int | str]] = {}
    for group, name, call in queries:
        if only and not any(part in f"{group}: {name}" for part in only.split(",")):
            continue
        seconds = []
        if warmup:
            result = call()
        else:
            t = time.perf_counter()
            result = call()
            seconds.append(time.perf_counter() - t)
        for _ in range(runs - len(seconds)):
            t = time.perf_counter()
            call()
            seconds.append(time.perf_counter() - t)
        seconds.sort()
        p95 = seconds[min(len(seconds) - 1, round(0.95 * (len(seconds) - 1)))]
        rows = len(result.rows) if hasattr(result, "rows") else _length(result)
        out[f"{group}: {name}"] = {
            "group": group,
            "p50": statistics.median(seconds),
            "p95": p95,
            "max": seconds[-1],
            "result_rows": rows,
        }
        print(f"  {group:8} {name[:60]:60} p50 {statistics.median(seconds):8.3f} s"
              f"  p95 {p95:8.3f} s  ({rows} rows)", flush=True)  # fmt: skip
    return out


def _length(result: Any) -> int:
    try:
        return len(result)
    except TypeError:
        return 1


def store_stats(client: Client, db: str) -> dict[str, dict[str, int]]:
    """Rows, active parts and bytes on disk per table of ``db``."""
    rows = client.query(
        "SELECT table, sum(rows), count(), sum(bytes_on_disk) FROM system.parts "
        "WHERE database = {db:String} AND active GROUP BY table ORDER BY table",
        parameters={"db": db},
    ).result_rows
    return {str(t): {"rows": int(r), "parts": int(p), "bytes": int(b)} for t, r, p, b in rows}


_VIEW_BODY = (
    "(SELECT * FROM `{db}`.assessments FINAL WHERE (log_id, policy_bundle) IN ("
    "SELECT log_id, policy_bundle FROM `{db}`.refusal_events FINAL WHERE is_refusal){settings})"
)
_AB = {
    "0022": " SETTINGS use_index_for_in_with_subqueries = 0",
    "0023": " SETTINGS use_index_for_in_with_subqueries = 0, "
    "do_not_merge_across_partitions_select_final = 1",
}


def view_ab(client: Client, db: str, runs: int) -> dict[str, dict[str, float]]:
    """The named queries that read ``current_assessments``, each with the view's body of
    the two migrations in ``_AB`` (0022 and 0023) inlined, run alternately ``runs`` times
    (same load for both): median seconds of each and their ratio (older / newer)."""
    out: dict[str, dict[str, float]] = {}
    params = {"since": date(1970, 1, 1), "until": date(2149, 6, 6), "model": "", "product": ""}
    for name, query in sorted(NAMED_QUERIES.items()):
        if "current_assessments" not in query.sql:
            continue
        sqls = {
            k: query.sql.replace(
                "{db:Identifier}.current_assessments", _VIEW_BODY.format(db=db, settings=v)
            ).replace("{db:Identifier}", f"`{db}`")
            for k, v in _AB.items()
        }
        seconds: dict[str, list[float]] = {k: [] for k in sqls}
        for _ in range(runs):
            for k, sql in sqls.items():
                t = time.perf_counter()
                client.query(sql, parameters=params)
                seconds[k].append(time.perf_counter() - t)
        (a, old), (b, new) = ((k, statistics.median(seconds[k])) for k in _AB)
        out[name] = {f"{a}_s": old, f"{b}_s": new, "ratio": old / new}
        print(f"  {name:32} {a} {old:7.3f} s  {b} {new:7.3f} s  x{old / new:5.1f}", flush=True)
    return out


def schema_ab(
    client: Client, db: str, queries: list[Query], runs: int, only: str | None
) -> dict[str, dict[str, float]]:
    """Every query alternately at the schema of 0022 (its ``current_assessments``, FINAL
    across months) and of 0023 (FINAL inside each month: the view and
    ``warehouse.partition_keys.LOCAL_FINAL``, which the named and report queries pass),
    ``runs`` times each after one warm-up of each (same load for both): median seconds and
    their ratio. Leaves the store at 0023's view."""
    views = {m.version: m.statements(db) for m in load_migrations() if m.version in _AB}
    out: dict[str, dict[str, float]] = {}
    try:
        for group, name, call in queries:
            if only and not any(part in f"{group}: {name}" for part in only.split(",")):
                continue
            seconds: dict[str, list[float]] = {k: [] for k in _AB}
            for turn in range(runs + 1):
                for version, statements in views.items():
                    for statement in statements:
                        client.command(statement)
                    LOCAL_FINAL[_LOCAL] = int(version >= "0023")
                    t = time.perf_counter()
                    call()
                    if turn:
                        seconds[version].append(time.perf_counter() - t)
            (a, old), (b, new) = ((k, statistics.median(v)) for k, v in seconds.items())
            out[f"{group}: {name}"] = {f"{a}_s": old, f"{b}_s": new, "ratio": old / new}
            print(f"  {group:8} {name[:48]:48} {a} {old:7.3f} s  {b} {new:7.3f} s  "
                  f"x{old / new:5.1f}", flush=True)  # fmt: skip
    finally:
        LOCAL_FINAL[_LOCAL] = 1
    return out


def refresh_daily(client: Client, db: str) -> dict[str, float | int]:
    """Recompute every dirty day (``warehouse.daily.refresh_all``): wall and this process's
    CPU seconds, days, seconds per day."""
    t, cpu = time.perf_counter(), time.process_time()
    days = daily.refresh_all(client, db)
    wall = time.perf_counter() - t
    out = {"days": len(days), "wall_s": wall, "cpu_s": time.process_time() - cpu,
           "s_per_day": wall / max(1, len(days))}  # fmt: skip
    print(f"refreshed {len(days)} dirty days in {wall:.1f} s ({out['s_per_day']:.3f} s/day)",
          flush=True)  # fmt: skip
    return out


def _daily_pairs(client: Client, db: str) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, the query as it read current_assessments, the query as it reads now) for the
    queries migration 0024 rewrote, no filter, every day (the report: its stored period)."""
    everything = {"db": db, "since": date(1970, 1, 1), "until": date(2149, 6, 6),
                  "model": "", "product": ""}  # fmt: skip

    def old(sql: str, params: dict[str, Any]) -> Callable[[], Any]:
        return lambda: client.query(sql, parameters=params, settings=LOCAL_FINAL).result_rows

    pairs: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        (f"named: {n}", old(sql, everything), partial(run_named, client, db, n))
        for n, sql in _REFERENCE.NAMED.items()
    ]
    sql = f"SELECT min(day), max(day) FROM `{db}`.daily_versions"
    first, last = client.query(sql).result_rows[0]
    f = rq.ReportFilter(first, last)
    events = old(_REFERENCE.EVENTS, f.params(db))
    assessed = old(_REFERENCE.ASSESSED, f.params(db))
    pairs.append(("report: period_counts", lambda: (events(), assessed()),
                  partial(rq.period_counts, client, db, f)))  # fmt: skip
    pairs.append(("report: audit_configurations", old(_REFERENCE.CONFIGURATIONS, f.params(db)),
                  partial(rq.audit_configurations, client, db, f)))  # fmt: skip
    gaps: Any = importlib.import_module("gap_reference")  # tests/gap_reference.py (0027)
    pairs.append(("report: top_gap_flags", old(gaps.TOP_GAP_FLAGS, f.params(db) | {"limit": 10}),
                  partial(rq.top_gap_flags, client, db, f)))  # fmt: skip
    return pairs + _grafana_pairs(client)


def whole_days_panel_runner(client: Client) -> Callable[[str], Callable[[], Any]]:
    """A function from a panel's SQL to a call running it expanded as the equality tests
    expand it: the dashboard's default 90 days cut to whole UTC days (00:00:00 of the first
    to 23:59:59 of today), "All" for model, product and bundle, a one-day interval. The call
    returns the result rows."""
    today = datetime.now(UTC).date()
    start = datetime.combine(today - timedelta(days=90), datetime.min.time(), UTC)
    end = datetime.combine(today, datetime.max.time(), UTC).replace(microsecond=0)
    every = {n: _GRAFANA.Variable([_GRAFANA.ALL], []) for n in ("model", "product", "bundle")}

    def run(sql: str) -> Callable[[], Any]:
        expanded = _GRAFANA.expand(sql, every, start, end, 86400)
        return lambda: client.query(expanded).result_rows

    return run


def _grafana_pairs(client: Client) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, former SQL, SQL now) of the audit dashboard's targets migration 0025 moved onto
    the daily aggregates (``tests/grafana_reference.py``) and the policy-gap panels 0027
    bounded (``tests/gap_reference.py``), expanded for the default range cut
    to whole UTC days (00:00:00 to 23:59:59), "All" everywhere, a one-day interval."""
    reference: Any = importlib.import_module("grafana_reference")
    board = build_dashboards()["refusal-audit.json"]
    run = whole_days_panel_runner(client)
    now_sql = {p["title"]: p["targets"][0]["rawSql"] for p in board["panels"] if "targets" in p}
    now_sql |= {f"variable {v['name']}": v["query"]["rawSql"] for v in board["templating"]["list"]}
    former = reference.PANELS | importlib.import_module("gap_reference").PANELS
    former |= {f"variable {n}": sql for n, sql in reference.VARIABLES.items()}
    return [(f"grafana: {name}", run(sql), run(now_sql[name])) for name, sql in former.items()]


def daily_ab(
    client: Client, db: str, runs: int, only: str | None = None
) -> dict[str, dict[str, float]]:
    """Each rewritten query alternately as it read ``current_assessments`` (before) and as it
    reads the daily aggregate with every day clean (after), ``runs`` times after a warm-up;
    then, with today marked dirty (computed live), the new form again. Median seconds (wall
    and this process's CPU: chDB runs in it). ``only``: the pairs whose name holds one of
    these comma-separated parts."""
    out: dict[str, dict[str, float]] = {}
    parts = only.split(",") if only else []
    pairs = [p for p in _daily_pairs(client, db) if not parts or any(x in p[0] for x in parts)]
    for name, before, after in pairs:
        seconds: dict[str, list[float]] = {"before": [], "after": []}
        cpu: dict[str, list[float]] = {"before": [], "after": []}  # this process's (chDB's)
        for turn in range(runs + 1):
            for key, call in (("before", before), ("after", after)):
                t, c = time.perf_counter(), time.process_time()
                call()
                if turn:
                    seconds[key].append(time.perf_counter() - t)
                    cpu[key].append(time.process_time() - c)
        out[name] = {f"{k}_s": statistics.median(v) for k, v in seconds.items()}
        out[name] |= {f"{k}_cpu_s": statistics.median(v) for k, v in cpu.items()}
        out[name]["after_p95_s"] = sorted(seconds["after"])[-1 if runs < 20 else int(0.95 * runs)]
    daily.mark_days(client, db, [datetime.now(UTC).date()])
    for name, _, after in pairs:
        after()
        seconds_dirty = []
        for _ in range(runs):
            t = time.perf_counter()
            after()
            seconds_dirty.append(time.perf_counter() - t)
        out[name]["after_today_dirty_s"] = statistics.median(seconds_dirty)
        r = out[name]
        print(f"  {name:40} before {r['before_s']:8.3f} s  after {r['after_s']:7.3f} s "
              f"(x{r['before_s'] / r['after_s']:6.1f})  CPU before {r['before_cpu_s']:7.3f} s "
              f"after {r['after_cpu_s']:7.3f} s  "
              f"today dirty {r['after_today_dirty_s']:7.3f} s", flush=True)  # fmt: skip
    t = time.perf_counter()
    daily.refresh_all(client, db)
    out["refresh of one dirty day"] = {"wall_s": time.perf_counter() - t}
    return out


def markdown(saved: dict[str, Any], keys: list[str] | None = None) -> str:
    """A Markdown table of every query's p50 / p95 (seconds) per stored run (column): the
    runs named in ``keys`` (result keys, in that order), else every stored run. Raises
    ``KeyError`` for a key that is not stored."""
    runs = keys or list(saved)
    saved = {k: saved[k] for k in runs}
    names: list[str] = []
    for run in runs:
        names += [n for n in saved[run].get("queries", {}) if n not in names]
    head = "| query | " + " | ".join(f"{r} rows: p50 / p95 s" for r in runs) + " |"
    lines = [head, "| --- |" + " ---: |" * len(runs)]
    for name in names:
        cells = []
        for run in runs:
            q = saved[run].get("queries", {}).get(name)
            cells.append(f"{q['p50']:.2f} / {q['p95']:.2f}" if q else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    """Parse the options, build or reuse the store, time every query, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=float, default=1e6, help="assessments (1e6, 1e7, 1e8)")
    parser.add_argument("--store", type=Path, default=None, help="the chDB data directory")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the store")
    parser.add_argument("--no-warmup", action="store_true", help="time the first run too")
    parser.add_argument("--reuse", action="store_true", help="time an existing store")
    parser.add_argument(
        "--only",
        default=None,
        help="time only the queries whose 'group: name' holds one of these comma-separated parts",
    )
    parser.add_argument("--label", default="", help="suffix of the result's key")
    parser.add_argument(
        "--upto", default=None, help="apply migrations up to this version only (e.g. 0021)"
    )
    parser.add_argument(
        "--ab-schema",
        action="store_true",
        help="time every query alternately at 0022's and 0023's schema instead (store at 0023)",
    )
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--table", action="store_true", help="print --json as Markdown, exit")
    parser.add_argument(
        "--keys", default=None, help="with --table: these result keys only (comma-separated)"
    )
    parser.add_argument(
        "--ab", action="store_true", help="also compare the view bodies of 0022 and 0023"
    )
    parser.add_argument(
        "--ab-daily",
        action="store_true",
        help="time the queries 0024 rewrote, before/after alternately, then with today dirty",
    )
    parser.add_argument(
        "--dirty-day",
        action="append",
        default=[],
        help="mark this day (YYYY-MM-DD or today) dirty before timing: read live, as while "
        "a writer writes it",
    )
    args = parser.parse_args()
    if args.table:
        keys = [k.strip() for k in args.keys.split(",")] if args.keys else None
        print(markdown(json.loads(args.json.read_text()), keys))
        return
    rows = int(args.rows)
    if args.store is None:
        parser.error("--store is required")
    client = connect(f"chdb://{args.store.resolve()}", DATABASE, via_owner=False)
    report: dict[str, Any] = {"rows": rows, "runs": args.runs, "started": datetime.now(UTC)}
    try:
        wanted = [m for m in load_migrations() if args.upto is None or m.version <= args.upto]
        t = time.perf_counter()
        report["migrated"] = migrate(client, DATABASE, migrations=wanted)
        report["migrate_s"] = time.perf_counter() - t
        report["schema"] = max(applied_migrations(client, DATABASE))
        print(f"migrations applied now: {report['migrated']} ({report['migrate_s']:.2f} s), "
              f"schema {report['schema']}", flush=True)  # fmt: skip
        if not args.reuse:
            t = time.perf_counter()
            report["generate_s"] = generate(client, DATABASE, rows)
            print(f"generated {rows:,} assessments in {time.perf_counter() - t:.0f} s: "
                  f"{report['generate_s']}", flush=True)  # fmt: skip
        if report["schema"] >= "0024":
            report["refresh"] = refresh_daily(client, DATABASE)
        dirty = [datetime.now(UTC).date() if d == "today" else date.fromisoformat(d)
                 for d in args.dirty_day]  # fmt: skip
        if dirty:
            daily.mark_days(client, DATABASE, dirty)
            report["dirty_days"] = dirty
            print(f"marked dirty (read live): {', '.join(map(str, dirty))}", flush=True)
        report["tables"] = store_stats(client, DATABASE)
        builders = {
            "named": named_queries,
            "report": report_queries,
            "grafana": dashboard_queries,
            "drift": drift_queries,
        }
        parts = args.only.split(",") if args.only else []
        queries = [  # a group's list runs queries (days, variables): build only those asked
            query
            for group, build in builders.items()
            if not parts or any(p.startswith(f"{group}:") or ":" not in p for p in parts)
            for query in build(client, DATABASE)
        ]
        if args.ab:
            report["view_ab"] = view_ab(client, DATABASE, args.runs)
        if args.ab_daily:
            report["daily_ab"] = daily_ab(client, DATABASE, args.runs, args.only)
        if args.ab_schema:
            report["schema_ab"] = schema_ab(client, DATABASE, queries, args.runs, args.only)
            report["queries"] = {}
        else:
            report["queries"] = time_queries(queries, args.runs, args.only, not args.no_warmup)
    finally:
        client.close()
        if not args.keep:
            shutil.rmtree(args.store, ignore_errors=True)
    if report["queries"]:
        slowest = max(report["queries"].items(), key=lambda kv: kv[1]["p95"])
        print(f"slowest p95: {slowest[0]} {slowest[1]['p95']:.3f} s")
    saved = json.loads(args.json.read_text()) if args.json.exists() else {}
    saved[f"{rows}{args.label}"] = report
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(saved, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
