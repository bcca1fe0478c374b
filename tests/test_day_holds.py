"""Holds on dirty days (migration 0030, ``warehouse.day_holds``): ``refresh`` leaves a day
dirty while a writer holds it (between the writer's first mark and the end of its insert),
takes it once every hold on it is released or expired, and the writers release what they
hold. The race the holds close is reproduced in ``tests/test_gap_daily_edges.py``
(``test_a_tracker_killed_after_its_insert_leaves_no_stale_day``)."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime

import pytest
from test_daily_aggregates import _dirty

from warehouse import daily, day_holds
from warehouse.client import Client
from warehouse.gaps import GapDb, insert_sightings

DAY, OTHER = date(2026, 3, 2), date(2026, 3, 3)


@pytest.fixture
def store(warehouse_db: tuple[Client, str]) -> tuple[Client, str]:
    """An empty migrated store (every test marks its own days)."""
    return warehouse_db


def test_a_held_day_stays_dirty_until_every_holder_releases_it(
    store: tuple[Client, str],
) -> None:
    client, db = store
    day_holds.hold_days(client, db, [DAY], "writer-a")
    day_holds.hold_days(client, db, [DAY], "writer-b")
    daily.mark_days(client, db, [DAY, OTHER])
    assert daily.refresh_all(client, db) == [OTHER]  # the held day is left dirty
    assert _dirty(client, db) == [DAY]
    day_holds.release_days(client, db, [DAY], "writer-b")
    assert daily.refresh_all(client, db) == [] and _dirty(client, db) == [DAY]  # a holds it
    day_holds.release_days(client, db, [DAY], "writer-a")
    assert daily.refresh_all(client, db) == [DAY]
    assert _dirty(client, db) == []


def test_an_expired_hold_no_longer_keeps_the_day(store: tuple[Client, str]) -> None:
    """A writer that died holding a day: its hold ends by itself."""
    client, db = store
    day_holds.hold_days(client, db, [DAY], "dead-writer", seconds=0.5)
    daily.mark_days(client, db, [DAY])
    assert daily.refresh_all(client, db) == []
    time.sleep(1.0)
    assert daily.refresh_all(client, db) == [DAY]
    assert _dirty(client, db) == []


def test_a_negative_hold_is_refused(store: tuple[Client, str]) -> None:
    client, db = store
    with pytest.raises(ValueError, match="negative"):
        day_holds.hold_days(client, db, [DAY], "writer", seconds=-1)


def test_the_sighting_writer_releases_what_it_held(store: tuple[Client, str]) -> None:
    """insert_sightings holds the days of its first mark and releases them after its second:
    a refresh then records them, and no hold of it is left."""
    client, db = store
    at = datetime(2026, 3, 2, 10, tzinfo=UTC)
    insert_sightings(GapDb(client, db), [["b", "gap-1", "log-1", "batch-1", "d", "g", at]])
    holds = client.query(
        f"SELECT day, holder, until <= now64(3) FROM `{db}`.dirty_day_holds FINAL"
    ).result_rows
    assert [(d, released) for d, _, released in holds] == [(DAY, True)]
    assert daily.refresh_all(client, db) == [DAY]
    assert _dirty(client, db) == []
