"""break10 (issue 27) on migration 0030's holds (``warehouse.day_holds``): a writer whose
insert fails, a release lost after its retries, two writers on one day with one dying, a
refresh between a writer's steps, holds of 0 s and below a millisecond, and holds, releases
and refreshes through the owner channel (a store owned by another process)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any

import pytest
from clickhouse_connect.driver.exceptions import OperationalError
from tenacity import wait_none
from test_daily_aggregates import _dirty
from test_key_sets import owner_channel

from warehouse import daily, day_holds
from warehouse.client import Client, WarehouseError
from warehouse.gaps import GapDb, insert_sightings
from warehouse.store import Warehouse

DAY, OTHER = date(2026, 3, 2), date(2026, 3, 3)
AT = datetime(2026, 3, 2, 10, tzinfo=UTC)


@pytest.fixture
def store(warehouse_db: tuple[Client, str], monkeypatch: pytest.MonkeyPatch) -> tuple[Client, str]:
    """An empty migrated store; the writers' retries do not wait."""
    monkeypatch.setattr("warehouse.store.wait_exponential", lambda **_: wait_none())
    return warehouse_db


def _sighting(log_id: str = "log-1", at: datetime = AT) -> list[Any]:
    return ["b", "gap-1", log_id, "batch-1", "d", "g", at]


def _holds(client: Client, db: str) -> list[tuple[date, str, float]]:
    """Each hold's day, holder and seconds left (server clock; <= 0: released/expired)."""
    rows = client.query(
        "SELECT day, holder, dateDiff('millisecond', now64(3), until) / 1000 "
        f"FROM `{db}`.dirty_day_holds FINAL ORDER BY day, holder"
    ).result_rows
    return [(d, str(h), float(s)) for d, h, s in rows]


def _count(client: Client, db: str) -> int:
    return int(client.query(f"SELECT count() FROM `{db}`.policy_gap_sightings").result_rows[0][0])


