"""The gap reads of migration 0029 at the edges found by break9 (issue 27): days at the ends
of ClickHouse's ``Date`` range and a tracker killed between its sighting insert and its
mark after, with a refresh between its mark before and the insert. Each test compares
every gap read with its former SQL (``test_gap_daily._compare``)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from test_daily_aggregates import _dirty, generated_store
from test_gap_daily import _compare

from refusal_audit.alerts.gaps import track_gaps
from warehouse import daily
from warehouse.client import Client
from warehouse.gaps import GapDb, insert_sightings
from warehouse.store import Warehouse


def _store(chdb_dsn: str, rows: int) -> Iterator[tuple[Client, str]]:
    """A migrated store of ``rows`` generated refusals without sightings, every day
    recomputed."""
    for client, db in generated_store(chdb_dsn, "gedge", rows):
        client.command(f"TRUNCATE TABLE `{db}`.policy_gap_sightings")  # the generator's
        daily.refresh_all(client, db)
        yield client, db


@pytest.fixture(scope="module")
def store(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    """One store for the module (a generated store took 8-9 s per test): every test writes
    log ids and batch ids of its own, so each holds in any order and beside the others'
    rows, which every read it compares sees too."""
    yield from _store(chdb_dsn, 3000)


def _assessed(client: Client, db: str, n: int) -> tuple[str, list[str]]:
    rows = client.query(f"SELECT policy_bundle, log_id FROM `{db}`.current_assessments "
                        f"ORDER BY log_id LIMIT {n}").result_rows  # fmt: skip
    return str(rows[0][0]), [str(r[1]) for r in rows]


def _copy_events(client: Client, db: str, ids: list[str], prefix: str, at: str) -> None:
    """Copies of the events and assessments of ``ids`` under log ids ``prefix + id``, with
    the event time ``at`` (an SQL DateTime64 expression)."""
    for table in ("refusal_events", "assessments"):
        client.command(
            f"INSERT INTO `{db}`.{table} SELECT * REPLACE (concat('{prefix}', log_id) AS log_id, "
            f"{at} AS event_time) FROM (SELECT * FROM `{db}`.{table} FINAL "
            "WHERE has({ids:Array(String)}, log_id))",
            parameters={"ids": ids},
        )


def test_clickhouse_day_is_the_day_todate_gives(warehouse_db: tuple[Client, str]) -> None:
    client, _ = warehouse_db
    rng = random.Random(9)
    start = datetime(1900, 1, 1, tzinfo=UTC)
    times = [
        start,
        datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(2149, 6, 6, 23, 59, 59, 999000, tzinfo=UTC),
        datetime(2149, 6, 7, tzinfo=UTC),
        datetime(2299, 12, 31, 23, 59, 59, tzinfo=UTC),
    ]
    times += [
        start + timedelta(milliseconds=rng.randrange(400 * 365 * 86_400_000)) for _ in range(2000)
    ]
    times += [datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=rng.randrange(
        -3 * 86_400_000, 86_400_000)) for _ in range(1000)]  # fmt: skip
    got = client.query(
        "SELECT toDate(t) FROM (SELECT arrayJoin({t:Array(DateTime64(3, 'UTC'))}) AS t)",
        parameters={"t": times},
    ).result_rows
    assert [daily.clickhouse_day(t) for t in times] == [r[0] for r in got]


@pytest.mark.parametrize(
    "seen",
    [datetime(1900, 1, 1, 5, tzinfo=UTC), datetime(2299, 1, 1, 5, tzinfo=UTC),
     datetime(2149, 6, 7, 5, tzinfo=UTC)],
)  # fmt: skip
def test_sightings_seen_outside_the_date_range_are_read(
    store: tuple[Client, str], seen: datetime
) -> None:
    """Sightings without a stored event, audited at a time toDate wraps onto another day,
    in a gap with stored ones: the writer marks the wrapped day (it marked the clamped
    1970-01-01 / 2149-06-06 and the sightings were read from nowhere)."""
    client, db = store
    bundle, ids = _assessed(client, db, 4)
    rows: list[list[Any]] = [
        [
            bundle,
            "gap-y",
            f"unstored-{seen.year}-{i}",
            f"batch-y{seen.year}",
            "member y",
            "opening",
            seen + timedelta(hours=i),
        ]
        for i in range(3)
    ]
    rows += [[bundle, "gap-y", i, f"batch-z{seen.year}", "member y", "opening",
              datetime(2025, 5, 5, tzinfo=UTC)] for i in ids]  # fmt: skip
    insert_sightings(GapDb(client, db), rows)
    assert daily.clickhouse_day(seen) in _dirty(client, db)
    assert _compare(client, db) > 0
    daily.refresh_all(client, db)
    assert _compare(client, db) > 0


def test_events_on_the_last_date_day_are_read_by_the_panels(store: tuple[Client, str]) -> None:
    """Events on 2149-06-06 (Date's last day), dirty: the panels' inline source computed
    that day's live rows up to ``max(day) + 1`` in Date, which wraps to 1970-01-01, and
    read none of them (the sightings were dated by their audit times)."""
    client, db = store
    bundle, ids = _assessed(client, db, 5)
    last = "toDateTime64('2149-06-06 23:59:59.999', 3, 'UTC')"
    _copy_events(client, db, ids, "last-", last)
    rows = [[bundle, "gap-x", f"last-{i}", "batch-x", "member", "opening",
             datetime(2025, 5, 5, tzinfo=UTC)] for i in ids]  # fmt: skip
    insert_sightings(GapDb(client, db), rows)
    assert date(2149, 6, 6) in _dirty(client, db)
    assert _compare(client, db) > 0
    daily.refresh_all(client, db)
    assert _compare(client, db) > 0


@pytest.fixture
def flagged(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    """A store whose audit batches hold policy-gap flags (about 1 in 50 batches of 200)."""
    for client, db in _store(chdb_dsn, 30_000):
        flags = client.query(f"SELECT count() FROM `{db}`.audit_batches FINAL "
                             "WHERE length(policy_gap_flags) > 0").result_rows[0][0]  # fmt: skip
        assert flags > 0
        yield client, db


def test_a_tracker_killed_after_its_insert_leaves_no_stale_day(
    flagged: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tracker marks its days, a refresh reads the marks and recomputes the days before
    the sightings are visible, the sightings are inserted, the tracker dies (kill -9)
    before its mark after the insert; the restarted tracker runs: every gap read must
    still equal its former SQL. (Found by break9; failed until the writers held their
    days, migration 0030: the refresh now leaves the held days dirty.)"""
    client, db = flagged
    real, calls = Warehouse.mark_sighting_days, [0]

    def racing(
        self: Warehouse, log_ids: Any, seen_days: Any, holder: str | None = None
    ) -> list[date]:
        calls[0] += 1
        if calls[0] > 1:
            raise KeyboardInterrupt("kill -9 before the mark after the insert")
        days = real(self, log_ids, seen_days, holder)
        daily.refresh_all(self.client, self.database)  # read the marks, not the rows
        assert set(days) <= set(_dirty(self.client, self.database)), "held days recorded"
        return days

    monkeypatch.setattr(Warehouse, "mark_sighting_days", racing)
    now = datetime.now(UTC)
    with pytest.raises(KeyboardInterrupt):
        track_gaps(client, now=now)
    monkeypatch.undo()
    assert client.query(f"SELECT count() FROM `{db}`.policy_gap_sightings").result_rows[0][0]
    track_gaps(client, now=now)  # the tracker restarted
    assert _compare(client, db, tracker=True) > 0


@pytest.mark.parametrize(
    "when",
    ["2025-05-05 00:00:00.000", "2025-05-05 23:59:59.999", "1970-01-01 00:00:00.000",
     "1900-01-01 00:00:00.000", "2299-12-31 23:59:59.999"],
)  # fmt: skip
def test_events_at_day_bounds_and_far_dates_are_read(store: tuple[Client, str], when: str) -> None:
    """Sighted events at UTC midnight, a millisecond before it, on Date's first day and
    outside Date's range, sighted at midnight: read before and after the refresh."""
    client, db = store
    bundle, ids = _assessed(client, db, 5)
    at = f"toDateTime64('{when}', 3, 'UTC')"
    edge = f"edge{when[:4]}{when[11:13]}-"  # this case's own log ids
    _copy_events(client, db, ids, edge, at)
    midnight = datetime(2025, 6, 1, tzinfo=UTC)
    rows = [[bundle, "gap-e", f"{edge}{i}", f"batch-{edge}", "member", "opening", midnight]
            for i in ids]  # fmt: skip
    insert_sightings(GapDb(client, db), rows)
    assert _compare(client, db) > 0
    daily.refresh_all(client, db)
    assert _compare(client, db) > 0
