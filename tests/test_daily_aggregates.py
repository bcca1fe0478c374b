"""Daily aggregates (migration 0024, ``warehouse.daily``): the rewritten named queries and
the report's period counts return exactly what they returned when they read
``current_assessments`` (``tests/daily_reference.py``), whatever the days' state: all dirty
(computed live), recomputed, partly recomputed, after re-audits, events re-judged as
non-refusals or moved to another bundle written after a recompute, and after the same blocks
are stored again; over several filters. A mark written after a recompute read the marks
keeps the day dirty; old versions are deleted."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from daily_reference import ASSESSED, BY_MODEL, CONFIGURATIONS, DAY_RANGE, EVENTS, NAMED

from warehouse import daily
from warehouse import report_queries as rq
from warehouse.client import Client
from warehouse.connect import connect
from warehouse.migrate import migrate
from warehouse.named import QueryResult
from warehouse.queries import NAMED_QUERIES, run_named
from warehouse.store import Warehouse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from trend_data import BUNDLE, generate

ROWS = 3000
OTHER = "other-bundle"


def _filters() -> list[dict[str, Any]]:
    today = datetime.now(UTC).date()
    return [
        {},
        {"since": today - timedelta(days=60)},
        {"until": today - timedelta(days=200), "model": "model-00"},
        {
            "since": today - timedelta(days=300),
            "until": today - timedelta(days=10),
            "product": "product-01",
        },
        {"model": "model-03", "product": "product-00"},
        {"model": "no-such-model"},
    ]


def _old(
    client: Client, db: str, name: str, f: dict[str, Any], sql: str | None = None
) -> list[tuple[Any, ...]]:
    """The reference query's result (or ``sql``'s, post-processed the same way)."""
    params = {
        "db": db,
        "since": f.get("since", date(1970, 1, 1)),
        "until": f.get("until", date(2149, 6, 6)),
        "model": f.get("model", ""),
        "product": f.get("product", ""),
    }
    raw = client.query(sql or NAMED[name], parameters=params, settings=daily.READ_SETTINGS)
    query = NAMED_QUERIES[name]
    rows = [tuple(r) for r in raw.result_rows]
    result = QueryResult(list(query.columns[: len(raw.column_names)]), rows)
    if rows and query.postprocess is not None:
        result = query.postprocess(QueryResult(list(raw.column_names), rows))
    return [tuple(r) for r in result.rows]


def _old_period_counts(client: Client, db: str, f: rq.ReportFilter) -> dict[str, int]:
    out: dict[str, int] = {}
    for sql in (EVENTS, ASSESSED):
        raw = client.query(sql, parameters=f.params(db), settings=daily.READ_SETTINGS)
        out |= {k: int(v) for k, v in zip(raw.column_names, raw.result_rows[0], strict=True)}
    return out


def _compare(client: Client, db: str, names: Iterable[str] = NAMED, report: bool = True) -> int:
    """Assert every rewritten query in ``names`` (default: every named query) equals its
    reference under every filter, and with ``report`` the report's queries too; return how
    many result rows were compared."""
    compared = 0
    for f in _filters():
        for name in names:
            new = run_named(client, db, name, **f).rows
            assert new == _old(client, db, name, f), (name, f)
            inline = daily.inline_sql(NAMED_QUERIES[name].sql)  # one statement, same rows
            assert _old(client, db, name, f, inline) == new, (name, f)
            compared += len(new)
        if report:
            _compare_report(client, db, f, date(2000, 1, 1), date(2100, 1, 1))
    if report:
        _compare_day_range(client, db)
    return compared


def _compare_report(client: Client, db: str, f: dict[str, Any], since: date, until: date) -> None:
    """The report's period counts and false positives by model under filter ``f`` (its
    ``since``/``until`` defaulting to the given days) equal their reference."""
    report = rq.ReportFilter(
        f.get("since", since), f.get("until", until), f.get("model"), f.get("product")
    )
    assert rq.period_counts(client, db, report) == _old_period_counts(client, db, report), f
    old = client.query(BY_MODEL, parameters=report.params(db), settings=daily.READ_SETTINGS)
    by_model = rq.false_positives_by_model(client, db, report).rows
    assert [r[:3] for r in by_model] == [tuple(r) for r in old.result_rows], f
    _compare_configurations(client, db, report)


def _compare_configurations(client: Client, db: str, report: rq.ReportFilter) -> None:
    """The report's audit configurations equal their reference: the same rows, ordered by
    the reference's (partial) order, most assessments first."""
    old = client.query(CONFIGURATIONS, parameters=report.params(db), settings=daily.READ_SETTINGS)
    new = rq.audit_configurations(client, db, report).rows
    assert sorted(new) == sorted(tuple(r) for r in old.result_rows), report
    keys = [(-r[5], r[0], r[2]) for r in new]
    assert keys == sorted(keys), report


