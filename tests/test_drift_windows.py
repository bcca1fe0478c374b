"""The drift detectors' bounded reads (``warehouse.drift_windows``, issue 27) count exactly what
the whole-store views count (``tests/drift_reference.py``): on a generated store (on-time and
naturally late events, redeliveries, verdicts), then with events arriving days after their
time (late into a recent window), re-audits (verdicts on the replaced assessment no longer
count), changed verdicts, events re-judged as non-refusals, the same rows stored again, and every
older version merged away (their first arrival then only in ``event_arrivals``); hourly,
daily and unaligned windows, recent and old ranges."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from drift_reference import from_views
from test_daily_aggregates import generated_store

from warehouse.client import Client
from warehouse.drift_assessments import window_counts

ROWS = 20000


@pytest.fixture(scope="module")
def store(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    """A migrated store filled by the trend generator (5% redelivered two hours later)."""
    yield from generated_store(chdb_dsn, "dwin", ROWS)


def _ranges() -> list[tuple[int, datetime, datetime]]:
    """(window seconds, start, end): the detectors' 27 hours and 27 days up to now, an
    unaligned range of 15-minute windows 100 days ago, and every stored day."""
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    old = now - timedelta(days=100, minutes=7)
    return [
        (3600, now - timedelta(hours=27), now),
        (86400, now - timedelta(days=27), now),
        (900, old, old + timedelta(days=2)),
        (86400, now - timedelta(days=500), now + timedelta(days=2)),
    ]


def _compare(client: Client, db: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """Assert the bounded counts equal the views' for every range; return the windows
    compared."""
    windows = 0
    for w, start, end in _ranges():
        kw = {"window_seconds": w, "grace_seconds": 300, "start": start, "end": end}
        new = window_counts(client, db, **kw)
        with from_views(monkeypatch, db):
            old = window_counts(client, db, **kw)
        assert new == old, (w, start, end)
        windows += len(new)
    return windows


def _changes(client: Client, db: str, now: datetime) -> None:
    """Late arrivals, re-audits, changed verdicts and events re-judged non-refusals."""
    late_at = (now - timedelta(hours=5)).strftime("%Y-%m-%d %H:%M:%S")
    client.command(  # copies of old events under new ids, first arriving five hours ago
        f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE (concat('late-', log_id) AS log_id, "
        f"toDateTime64('{late_at}', 3, 'UTC') AS ingested_at) "
        f"FROM `{db}`.refusal_events FINAL WHERE is_refusal AND cityHash64(log_id) % 40 = 0"
    )
    client.command(
        f"INSERT INTO `{db}`.assessments SELECT * REPLACE (concat('late-', log_id) AS log_id) "
        f"FROM `{db}`.assessments FINAL WHERE cityHash64(log_id) % 40 = 0"
    )
    client.command(  # re-audits: the verdicts on the replaced assessments stop counting
        f"INSERT INTO `{db}`.assessments SELECT * REPLACE (NOT is_estimated_false_positive AS "
        "is_estimated_false_positive, audited_at + toIntervalDay(1) AS audited_at) "
        f"FROM `{db}`.assessments FINAL WHERE cityHash64(log_id) % 11 = 0"
    )
    client.command(  # a reviewer changes their mind
        f"INSERT INTO `{db}`.review_verdicts SELECT * REPLACE (concat(verdict_id, '-2') AS "
        "verdict_id, if(verdict = 'agree', 'disagree', 'agree') AS verdict, "
        "submitted_at + toIntervalHour(1) AS submitted_at) "
        f"FROM `{db}`.review_verdicts FINAL WHERE cityHash64(log_id) % 3 = 0"
    )
    client.command(
        f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE (false AS is_refusal, "
        "ingested_at + toIntervalDay(1) AS ingested_at) "
        f"FROM `{db}`.refusal_events FINAL WHERE is_refusal AND cityHash64(log_id) % 13 = 0"
    )


def test_bounded_window_counts_equal_the_views(
    store: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, db = store
    assert _compare(client, db, monkeypatch) > 300
    now = datetime.now(UTC)
    _changes(client, db, now)
    kw = {"window_seconds": 3600, "grace_seconds": 300, "start": now - timedelta(hours=27),
          "end": now}  # fmt: skip
    late = sum(c.late for window in window_counts(client, db, **kw).values()
               for c in window.values())  # fmt: skip
    assert late > 100, "the copies arriving five hours ago count late in a recent window"
    assert _compare(client, db, monkeypatch) > 300
    for table in ("refusal_events", "assessments", "review_verdicts"):  # stored again
        client.command(f"INSERT INTO `{db}`.{table} SELECT * FROM `{db}`.{table} FINAL "
                       "WHERE cityHash64(log_id) % 7 = 0")  # fmt: skip
    assert _compare(client, db, monkeypatch) > 300
    # merged: the first versions of the redelivered and re-judged events are gone, so only
    # event_arrivals still knows when they first arrived
    redelivered = f"SELECT count() FROM `{db}`.refusal_events WHERE log_id IN (SELECT log_id " \
        f"FROM `{db}`.refusal_events GROUP BY log_id HAVING count() > 1)"  # fmt: skip
    assert client.query(redelivered).result_rows[0][0] > 100
    client.command(f"OPTIMIZE TABLE `{db}`.refusal_events FINAL")
    assert client.query(redelivered).result_rows[0][0] == 0
    assert _compare(client, db, monkeypatch) > 300
