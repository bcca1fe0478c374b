"""Migration 0029 (gapF): the report's ``top_gap_flags`` and the panels "New gaps", "Gap
sightings" and "Open gaps with example log ids" read the daily aggregate ``gaps``
(``warehouse.gap_daily``, ``warehouse.gap_reads``) and return what their former SQL returned
(``tests/gap_reference.py``: 0019's views over all of ``refusal_events`` and
``current_assessments``) in every state: every day live, partly and fully recomputed,
sightings written by ``warehouse.gaps.insert_sightings`` (which marks their ``seen_at`` days
and their events' days) and by SQL (which marks nothing: ``mark_sighting_days`` afterwards),
sightings stored before their events (on days without any event) and those events arriving
later (their ``seen_at`` days' rows shadowed), re-audits, re-judged and moved events,
redeliveries; a store filled and recomputed at 0028 then migrated (no stored day marked),
the migration applied twice; a mark that fails after the insert."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest
from gap_reference import PANELS, TOP_GAP_FLAGS, tracker_sql
from grafana_expand import expand
from test_daily_aggregates import ROWS, _dirty, _filters, _later_changes, generated_store
from test_gap_lookups import AUDIT, DAY, _rows, _store_late_events, _variables
from test_review_daily import _count
from trend_data import generate  # on sys.path: test_daily_aggregates puts benchmarks/ there

from processors.gaps import MAX_EXAMPLES
from refusal_audit.alerts.gaps import track_gaps
from warehouse import daily
from warehouse import gaps as gaps_module
from warehouse import report_queries as rq
from warehouse.client import Client
from warehouse.connect import connect
from warehouse.gaps import (
    EVIDENCE_SQL,
    OPEN_GAPS_SQL,
    SIGHTING_COLUMNS,
    GapDb,
    evidence_rows,
    insert_sightings,
    open_gap_rows,
)
from warehouse.migrate import load_migrations, migrate
from warehouse.partition_keys import LOCAL_FINAL

LATE = 40  # sightings of log ids "late-N" without a stored event (test_gap_lookups' ids)
LATE_SEEN = date(2023, 3, 1)  # their audit days: no event of the generated store is there


BASE = "cityHash64(log_id) % 6 = 0"
"""The assessed log ids the fixture's sightings are of."""