def _compare_day_range(client: Client, db: str) -> None:
    """The report's event day range equals its reference."""
    old_range = client.query(DAY_RANGE, parameters={"db": db}, settings=daily.READ_SETTINGS)
    first, last, n = old_range.result_rows[0]
    assert rq.event_day_range(client, db) == ((first, last) if n else None)


def _dirty(client: Client, db: str) -> list[date]:
    return daily.dirty_days(client, db, date(1970, 1, 1), date(2149, 6, 6))


def _later_changes(client: Client, db: str) -> None:
    """Re-audits (category, flags and clause changed), events re-judged as non-refusals,
    events whose classifier verdict and detection now disagree, events moved to another
    bundle with an assessment under it."""
    client.command(
        f"INSERT INTO `{db}`.assessments SELECT * REPLACE ("
        "'policy_gray_zone' AS category, NOT is_estimated_false_positive AS "
        "is_estimated_false_positive, NOT requires_human_review AS requires_human_review, "
        "if(policy_clause_cited IS NULL, 'clause-99', NULL) AS policy_clause_cited, "
        "concat(batch_id, '-re') AS batch_id, audited_at + toIntervalDay(1) AS audited_at) "
        f"FROM `{db}`.assessments FINAL WHERE cityHash64(log_id) % 20 = 0"
    )
    client.command(
        f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE (false AS is_refusal, "
        "ingested_at + toIntervalDay(1) AS ingested_at) "
        f"FROM `{db}`.refusal_events FINAL "
        "WHERE refusal_kind = 'explicit' AND cityHash64(log_id) % 25 = 1"
    )
    client.command(  # a newer version whose detection now disagrees with the classifier
        f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE (true AS classifier_is_refusal, "
        "false AS detected_is_refusal, 'classifier_refusal_detector_not' AS "
        "refusal_disagreement, ingested_at + toIntervalDay(1) AS ingested_at) "
        f"FROM `{db}`.refusal_events FINAL WHERE cityHash64(log_id) % 25 = 3"
    )
    moved = "refusal_kind = 'explicit' AND cityHash64(log_id) % 25 = 2"
    client.command(
        f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE ('{OTHER}' AS policy_bundle, "
        f"ingested_at + toIntervalDay(2) AS ingested_at) FROM `{db}`.refusal_events FINAL "
        f"WHERE {moved}"
    )
    client.command(
        f"INSERT INTO `{db}`.assessments SELECT * REPLACE ('{OTHER}' AS policy_bundle, "
        "'over_refusal' AS category, audited_at + toIntervalDay(2) AS audited_at) "
        f"FROM (SELECT * FROM `{db}`.assessments FINAL WHERE policy_bundle = '{BUNDLE}' "
        f"AND log_id IN (SELECT log_id FROM `{db}`.refusal_events FINAL "
        f"WHERE policy_bundle = '{OTHER}'))"
    )


def generated_store(chdb_dsn: str, prefix: str, rows: int) -> Iterator[tuple[Client, str]]:
    """A migrated store named ``prefix_<random>`` filled by the trend generator with ``rows``
    refusals, with duplicates (5% redelivered); dropped afterwards (a fixture's body)."""
    db = f"{prefix}_{uuid.uuid4().hex[:12]}"
    client = connect(chdb_dsn, db)
    migrate(client, db)
    generate(client, db, rows, redelivered=0.05)
    try:
        yield client, db
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{db}`")
        client.close()


@pytest.fixture(scope="module")
def store(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    """A migrated store filled by the trend generator, with duplicates (5% redelivered)."""
    yield from generated_store(chdb_dsn, "daily", ROWS)


def test_rewritten_queries_equal_the_reference_in_every_state(
    store: tuple[Client, str],
) -> None:
    client, db = store
    assert len(_dirty(client, db)) > 300, "the generator's inserts marked their days"
    assert _compare(client, db) > 1000  # every day live
    first = daily.refresh(client, db, max_days=5)
    assert 0 < len(first) <= 5 and len({(d.year, d.month) for d in first}) == 1
    assert _compare(client, db) > 1000  # 5 days from the aggregate, the rest live
    daily.refresh_all(client, db)
    assert _dirty(client, db) == []
    assert _compare(client, db) > 1000  # every day from the aggregate
    _later_changes(client, db)
    assert _dirty(client, db), "the changes marked their days"
    current = client.query(f"SELECT uniqExact(policy_bundle) FROM `{db}`.current_assessments")
    assert current.result_rows[0][0] == 2, "some assessments are now under another bundle"
    assert _compare(client, db) > 1000  # stale aggregate rows of the changed days not read
    daily.refresh_all(client, db)
    before = {f"{n} {f}": run_named(client, db, n, **f).rows for f in _filters() for n in NAMED}
    # re-processing: the same rows stored again (as a redelivered block is)
    for table in ("refusal_events", "assessments"):
        client.command(f"INSERT INTO `{db}`.{table} SELECT * FROM `{db}`.{table} FINAL "
                       "WHERE cityHash64(log_id) % 7 = 0")  # fmt: skip
    assert _dirty(client, db)
    assert _compare(client, db) > 1000
    daily.refresh_all(client, db)
    assert _compare(client, db) > 1000
    after = {f"{n} {f}": run_named(client, db, n, **f).rows for f in _filters() for n in NAMED}
    assert after == before


def test_a_mark_newer_than_the_recompute_keeps_the_day_dirty(
    store: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, db = store
    daily.refresh_all(client, db)
    day = datetime.now(UTC).date() - timedelta(days=3)
    daily.mark_days(client, db, [day])
    real = daily._command

    def write_meanwhile(client_: Client, sql: str, *args: Any, **kwargs: Any) -> None:
        real(client_, sql, *args, **kwargs)
        if "daily_versions" in sql:  # after the recompute, before the marks are cleared
            daily.mark_days(client, db, [day])

    monkeypatch.setattr(daily, "_command", write_meanwhile)
    assert daily.refresh(client, db) == [day]
    monkeypatch.setattr(daily, "_command", real)
    assert _dirty(client, db) == [day]
    assert daily.refresh(client, db) == [day]
    assert _dirty(client, db) == []


def test_a_recompute_keeps_two_versions_of_a_day(store: tuple[Client, str]) -> None:
    client, db = store
    daily.refresh_all(client, db)  # whatever earlier tests on this store left dirty
    # a day of 0024-0027's aggregates, and the newest day with a verdict (0028's: the
    # verdicts are on ~1% of the assessments, so most days have no rows there)
    verdict_day = client.query(
        f"SELECT toDate(max(event_time)) FROM `{db}`.refusal_events "
        f"WHERE log_id IN (SELECT log_id FROM `{db}`.current_verdicts)"
    ).result_rows[0][0]
    checked: set[str] = set()
    for day in (datetime.now(UTC).date() - timedelta(days=5), verdict_day):
        client.command(  # a sighting seen that day (0029's "gaps" holds it on that day)
            f"INSERT INTO `{db}`.policy_gap_sightings VALUES ('b', 'gap', {{d:String}}, "
            "'batch', 'member', 'opening', toDateTime64({d:Date}, 3, 'UTC'))",
            parameters={"d": day},
        )
        for _ in range(4):
            daily.mark_days(client, db, [day])
            assert daily.refresh(client, db) == [day]
        for agg in daily.AGGREGATES.values():
            # the deletes run in the background: wait for them (up to 120 s: a loaded machine
            # took more than 30 s in one CI run)
            for _ in range(1200):
                versions = client.query(
                    f"SELECT uniqExact(version) FROM `{db}`.{agg.table} WHERE day = {{d:Date}}",
                    parameters={"d": day},
                ).result_rows[0][0]
                if versions <= 2:
                    break
                time.sleep(0.1)
            if versions:  # a table with no row on that day is checked on the other
                assert versions == 2, (agg.table, day)
                checked.add(agg.table)
    assert checked == {agg.table for agg in daily.AGGREGATES.values()}


def test_the_writer_marks_days_and_refreshes(warehouse: Warehouse) -> None:
    from test_warehouse import SPECS, make_assessment

    item = make_assessment(SPECS[0])
    warehouse.insert_assessments([item])
    day = item.event_time.astimezone(UTC).date()
    assert _dirty(warehouse.client, warehouse.database) == [day]
    assert warehouse.refresh_daily(every_s=3600) == [day]
    warehouse.insert_assessments([item])  # re-processing marks the day again
    assert warehouse.refresh_daily(every_s=3600) == []  # throttled
    assert _dirty(warehouse.client, warehouse.database) == [day]


def test_the_writer_spends_at_most_its_share_recomputing(
    warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recompute that took ``d`` seconds holds the next one back for ``d / share`` (not
    just ``every_s``), so a day that grows cannot make the writer recompute all the time."""
    clock = [1000.0]
    monkeypatch.setattr("warehouse.store.time.monotonic", lambda: clock[0])
    real = daily.refresh

    def slow_refresh(*args: Any, **kwargs: Any) -> list[date]:
        clock[0] += 5.0  # this recompute "takes" 5 s
        return real(*args, **kwargs)

    monkeypatch.setattr(daily, "refresh", slow_refresh)
    from test_warehouse import SPECS, make_assessment

    item = make_assessment(SPECS[0])
    day = item.event_time.astimezone(UTC).date()
    with pytest.raises(ValueError, match="share"):
        warehouse.refresh_daily(every_s=10, share=0)
    warehouse.insert_assessments([item])
    assert warehouse.refresh_daily(every_s=10, share=0.1) == [day]  # started at 1000, took 5
    warehouse.insert_assessments([item])
    clock[0] = 1000.0 + 49.0  # past every_s, before 5 / 0.1 = 50 s
    assert warehouse.refresh_daily(every_s=10, share=0.1) == []
    clock[0] = 1000.0 + 50.0
    assert warehouse.refresh_daily(every_s=10, share=0.1) == [day]
    assert _dirty(warehouse.client, warehouse.database) == []
    clock[0] = 1050.0 + 50.0  # that one started at 1050 and took 5 s: held back 50 s
    warehouse.insert_assessments([item])
    assert warehouse.refresh_daily(every_s=10, share=1.0) == [day]  # took 5: max(10, 5)
    warehouse.insert_assessments([item])
    clock[0] = 1100.0 + 9.0
    assert warehouse.refresh_daily(every_s=10, share=1.0) == []
    clock[0] = 1100.0 + 10.0
    assert warehouse.refresh_daily(every_s=10, share=1.0) == [day]


def test_a_day_still_being_written_is_left_to_the_readers(warehouse: Warehouse) -> None:
    """With a settle time the writer's recompute skips a day marked within it (the readers
    compute it live) and takes it once its newest mark is older."""
    from test_warehouse import SPECS, make_assessment

    item = make_assessment(SPECS[0])
    day = item.event_time.astimezone(UTC).date()
    warehouse.insert_assessments([item])
    assert warehouse.refresh_daily(settle_s=300) == []
    assert _dirty(warehouse.client, warehouse.database) == [day]
    old = time.time_ns() - 301 * 10**9  # the same day's mark, written 301 s ago
    warehouse.client.command(
        f"INSERT INTO `{warehouse.database}`.dirty_days (day, version, dirty) "
        f"VALUES ('{day.isoformat()}', {old}, true)"
    )
    assert warehouse.refresh_daily(settle_s=300) == []  # the newer mark still holds it back
    warehouse.client.command(
        f"DELETE FROM `{warehouse.database}`.dirty_days WHERE version > {old}",
        settings={"lightweight_deletes_sync": 2},
    )
    assert warehouse.refresh_daily(settle_s=300) == [day]
    assert _dirty(warehouse.client, warehouse.database) == []