class _Wrapped:
    """A client whose ``insert`` runs ``on_insert`` first (everything else as ``inner``)."""

    def __init__(self, inner: Client, on_insert: Callable[[], None]) -> None:
        self._inner, self._on_insert = inner, on_insert

    def insert(self, *args: Any, **kwargs: Any) -> Any:
        self._on_insert()
        return self._inner.insert(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_writer_whose_insert_fails_holds_its_day_for_the_hold_only(
    store: tuple[Client, str],
) -> None:
    """The insert fails (nothing stored): the day stays dirty and held, for at most
    WRITER_HOLD_S (the hold has an end: a failed writer never blocks the day for good)."""
    client, db = store

    def fail() -> None:
        raise OperationalError("connection reset by peer")

    with pytest.raises(WarehouseError, match="sighting"):
        insert_sightings(GapDb(_Wrapped(client, fail), db), [_sighting()])  # type: ignore[arg-type]
    assert _count(client, db) == 0
    ((day, _, left),) = _holds(client, db)
    assert day == DAY and 0 < left <= day_holds.WRITER_HOLD_S
    assert _dirty(client, db) == [DAY] and daily.refresh_all(client, db) == []
    insert_sightings(GapDb(client, db), [_sighting()])  # the writer's retry
    assert sorted(h[2] > 0 for h in _holds(client, db)) == [False, True]  # the failed one holds
    assert daily.refresh_all(client, db) == [] and _count(client, db) == 1


def test_a_release_lost_after_its_retries_leaves_the_day_dirty_until_the_hold_ends(
    store: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every release attempt fails transiently: insert_sightings raises after storing the
    rows and marking again; the day stays dirty (and is read live) until the hold ends."""
    client, db = store
    calls = [0]

    def lost(*_: object) -> None:
        calls[0] += 1
        raise OperationalError("connection reset by peer")

    monkeypatch.setattr(day_holds, "release_days", lost)
    with pytest.raises(WarehouseError, match="release of held days"):
        insert_sightings(GapDb(client, db), [_sighting()])
    assert calls[0] == Warehouse(client, db).insert_attempts  # retried, then given up
    monkeypatch.undo()
    assert _count(client, db) == 1 and _dirty(client, db) == [DAY]
    ((_, _, left),) = _holds(client, db)
    assert 0 < left <= day_holds.WRITER_HOLD_S
    assert daily.refresh_all(client, db) == []


def test_two_writers_on_one_day_one_dying_after_its_insert(store: tuple[Client, str]) -> None:
    """Writer A holds, marks and inserts, then dies (no mark after, no release); writer B
    writes the same day completely. A refresh between (and after) leaves the day dirty:
    B's release does not end A's hold."""
    client, db = store
    a = Warehouse(client, db)
    held = a.mark_sighting_days(["log-a"], [DAY], "writer-a")
    client.insert("policy_gap_sightings", [_sighting("log-a")], database=db,
                  column_names=["policy_bundle", "gap_id", "log_id", "batch_id",
                                "description", "gap_description", "seen_at"])  # fmt: skip
    assert held == [DAY]
    assert daily.refresh_all(client, db) == []  # A is dead, its hold lives on
    insert_sightings(GapDb(client, db), [_sighting("log-b")])
    assert daily.refresh_all(client, db) == [] and _dirty(client, db) == [DAY]
    day_holds.release_days(client, db, [DAY], "writer-a")  # as when A's hold expires
    assert daily.refresh_all(client, db) == [DAY] and _dirty(client, db) == []


def test_a_refresh_between_every_step_of_the_writer_records_the_rows(
    store: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh runs after the first mark, just before the insert, after the insert and
    after the mark after (before the release): none records the day; the first refresh
    after the release records it with the sighting."""
    client, db = store
    real, taken = Warehouse.mark_sighting_days, []

    def racing(self: Warehouse, *args: Any) -> list[date]:
        days = real(self, *args)
        taken.extend(daily.refresh_all(client, db))
        return days

    monkeypatch.setattr(Warehouse, "mark_sighting_days", racing)
    wrapped = _Wrapped(client, lambda: taken.extend(daily.refresh_all(client, db)))
    insert_sightings(GapDb(wrapped, db), [_sighting()])  # type: ignore[arg-type]
    monkeypatch.undo()
    assert taken == [] and _dirty(client, db) == [DAY]
    assert daily.refresh_all(client, db) == [DAY] and _dirty(client, db) == []
    recorded = client.query(
        f"SELECT count() FROM `{db}`.{daily.AGGREGATES['gaps'].table} WHERE day = {{d:Date}}",
        parameters={"d": DAY},
    ).result_rows[0][0]
    assert recorded > 0


@pytest.mark.parametrize("seconds", [0.0, 0.0004])
def test_a_hold_of_no_whole_millisecond_holds_nothing(
    store: tuple[Client, str], seconds: float
) -> None:
    client, db = store
    day_holds.hold_days(client, db, [DAY], "writer", seconds=seconds)
    daily.mark_days(client, db, [DAY])
    assert daily.refresh_all(client, db) == [DAY]


def test_holds_releases_and_refreshes_through_the_owner_channel(
    store: tuple[Client, str],
) -> None:
    """A store owned by another process: hold, mark, refresh and release pass the owner's
    guard and behave as on the store itself; insert_sightings through it releases."""
    client, db = store
    remote = owner_channel(Warehouse(client, db))
    day_holds.hold_days(remote, db, [DAY], "writer")  # type: ignore[arg-type]
    daily.mark_days(remote, db, [DAY, OTHER])  # type: ignore[arg-type]
    assert daily.refresh_all(remote, db) == [OTHER]  # type: ignore[arg-type]
    day_holds.release_days(remote, db, [DAY], "writer")  # type: ignore[arg-type]
    assert daily.refresh_all(remote, db) == [DAY]  # type: ignore[arg-type]
    insert_sightings(GapDb(remote, db), [_sighting(at=datetime(2026, 3, 4, tzinfo=UTC))])  # type: ignore[arg-type]
    assert [left <= 0 for _, _, left in _holds(client, db)] == [True, True]
    assert daily.refresh_all(remote, db) == [date(2026, 3, 4)]  # type: ignore[arg-type]