@pytest.fixture(scope="module")
def gaps(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    """A migrated store filled by the trend generator (5% redelivered) with the sightings of
    the ``BASE`` log ids written through ``insert_sightings``: every test of the module
    starts from them, whichever pytest-xdist worker runs it and in whatever order (a CI run
    gave two tests to a worker without the one that used to write them)."""
    for client, db in generated_store(chdb_dsn, "gdaily", ROWS):
        insert_sightings(GapDb(client, db), _sighting_rows(client, db, BASE, ""))
        yield client, db


def _sighting_rows(client: Client, db: str, where: str, suffix: str) -> list[list[Any]]:
    """Sightings (``SIGHTING_COLUMNS``) of the assessed log ids matching ``where``, in five
    gaps with three member descriptions, as the tracker writes them (batch ids + ``suffix``)."""
    return [list(r) for r in client.query(
        "SELECT policy_bundle, concat('gap-', toString(cityHash64(log_id) % 5)), log_id, "
        f"concat(batch_id, '{suffix}'), concat('member ', toString(cityHash64(log_id) % 3)), "
        f"'opening description', audited_at FROM `{db}`.assessments FINAL WHERE {where}"
    ).result_rows]  # fmt: skip


def _late_rows(bundle: str) -> list[list[Any]]:
    """``LATE`` sightings of log ids without a stored event, seen on ``LATE_SEEN`` and the
    next 9 days."""
    seen = datetime.combine(LATE_SEEN, time(6), UTC)
    return [[bundle, f"gap-{n % 5}", f"late-{n}", f"late-batch-{n % 4}", "member 0",
             "opening description", seen + timedelta(days=n % 10, minutes=n)]
            for n in range(LATE)]  # fmt: skip


def _compare(client: Client, db: str, tracker: bool = False) -> int:
    """The report's ``top_gap_flags`` (every filter of ``_filters``) and the three panels
    ("All" and one model/product/bundle; the last 500 days and a range that is not
    day-aligned; 1 d and 1 h intervals) equal their former SQL; with ``tracker``, the gap
    tracker's reads and alerts and ``refusal-audit gaps``' too (``_compare_tracker``: about
    50 reads each way, so only in the states named so); return the rows compared."""
    compared = 0
    for f in _filters():
        report = rq.ReportFilter(f.get("since", date(2000, 1, 1)),
                                 f.get("until", date(2100, 1, 1)),
                                 f.get("model"), f.get("product"))  # fmt: skip
        params = report.params(db) | {"limit": 100}
        new = rq.top_gap_flags(client, db, report, limit=100).rows
        old = client.query(TOP_GAP_FLAGS, parameters=params, settings=LOCAL_FINAL).result_rows
        assert new == [tuple(r) for r in old], f
        compared += len(new)
    panels = {p["title"]: p for p in AUDIT["panels"]}
    today = datetime.now(UTC).date()
    spans = [(datetime(2022, 12, 1, tzinfo=UTC),
              datetime.combine(today + timedelta(days=1), time(23, 59, 59), UTC), DAY),
             (datetime(2025, 12, 20, 6, 30, tzinfo=UTC), datetime(2026, 1, 20, tzinfo=UTC),
              3600)]  # fmt: skip
    for variables in _variables(client, db):
        for title, old_sql in PANELS.items():
            new_sql = panels[title]["targets"][0]["rawSql"]
            for start, end, step in spans:
                got = _rows(client, expand(new_sql, variables, start, end, step))
                want = _rows(client, expand(old_sql, variables, start, end, step))
                assert got == want, (title, start, step)
                compared += len(got)
    return compared + (_compare_tracker(client, db) if tracker else 0)


def _compare_tracker(client: Client, db: str) -> int:
    """The gap tracker's evidence read (``evidence_rows``: every gap, and the gaps sighted
    in the newest sightings' last day; 24 h and 1 h cooldowns) and ``refusal-audit gaps``'
    read (``open_gap_rows``: all, one bundle, a ``since``, a limit) equal their former SQL
    over 0019's views; return the rows compared."""
    store, compared = GapDb(client, db), 0
    newest = client.query(f"SELECT max(seen_at) FROM `{db}`.policy_gap_sightings FINAL")
    horizons = [datetime(1970, 1, 1, tzinfo=UTC), newest.result_rows[0][0] - timedelta(days=1)]
    for horizon in horizons:
        for cooldown in (timedelta(hours=24), timedelta(hours=1)):
            got = evidence_rows(store, horizon, cooldown)
            params = {"db": db, "horizon": horizon, "examples": MAX_EXAMPLES,
                      "cooldown": cooldown // timedelta(milliseconds=1)}  # fmt: skip
            want = client.query(tracker_sql(EVIDENCE_SQL), parameters=params,
                                settings=LOCAL_FINAL).result_rows  # fmt: skip
            assert got == [tuple(r) for r in want], (horizon, cooldown)
            compared += len(got)
    assert compared > 0
    bundle = str(client.query(f"SELECT any(policy_bundle) FROM `{db}`.policy_gap_sightings")
                 .result_rows[0][0])  # fmt: skip
    since = datetime(2025, 12, 20, 6, 30, tzinfo=UTC)
    for where, params in (("", {}), ("WHERE policy_bundle = {bundle:String}", {"bundle": bundle}),
                          ("WHERE last_seen >= {since:DateTime64(3, 'UTC')}", {"since": since})):
        for limit in (100, 2):
            got = open_gap_rows(store, params.get("bundle"), params.get("since"), limit)
            want = client.query(tracker_sql(OPEN_GAPS_SQL).replace("__WHERE__", where),
                                parameters={"db": db, "limit": limit, **params},
                                settings=LOCAL_FINAL).result_rows  # fmt: skip
            assert got == [tuple(r) for r in want], (where, limit)
            compared += len(got)
    return compared + _compare_open_gap_filters(client, db) + _compare_alerts(client, db)


def _former_dated_query(client: Client, db: str) -> Any:
    """``warehouse.gaps._dated_query`` as it read before 0029 (``tracker_sql``)."""

    def read(_: GapDb, sql: str, parameters: dict[str, Any]) -> list[tuple[Any, ...]]:
        rows = client.query(tracker_sql(sql), parameters={"db": db, **parameters},
                            settings=LOCAL_FINAL).result_rows  # fmt: skip
        return [tuple(r) for r in rows]

    return read


def _compare_open_gap_filters(client: Client, db: str) -> int:
    """``open_gap_rows`` (``refusal-audit gaps``) with both filters, ``since`` exactly a
    gap's last event (inclusive) and a millisecond after it, a bundle with no gap, a
    limit of 1 (ties in counts broken alike), against the former SQL (break10)."""
    store, compared = GapDb(client, db), 0
    everything = open_gap_rows(store, None, None, 10_000)
    bundle, last = str(everything[len(everything) // 2][0]), everything[len(everything) // 2][4]
    cases = [(bundle, last), (None, last), (None, last + timedelta(milliseconds=1)),
             (bundle, datetime(1970, 1, 1, tzinfo=UTC)), ("no-such-bundle", None),
             ("o'brien", last)]  # fmt: skip
    real = gaps_module._dated_query
    for bundle_, since in cases:
        for limit in (1, 3, 10_000):
            got = open_gap_rows(store, bundle_, since, limit)
            gaps_module._dated_query = _former_dated_query(client, db)
            try:
                want = open_gap_rows(store, bundle_, since, limit)
            finally:
                gaps_module._dated_query = real
            assert got == want, (bundle_, since, limit)
            compared += len(got)
    assert compared > 0
    return compared


def _compare_alerts(client: Client, db: str) -> int:
    """The gap alerts ``track_gaps`` makes now (ids, counts, examples, windows) equal those
    it made over the former SQL, in this state; no batch is read (``since`` past every
    audit), so the state is left as it was (break10)."""
    now, later = datetime(2026, 12, 6, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)
    compared = 0
    for cooldown in (timedelta(hours=24), timedelta(hours=1), timedelta(days=3650)):
        got = track_gaps(client, now=now, since=later, cooldown=cooldown)
        real = gaps_module._dated_query
        gaps_module._dated_query = _former_dated_query(client, db)
        try:
            want = track_gaps(client, now=now, since=later, cooldown=cooldown)
        finally:
            gaps_module._dated_query = real
        assert [a.model_dump() for a in got] == [a.model_dump() for a in want], cooldown
        compared += len(got)
    assert compared > 0, "no alert due: nothing compared"
    return compared


def test_sightings_written_by_the_tracker_before_and_after_their_events(
    gaps: tuple[Client, str],
) -> None:
    client, db = gaps
    writer = GapDb(client, db)
    rows = _sighting_rows(client, db, BASE, "")  # the fixture wrote them through the writer
    assert len(rows) > 300
    days = client.query(f"SELECT DISTINCT toDate(event_time) FROM `{db}`.refusal_events")
    daily.mark_days(client, db, [r[0] for r in days.result_rows])
    assert _compare(client, db, tracker=True) > 300  # every day live
    daily.refresh(client, db, max_days=5)
    assert _compare(client, db) > 300  # five days recorded, the rest live
    daily.refresh_all(client, db)
    assert _dirty(client, db) == []
    assert _compare(client, db, tracker=True) > 300  # every day recorded
    # sightings before their events, seen on days without any event: the writer marks them
    bundle = str(rows[0][0])
    late = _late_rows(bundle)
    insert_sightings(writer, late)
    seen = sorted({r[-1].date() for r in late})
    assert _dirty(client, db) == seen, "the writer marked the sightings' seen_at days"
    assert _compare(client, db) > 300
    daily.refresh_all(client, db)
    assert _compare(client, db) > 300  # the late ids dated by their audit times, recorded
    # the events arrive (copies of stored refusals): their inserts mark their own days only
    _store_late_events(client, db)
    dirty = _dirty(client, db)
    assert dirty and not set(seen) & set(dirty), "the seen_at days stay clean"
    dated = client.query(
        f"SELECT count() FROM `{db}`.daily_gap_sightings WHERE log_id LIKE 'late-%' "
        "AND NOT stored"
    ).result_rows[0][0]
    assert dated >= LATE, "the seen_at days keep their unstored rows"
    assert _compare(client, db) > 300  # the event days live: now dated by their events
    daily.refresh_all(client, db)
    assert _compare(client, db, tracker=True) > 300  # unstored rows shadowed by the recorded
    # newer sightings of stored events: marked on their seen_at and event days
    again = _sighting_rows(client, db, "cityHash64(log_id) % 11 = 0", "-re")
    insert_sightings(writer, again)
    events = client.query(
        f"SELECT DISTINCT toDate(event_time) FROM `{db}`.refusal_events "
        "WHERE log_id IN {ids:Array(String)}",
        parameters={"ids": [str(r[2]) for r in again]},
    ).result_rows
    marked = set(_dirty(client, db))
    assert {r[0] for r in events} <= marked and {r[-1].date() for r in again} <= marked
    assert _compare(client, db) > 300


def test_sightings_inserted_by_sql_are_read_once_marked(gaps: tuple[Client, str]) -> None:
    client, db = gaps
    daily.refresh_all(client, db)
    assert _compare(client, db, tracker=True) > 300
    # sightings inserted by SQL mark nothing; mark_sighting_days afterwards
    rows = _sighting_rows(client, db, "cityHash64(log_id) % 13 = 0", "-sql")
    client.insert("policy_gap_sightings", rows, column_names=list(SIGHTING_COLUMNS),
                  database=db)  # fmt: skip
    assert _dirty(client, db) == [], "an SQL insert into policy_gap_sightings marks nothing"
    days = daily.mark_sighting_days(client, db, [str(r[2]) for r in rows],
                                    [r[-1].date() for r in rows])  # fmt: skip
    assert days and _dirty(client, db) == days
    assert _compare(client, db) > 300  # their days live
    daily.refresh_all(client, db)
    assert _compare(client, db, tracker=True) > 300  # recorded


def test_re_audits_moved_and_re_judged_events_and_redeliveries(
    gaps: tuple[Client, str],
) -> None:
    client, db = gaps
    daily.refresh_all(client, db)
    # re-audits (new batch ids), events re-judged non-refusals and moved to another bundle
    _later_changes(client, db)
    assert _compare(client, db) > 300  # their days live
    for table in ("refusal_events", "assessments", "policy_gap_sightings"):  # redelivered
        client.command(f"INSERT INTO `{db}`.{table} SELECT * FROM `{db}`.{table} FINAL "
                       "WHERE cityHash64(log_id) % 7 = 0")  # fmt: skip
    assert _compare(client, db) > 300
    daily.refresh_all(client, db)
    assert _compare(client, db, tracker=True) > 300


def test_a_store_migrated_from_0028_reads_the_same_without_a_stored_day_marked(
    chdb_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"gmig_{uuid.uuid4().hex[:12]}"
    client = connect(chdb_dsn, db)
    try:
        migrations = load_migrations()
        migrate(client, db, migrations=[m for m in migrations if m.version < "0029"])
        generate(client, db, ROWS // 2, redelivered=0.05)
        rows = _sighting_rows(client, db, "cityHash64(log_id) % 6 = 0", "")
        late = _late_rows(str(rows[0][0]))
        client.insert("policy_gap_sightings", rows + late,
                      column_names=list(SIGHTING_COLUMNS), database=db)  # fmt: skip
        earlier = {k: a for k, a in daily.AGGREGATES.items() if k != "gaps"}
        monkeypatch.setattr(daily, "AGGREGATES", earlier)  # the previous release's refresh
        daily.refresh_all(client, db)
        monkeypatch.undo()
        migrate(client, db)
        seen = sorted({r[-1].date() for r in late})
        stored = {r[0] for r in client.query(
            f"SELECT DISTINCT toDate(event_time) FROM `{db}`.refusal_events").result_rows}
        dirty = _dirty(client, db)
        assert set(seen) <= set(dirty) and not stored & set(dirty), "no stored day marked"
        count = f"SELECT count() FROM `{db}`.daily_gap_sightings"
        filled = _count(client, count)
        assert filled >= len(rows)  # the stored rows (and the unstored ones of event days)
        assert _compare(client, db) > 100
        (m,) = [m for m in migrations if m.version == "0029"]
        for statement in m.statements(db):  # an interrupted run applied again
            client.command(statement)
        assert _count(client, count) == filled and _dirty(client, db) == dirty
        assert _compare(client, db) > 100
        daily.refresh_all(client, db)
        assert _compare(client, db, tracker=True) > 100
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{db}`")
        client.close()


def test_a_sighting_insert_keeps_its_days_dirty_when_the_mark_after_fails(
    gaps: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark before the insert leaves the days dirty if the one after fails for good; a
    transient error of a mark is retried."""
    from clickhouse_connect.driver.exceptions import OperationalError

    client, db = gaps
    daily.refresh_all(client, db)
    assert _dirty(client, db) == []
    rows = _sighting_rows(client, db, "cityHash64(log_id) % 17 = 0", "-m")[:30]
    real, calls = daily.mark_days, [0]

    def flaky(*args: object) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise OperationalError("connection reset")  # transient: retried
        if calls[0] > 2:
            raise ValueError("permanent")  # every mark after the insert
        real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(daily, "mark_days", flaky)
    monkeypatch.setattr("warehouse.gaps.Warehouse", _quick_retries)
    with pytest.raises(ValueError):
        insert_sightings(GapDb(client, db), rows)
    monkeypatch.undo()
    assert calls[0] == 3, calls
    assert _count(client, f"SELECT count() FROM `{db}`.policy_gap_sightings "
                          "WHERE batch_id LIKE '%-m'") == len(rows)  # fmt: skip
    assert _dirty(client, db), "the mark before the insert keeps the days dirty"
    assert _compare(client, db, tracker=True) > 300


def _quick_retries(client: Client, database: str) -> Any:
    from warehouse.store import Warehouse

    return Warehouse(client, database, retry_wait=0.01)
