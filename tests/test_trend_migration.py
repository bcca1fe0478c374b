"""Migrations 0022 (current_assessments read without the primary-key analysis of its IN set),
0023 (FINAL merging inside each month: ``do_not_merge_across_partitions_select_final``) and
0024 (daily aggregates; the days computed live, then recomputed), 0025 and 0027 (the
policy-gap reads by primary-key lookups of the sightings' log ids), 0028 (the review reads'
daily aggregates) and 0029 (the policy-gap reads' daily aggregate) on a warehouse populated at
the schema before them: rows kept, every named query, report
query, Grafana panel and drift read returns exactly what it returned before, they can be
applied again, and re-delivered rows change nothing after them either. A store holding a
key in two months is refused by 0023's check (nothing applied) until
``warehouse.partition_keys.fold_spanning_keys`` keeps each key's newest version, which
changes nothing FINAL returned.

The store is filled by the trend benchmark's generator (``benchmarks/trend_data.py``), with
duplicates FINAL must fold (redelivered events and assessments), plus the cases
current_assessments exists for: re-audits (a newer assessment with another category) and
events re-delivered as non-refusals (their assessments retired).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest
from daily_reference import ASSESSED, BY_MODEL, CONFIGURATIONS, DAY_RANGE, EVENTS, NAMED
from gap_reference import PANELS as GAP_PANELS
from gap_reference import TOP_GAP_FLAGS
from grafana_expand import ALL, Variable, expand
from grafana_reference import PANELS, VARIABLES

from refusal_audit.dashboards import build_dashboards
from warehouse import daily
from warehouse import report_queries as rq
from warehouse.client import Client
from warehouse.connect import connect
from warehouse.disagreement_listing import LISTED
from warehouse.drift_assessments import window_counts
from warehouse.migrate import MigrationError, applied_migrations, load_migrations, migrate
from warehouse.named import QueryResult
from warehouse.partition_keys import LOCAL_FINAL, fold_spanning_keys, spanning_keys
from warehouse.queries import NAMED_QUERIES, run_named

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from trend_data import generate

NEW = [
    "0022_current_assessments_settings",
    "0023_partition_local_final",
    "0024_daily_aggregates",
    "0025_daily_configurations",
    "0026_daily_disagreements",
    "0027_policy_gap_lookups",
    "0028_daily_reviews",
    "0029_daily_gap_sightings",
    "0030_dirty_day_holds",
]
ROWS = 4000


def _tables(client: Client, db: str) -> dict[str, int]:
    rows = client.query(
        "SELECT name, total_rows FROM system.tables WHERE database = {db:String} "
        "AND engine LIKE '%MergeTree' AND name != 'schema_migrations' ORDER BY name",
        parameters={"db": db},
    ).result_rows
    return {str(name): int(n or 0) for name, n in rows}


def _edge_cases(client: Client, db: str) -> None:
    """Re-audits with another category and events re-delivered as non-refusals."""
    client.command(
        f"INSERT INTO `{db}`.assessments SELECT * REPLACE ("
        "'policy_gray_zone' AS category, NOT is_estimated_false_positive AS "
        "is_estimated_false_positive, audited_at + toIntervalDay(1) AS audited_at) "
        f"FROM `{db}`.assessments WHERE cityHash64(log_id) % 20 = 0"
    )
    client.command(
        f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE (false AS is_refusal, "
        "ingested_at + toIntervalDay(1) AS ingested_at) "
        f"FROM `{db}`.refusal_events "
        "WHERE refusal_kind = 'explicit' AND cityHash64(log_id) % 25 = 1"
    )


def _raw(client: Client, sql: str, params: dict[str, Any]) -> tuple[list[str], tuple[Any, ...]]:
    raw = client.query(sql, parameters=params, settings=LOCAL_FINAL)
    return list(raw.column_names), tuple(raw.result_rows[0])


def _named(client: Client, db: str, name: str, aggregates: bool, **f: Any) -> list[Any]:
    """``run_named``'s rows; before 0024 (no daily aggregates yet) the queries it rewrote
    run as they were (``tests/daily_reference.py``), post-processed the same way."""
    if not aggregates and NAMED_QUERIES[name].newest is not None:
        # a bounded listing reads 0026's aggregate: before it, the newest rows of the full one
        return run_named(client, db, name, full=True, **f).rows[:LISTED]
    if aggregates or name not in NAMED:
        return run_named(client, db, name, **f).rows
    params = {"db": db, "since": f.get("since", date(1970, 1, 1)),
              "until": f.get("until", date(2149, 6, 6)), "model": f.get("model", ""),
              "product": ""}  # fmt: skip
    raw = client.query(NAMED[name], parameters=params, settings=LOCAL_FINAL)
    result = QueryResult(list(raw.column_names), [tuple(r) for r in raw.result_rows])
    post = NAMED_QUERIES[name].postprocess
    return (post(result) if post and result.rows else result).rows


def _snapshot(client: Client, db: str) -> dict[str, Any]:
    """Every result the migration must not change."""
    out: dict[str, Any] = {}
    today = datetime.now(UTC).date()
    aggregates = "0025" in applied_migrations(client, db)  # 0024's and 0025's aggregates
    for name in NAMED_QUERIES:
        out[name] = _named(client, db, name, aggregates)
        if NAMED_QUERIES[name].filters:
            out[f"{name} model-01 30d"] = _named(
                client, db, name, aggregates, since=today - timedelta(days=30), model="model-01"
            )
    if aggregates:
        days = rq.event_day_range(client, db)
    else:  # before 0024 (tests/daily_reference.py)
        first, last, _ = _raw(client, DAY_RANGE, {"db": db})[1]
        days = (first, last)
    assert days is not None
    f = rq.ReportFilter(*days)
    if aggregates:
        out["period_counts"] = rq.period_counts(client, db, f)
    else:  # before 0024 the period counts read current_assessments (tests/daily_reference.py)
        out["period_counts"] = {
            k: int(v)
            for sql in (EVENTS, ASSESSED)
            for k, v in zip(*_raw(client, sql, f.params(db)), strict=True)
        }
    if aggregates:
        out["configurations"] = sorted(rq.audit_configurations(client, db, f).rows)
    else:  # before 0025 (tests/daily_reference.py; its order leaves ties to chance)
        raw = client.query(CONFIGURATIONS, parameters=f.params(db), settings=LOCAL_FINAL)
        out["configurations"] = sorted(tuple(r) for r in raw.result_rows)
    if aggregates:
        out["by_model"] = [r[:3] for r in rq.false_positives_by_model(client, db, f).rows]
    else:
        raw = client.query(BY_MODEL, parameters=f.params(db), settings=LOCAL_FINAL)
        out["by_model"] = [tuple(r) for r in raw.result_rows]
    gap_lookups = "0027" in applied_migrations(client, db)
    if gap_lookups:
        out["gaps"] = rq.top_gap_flags(client, db, f).rows
    else:  # before 0027 (tests/gap_reference.py)
        raw = client.query(TOP_GAP_FLAGS, parameters=f.params(db) | {"limit": 10},
                           settings=LOCAL_FINAL)  # fmt: skip
        out["gaps"] = [tuple(r) for r in raw.result_rows]
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    for window in (3600, 86400):
        counts = window_counts(
            client, db, window_seconds=window, grace_seconds=300,
            start=now - timedelta(seconds=30 * window), end=now,
        )  # fmt: skip
        out[f"drift {window}"] = {k: sorted(v.items(), key=repr) for k, v in counts.items()}
    out["current"] = client.query(
        f"SELECT * FROM `{db}`.current_assessments ORDER BY policy_bundle, log_id"
    ).result_rows
    board = build_dashboards()["refusal-audit.json"]
    # whole UTC days: the daily panels' resolution (before 0025 their former SQL,
    # tests/grafana_reference.py, filtered by the time itself)
    start = datetime.combine(today - timedelta(days=90), time(), UTC)
    end = datetime.combine(today + timedelta(days=1), time(23, 59, 59), UTC)
    options = {
        v["name"]: [
            str(r[0])
            for r in client.query(
                v["query"]["rawSql"] if aggregates else VARIABLES[v["name"]]
            ).result_rows
        ]
        for v in board["templating"]["list"]
    }
    every = {name: Variable([ALL], values) for name, values in options.items()}
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            if "rawSql" in target:
                raw_sql = target["rawSql"]
                if not aggregates and panel["title"] in PANELS:
                    raw_sql = PANELS[panel["title"]]
                if not gap_lookups and panel["title"] in GAP_PANELS:
                    raw_sql = GAP_PANELS[panel["title"]]
                sql = expand(raw_sql, every, start, end, 86400)
                out[f"panel {panel['title']}"] = sorted(client.query(sql).result_rows, key=repr)
    return out


@pytest.fixture(scope="module")
def populated(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    """A store at the schema before 0022, filled, with duplicates and edge cases."""
    db = f"trend_{uuid.uuid4().hex[:12]}"
    client = connect(chdb_dsn, db)
    previous = [m for m in load_migrations() if m.version < "0022"]
    migrate(client, db, migrations=previous)
    generate(client, db, ROWS, redelivered=0.05)
    _edge_cases(client, db)
    try:
        yield client, db
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{db}`")
        client.close()


def test_the_migration_keeps_rows_and_results_and_can_run_again(
    populated: tuple[Client, str],
) -> None:
    client, db = populated
    tables, before = _tables(client, db), _snapshot(client, db)
    assert before["current"], "the store holds current assessments"
    assert len(before["current"]) < ROWS, "some assessments were retired"
    assert spanning_keys(client, db) == {"refusal_events": 0, "assessments": 0}
    assert migrate(client, db) == NEW
    assert {t: n for t, n in _tables(client, db).items() if t in tables} == tables
    assert _snapshot(client, db) == before  # every day dirty: the aggregates computed live
    daily.refresh_all(client, db)
    assert _snapshot(client, db) == before  # every day from the aggregates
    assert migrate(client, db) == []
    for migration in [m for m in load_migrations() if m.id in NEW]:
        for statement in migration.statements(db):  # an interrupted run applied again
            client.command(statement)
    assert _snapshot(client, db) == before
    view = client.query(
        "SELECT create_table_query FROM system.tables WHERE database = {db:String} "
        "AND name = 'current_assessments'",
        parameters={"db": db},
    ).result_rows[0][0]
    assert "use_index_for_in_with_subqueries = 0" in view
    assert "do_not_merge_across_partitions_select_final = 1" in view


def test_redelivered_rows_change_nothing_after_the_migration(
    populated: tuple[Client, str],
) -> None:
    client, db = populated
    migrate(client, db)
    before = _snapshot(client, db)
    generate_again = (
        "INSERT INTO `{db}`.{t} SELECT * FROM `{db}`.{t} WHERE cityHash64(log_id) % 7 = 0"
    )
    for table in ("refusal_events", "assessments"):
        client.command(generate_again.format(db=db, t=table))
    assert _snapshot(client, db) == before


def _current(client: Client, db: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every current event (FINAL as each read does it at the applied schema) and every row
    of current_assessments."""
    local = max(applied_migrations(client, db)) >= "0023"
    return {
        "events": client.query(
            f"SELECT * FROM `{db}`.refusal_events FINAL ORDER BY log_id",
            settings={"do_not_merge_across_partitions_select_final": int(local)},
        ).result_rows,
        "current": client.query(
            f"SELECT * FROM `{db}`.current_assessments ORDER BY policy_bundle, log_id"
        ).result_rows,
    }


