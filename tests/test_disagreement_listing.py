"""The newest refusal disagreements (``warehouse.disagreement_listing``, the
``refusal_disagreement_events`` named query, the review page and the report): the same first
rows and the same count as the full listing (``run_named(..., full=True)``, the query as it
was), whatever the days' state (all dirty, partly and fully recomputed), after newer versions
that start or stop a disagreement, redeliveries, and with event times outside ClickHouse's
Date range; over several limits, filters and directions. Every version of an event has the
same event time (migration 0023's invariant, ``warehouse.partition_keys``): the read prunes
parts by event time, as the daily aggregates' live parts do."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, timedelta
from typing import Any

import pytest
from test_daily_aggregates import generated_store

from schemas.events import DISAGREEMENT_DIRECTIONS
from warehouse import daily
from warehouse import disagreement_listing as listing
from warehouse.client import Client
from warehouse.disagreement_listing import LISTED, newest_disagreements
from warehouse.queries import NAMED_QUERIES, listing_params, run_named

_NAME = "refusal_disagreement_events"
_ROWS = 6000


@pytest.fixture(scope="module")
def store(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    yield from generated_store(chdb_dsn, "listing", _ROWS)


def _filters() -> list[dict[str, Any]]:
    today = date.today()
    return [{}, {"since": today - timedelta(days=60)}, {"model": "model-01"},
            {"until": today - timedelta(days=90), "product": "product-00"}]  # fmt: skip


def _compare(client: Client, db: str) -> int:
    """Assert the newest rows and the count equal the full listing's under every filter,
    direction and limit; return how many listed rows there were (unfiltered)."""
    for f in _filters():
        full = run_named(client, db, _NAME, full=True, **f).as_dicts()
        for direction in ("", *DISAGREEMENT_DIRECTIONS):
            rows = [r for r in full if not direction or r["direction"] == direction]
            for limit in (0, 1, 5, 17, len(rows), LISTED):
                got = newest_disagreements(client, db, listing_params(db, **f), limit, direction)
                assert got.total == len(rows), (f, direction, limit)
                assert got.rows.as_dicts() == rows[:limit], (f, direction, limit)
        assert run_named(client, db, _NAME, **f).as_dicts() == full[:LISTED], f
    return len(run_named(client, db, _NAME, full=True).rows)


def test_the_newest_disagreements_equal_the_full_listing(store: tuple[Client, str]) -> None:
    client, db = store
    assert daily.dirty_days(client, db, date(1970, 1, 1), date(2149, 6, 6)), "all live"
    assert _compare(client, db) > 20
    daily.refresh(client, db, max_days=5)
    assert _compare(client, db) > 20
    daily.refresh_all(client, db)
    assert _compare(client, db) > 20  # every day from the aggregate
    client.command(  # newer versions: now disagreeing, and no longer disagreeing
        f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE (true AS classifier_is_refusal, "
        "false AS detected_is_refusal, 'classifier_refusal_detector_not' AS "
        "refusal_disagreement, ingested_at + toIntervalDay(1) AS ingested_at) "
        f"FROM `{db}`.refusal_events FINAL WHERE cityHash64(log_id) % 13 = 0"
    )
    client.command(
        f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE ('none' AS refusal_disagreement, "
        "ingested_at + toIntervalDay(1) AS ingested_at) "
        f"FROM `{db}`.refusal_events FINAL WHERE refusal_disagreement != 'none' "
        "AND cityHash64(log_id) % 3 = 0"
    )
    assert _compare(client, db) > 20
    daily.refresh_all(client, db)
    assert _compare(client, db) > 20


def test_redeliveries_and_times_outside_the_date_range(
    store: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, db = store
    read: list[str] = []
    rows_of = listing._rows
    monkeypatch.setattr(listing, "_rows", lambda c, sql, p: read.append(sql) or rows_of(c, sql, p))
    daily.refresh_all(client, db)
    newest = run_named(client, db, _NAME, full=True).as_dicts()[:3]
    moved = ", ".join(f"'{r['log_id']}'" for r in newest)
    for _ in range(2):  # the newest disagreements delivered again (same event time, 0023)
        client.command(
            f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE (ingested_at + "
            f"toIntervalDay(3) AS ingested_at) FROM `{db}`.refusal_events FINAL "
            f"WHERE log_id IN ({moved})"
        )
        assert _compare(client, db) > 20
    daily.refresh_all(client, db)
    assert _compare(client, db) > 20
    for n, when in enumerate(("1969-12-30 10:00:00", "2150-01-01 10:00:00")):
        # toDate wraps these onto other days: 1969 onto 2149-06-05 (the "newest" day, whose
        # rows are older than every other), 2150 onto 1970; the read falls back, still exact
        client.command(
            f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE (concat(log_id, '-{n}') AS "
            f"log_id, toDateTime64('{when}', 3, 'UTC') AS event_time) "
            f"FROM (SELECT * FROM `{db}`.refusal_events FINAL WHERE log_id IN ({moved}))"
        )
        wrapped = [r for r in run_named(client, db, _NAME, full=True).as_dicts()
                   if r["log_id"].endswith(f"-{n}")]  # fmt: skip
        assert len(wrapped) == len(newest), "the wrapped events are listed"
        read.clear()
        assert _compare(client, db) > 20
        assert listing._FALLBACK in read or n == 1, "the wrapped day made the read fall back"
        daily.refresh_all(client, db)
        assert _compare(client, db) > 20


def test_the_named_query_keeps_its_full_listing() -> None:
    query = NAMED_QUERIES[_NAME]
    assert query.newest is not None and "LIMIT" not in query.sql
    with pytest.raises(ValueError, match="unknown direction"):
        newest_disagreements(None, "db", {}, 5, "sideways")  # type: ignore[arg-type]
