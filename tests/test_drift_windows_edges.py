"""The drift detectors' bounded reads (``warehouse.drift_windows``) at their edges (break9,
issue 27): late arrivals exactly at the window's end plus the grace and one millisecond
before it, first arrivals known only to ``event_arrivals`` (the versions merged away) on
either side of that bound, a window range holding only late events, events dated 1900 and
2299 and half an hour before DateTime's end (2106-02-07 06:28:15, where the view's window
end wraps) arriving late, and 1-minute windows over two days: every count equals the whole-store
views' (``tests/drift_reference.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from drift_reference import from_views
from test_daily_aggregates import generated_store

from warehouse.client import Client
from warehouse.drift_assessments import window_counts

W, G = 3600, 300
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)


@pytest.fixture(scope="module")
def store(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    yield from generated_store(chdb_dsn, "dedge", 5000)


def _copies(client: Client, db: str, prefix: str, pick: int, event_time: str, arrival: str) -> int:
    """Copies (event and assessments) of the stored refusals with ``cityHash64(log_id) % 50
    = pick`` under ids ``prefix + log_id``, with ``event_time`` and ``ingested_at`` given as
    SQL of the original row; return how many."""
    client.command(
        f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE (concat('{prefix}', log_id) AS "
        f"log_id, {event_time} AS event_time, {arrival} AS ingested_at) FROM (SELECT * FROM "
        f"`{db}`.refusal_events FINAL WHERE is_refusal AND cityHash64(log_id) % 50 = {pick})"
    )
    client.command(
        f"INSERT INTO `{db}`.assessments SELECT * REPLACE (concat('{prefix}', log_id) AS "
        f"log_id, {event_time} AS event_time) FROM (SELECT * FROM `{db}`.assessments FINAL "
        f"WHERE cityHash64(log_id) % 50 = {pick})"
    )
    return int(client.query(f"SELECT count() FROM `{db}`.refusal_events "
                            f"WHERE startsWith(log_id, '{prefix}')").result_rows[0][0])  # fmt: skip


def _compare(
    client: Client,
    db: str,
    monkeypatch: pytest.MonkeyPatch,
    ranges: list[tuple[int, int, datetime, datetime]],
) -> tuple[int, int]:
    """Assert the bounded counts equal the views' for every (window, grace, start, end);
    return the windows compared and the late rows counted."""  # fmt: skip
    windows = late = 0
    for w, g, start, end in ranges:
        kw = {"window_seconds": w, "grace_seconds": g, "start": start, "end": end}
        new = window_counts(client, db, **kw)
        with from_views(monkeypatch, db):
            old = window_counts(client, db, **kw)
        assert new == old, (w, g, start, end)
        windows += len(new)
        late += sum(c.late for window in new.values() for c in window.values())
    return windows, late


def _ranges() -> list[tuple[int, int, datetime, datetime]]:
    return [
        (W, G, NOW - timedelta(hours=27), NOW + timedelta(hours=3)),
        (W, 0, NOW - timedelta(hours=27), NOW + timedelta(hours=3)),
        (86400, G, NOW - timedelta(days=27), NOW + timedelta(days=2)),
        (60, G, NOW - timedelta(days=2), NOW),
        (W, G, NOW + timedelta(days=10), NOW + timedelta(days=11)),  # only late events
    ]


def test_arrivals_at_the_bound_merged_away_and_far_away(
    store: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, db = store
    assert _compare(client, db, monkeypatch, _ranges())[0] > 50
    # events 10 hours ago, arriving exactly at their window's end plus the grace (late)
    # and one millisecond before it (on time)
    at = f"toDateTime64('{(NOW - timedelta(hours=10, minutes=17)):%Y-%m-%d %H:%M:%S}', 3, 'UTC')"
    bound = f"toStartOfInterval({at}, toIntervalSecond({W})) + toIntervalSecond({W + G})"
    assert _copies(client, db, "bound-", 1, at, bound) > 0
    assert _copies(client, db, "before-", 2, at, f"{bound} - toIntervalMillisecond(1)") > 0
    # first arrivals at and before the bound, then a redelivery a day later; merged, only
    # event_arrivals knows the first arrivals
    assert _copies(client, db, "mbound-", 3, at, bound) > 0
    assert _copies(client, db, "mbefore-", 4, at, f"{bound} - toIntervalMillisecond(1)") > 0
    for prefix in ("mbound-", "mbefore-"):
        client.command(
            f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE (ingested_at + "
            f"toIntervalDay(1) AS ingested_at) FROM `{db}`.refusal_events FINAL "
            f"WHERE startsWith(log_id, '{prefix}')"
        )
    # old events arriving only in a future range (every event of it late), and events
    # dated 1900 and 2299 arriving late into the recent hours
    later = f"toDateTime64('{NOW + timedelta(days=10, minutes=30):%Y-%m-%d %H:%M:%S}', 3, 'UTC')"
    assert _copies(client, db, "future-", 5, "event_time", later) > 0
    recent = f"toDateTime64('{NOW - timedelta(hours=3):%Y-%m-%d %H:%M:%S}', 3, 'UTC')"
    for year, pick, day in ((1900, 6, "03-01 12:00"), (2299, 7, "03-01 12:00"),
                            (2106, 8, "02-07 06:00")):  # fmt: skip
        when = f"toDateTime64('{year}-{day}:00', 3, 'UTC')"
        assert _copies(client, db, f"y{year}-", pick, when, recent) > 0
    windows, late = _compare(client, db, monkeypatch, _ranges())
    assert windows > 50 and late > 0
    client.command(f"OPTIMIZE TABLE `{db}`.refusal_events FINAL")
    merged = client.query(f"SELECT count() FROM `{db}`.refusal_events WHERE startsWith(log_id, "
                          "'mb') GROUP BY log_id HAVING count() > 1").result_rows  # fmt: skip
    assert merged == [], "one version per key left"
    assert _compare(client, db, monkeypatch, _ranges())[1] == late