def test_a_key_in_two_months_is_refused_until_folded(chdb_dsn: str) -> None:
    db = f"span_{uuid.uuid4().hex[:12]}"
    client = connect(chdb_dsn, db)
    try:
        migrate(client, db, migrations=[m for m in load_migrations() if m.version < "0022"])
        generate(client, db, 1000, redelivered=0.05)
        shift = "event_time - toIntervalDay(45) AS event_time"
        # copies written before the duplicate-log-id rule: another event time, two months;
        # newer than the stored row for some keys (FINAL returns them), older for others
        for table, version in (("refusal_events", "ingested_at"), ("assessments", "audited_at")):
            for sign, bucket in (("+", 0), ("-", 1)):
                client.command(
                    f"INSERT INTO `{db}`.{table} SELECT * REPLACE ({shift}, "
                    f"{version} {sign} toIntervalHour(1) AS {version}) "
                    f"FROM `{db}`.{table} WHERE cityHash64(log_id) % 10 = {bucket}"
                )
        spanning = spanning_keys(client, db)
        assert spanning["refusal_events"] > 0 and spanning["assessments"] > 0
        versions = applied_migrations(client, db)
        expected = _current(client, db)
        with pytest.raises(MigrationError, match=r"more than one month.*--fold"):
            migrate(client, db)
        assert applied_migrations(client, db) == versions, "nothing applied"
        assert fold_spanning_keys(client, db) == spanning
        assert spanning_keys(client, db) == {"refusal_events": 0, "assessments": 0}
        assert _current(client, db) == expected, "folding keeps what FINAL returned"
        assert migrate(client, db) == NEW
        assert _current(client, db) == expected
        assert fold_spanning_keys(client, db) == {"refusal_events": 0, "assessments": 0}
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{db}`")
        client.close()
