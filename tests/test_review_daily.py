"""Migration 0028 (trendD): ``review_agreement``, ``verified_false_positive_rate`` and the
review panels read the daily aggregates ``agreements``, ``reviews`` and ``counts`` and return
what their former SQL returned (``tests/daily_reference.py``, ``tests/review_reference.py``)
in the states the verdicts add to 0024's: verdicts revised by their reviewer, a second
reviewer's verdict (majorities and ties), verdicts stored twice, verdicts on assessments a
re-audit superseded or on events re-judged a non-refusal or moved to another bundle, verdicts
written by ``warehouse.review.insert_verdicts`` (which marks their days) and by SQL followed
by ``warehouse.daily.mark_verdict_days``, events and assessments redelivered; and on a store
filled and recomputed at 0027, then migrated (the backfill: no day marked dirty), the
migration applied again. Only the reads of the verdicts are compared here; the other named
queries, panels and the report's queries in ``tests/test_daily_aggregates.py`` and
``tests/test_grafana_daily.py``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from review_reference import PANELS as REVIEW_PANELS
from test_daily_aggregates import ROWS, _dirty, _later_changes, generated_store
from test_daily_aggregates import _compare as compare_named
from test_grafana_daily import _compare as compare_panels
from trend_data import generate  # on sys.path: test_daily_aggregates puts benchmarks/ there

from warehouse import daily
from warehouse.client import Client
from warehouse.connect import connect
from warehouse.migrate import load_migrations, migrate
from warehouse.review import current_verdicts, insert_verdicts
from warehouse.store import Warehouse

NEW = ("agreements", "reviews")  # migration 0028's aggregates
# the reads of the verdicts (the other named queries, panels and the report's queries read
# no verdict: tests/test_daily_aggregates.py and tests/test_grafana_daily.py compare them in
# the states of the assessments and events)
REVIEW_READS = ("review_agreement", "verified_false_positive_rate")


@pytest.fixture(scope="module")
def reviewed(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    """A migrated store filled by the trend generator (5% redelivered)."""
    yield from generated_store(chdb_dsn, "rdaily", ROWS)


def _compare(client: Client, db: str) -> None:
    assert compare_named(client, db, REVIEW_READS, report=False) > 20
    assert compare_panels(client, REVIEW_PANELS, with_variables=False) > 100


def _count(client: Client, sql: str) -> int:
    return int(client.query(sql).result_rows[0][0])


def test_the_review_reads_equal_their_former_sql_in_every_state(
    reviewed: tuple[Client, str],
) -> None:
    client, db = reviewed
    assert _count(client, f"SELECT count() FROM `{db}`.current_verdicts") > 20
    _compare(client, db)  # every day live
    daily.refresh_all(client, db)
    assert _dirty(client, db) == []
    _compare(client, db)  # every day recorded
    # revised verdicts (a newer row of the same reviewer, the judgement flipped), and SQL
    # inserts marked afterwards
    revise = "cityHash64(verdict_id) % 3 = 0"
    client.command(
        f"INSERT INTO `{db}`.review_verdicts SELECT * REPLACE (concat(verdict_id, '-r') AS "
        "verdict_id, 'disagree' AS verdict, NOT model_false_positive AS "
        "corrected_false_positive, 'policy_gray_zone' AS corrected_category, "
        "submitted_at + toIntervalHour(1) AS submitted_at) "
        f"FROM `{db}`.current_verdicts WHERE {revise}"
    )
    assert _dirty(client, db) == [], "an SQL insert into review_verdicts marks nothing"
    log_ids = client.query(f"SELECT log_id FROM `{db}`.current_verdicts WHERE {revise}")
    marked = daily.mark_verdict_days(client, db, [r[0] for r in log_ids.result_rows])
    assert marked and _dirty(client, db) == marked
    _compare(client, db)
    daily.refresh_all(client, db)
    _compare(client, db)
    # a second reviewer through the writer: votes 2 (ties keep the model's judgement)
    store = Warehouse(client, db)
    verdicts = sorted(current_verdicts(store), key=lambda v: v.verdict_id)[::2]
    second = [
        v.model_copy(update={"reviewer": "reviewer-x", "verdict_id": f"{v.verdict_id}-x",
                             "submitted_at": v.submitted_at + timedelta(hours=3)})
        for v in verdicts
    ]  # fmt: skip
    insert_verdicts(store, second)
    assert _dirty(client, db), "insert_verdicts marked its events' days"
    _compare(client, db)
    daily.refresh_all(client, db)
    _compare(client, db)
    # re-audits, re-judged and moved events (their verdicts no longer on current assessments)
    _later_changes(client, db)
    _compare(client, db)
    daily.refresh_all(client, db)
    # the same verdicts stored twice
    client.command(f"INSERT INTO `{db}`.review_verdicts SELECT * FROM `{db}`.review_verdicts "
                   "WHERE cityHash64(log_id) % 4 = 0")  # fmt: skip
    _compare(client, db)
    for table in ("refusal_events", "assessments"):  # a redelivery: the same rows again
        client.command(f"INSERT INTO `{db}`.{table} SELECT * FROM `{db}`.{table} FINAL "
                       "WHERE cityHash64(log_id) % 7 = 0")  # fmt: skip
    assert _dirty(client, db)
    _compare(client, db)


def test_a_store_migrated_from_0027_reads_the_same_without_a_dirty_day(
    chdb_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"rmig_{uuid.uuid4().hex[:12]}"
    client = connect(chdb_dsn, db)
    try:
        migrations = load_migrations()
        migrate(client, db, migrations=[m for m in migrations if m.version < "0028"])
        generate(client, db, ROWS, redelivered=0.05)
        _later_changes(client, db)
        earlier = {k: a for k, a in daily.AGGREGATES.items() if k not in (*NEW, "gaps")}
        monkeypatch.setattr(daily, "AGGREGATES", earlier)  # the previous release's refresh
        daily.refresh_all(client, db)
        monkeypatch.undo()
        migrate(client, db)
        assert _dirty(client, db) == [], "the backfill marks no day"
        tables = ("daily_review_agreements", "daily_review_counts")
        rows = {t: _count(client, f"SELECT count() FROM `{db}`.{t}") for t in tables}
        assert all(n > 0 for n in rows.values())
        _compare(client, db)
        (m,) = [m for m in migrations if m.version == "0028"]
        for statement in m.statements(db):  # an interrupted run applied again
            client.command(statement)
        assert {t: _count(client, f"SELECT count() FROM `{db}`.{t}") for t in tables} == rows
        _compare(client, db)
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{db}`")
        client.close()


def test_a_verdict_insert_keeps_its_days_dirty_when_a_mark_fails(
    reviewed: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transient error of the mark is retried; a mark that fails for good after the
    insert still leaves the days the first mark dirtied (found by the break review: a
    single unretried mark after the insert left the aggregates without the verdicts for
    good); a large import's ids are looked up in chunks."""
    from clickhouse_connect.driver.exceptions import OperationalError

    client, db = reviewed
    daily.refresh_all(client, db)
    assert _dirty(client, db) == []
    store = Warehouse(client, db, retry_wait=0.01)
    verdicts = sorted(current_verdicts(store), key=lambda v: v.verdict_id)[:40]
    half = len(verdicts) // 2
    assert half >= 5
    flipped = [
        v.model_copy(update={"reviewer": "reviewer-m", "verdict_id": f"{v.verdict_id}-m",
                             "submitted_at": v.submitted_at + timedelta(hours=5),
                             "verdict": "disagree", "corrected_category": "policy_gray_zone",
                             "corrected_false_positive": not v.model_false_positive})
        for v in verdicts
    ]  # fmt: skip
    real, calls = daily.mark_days, [0]

    def once_transient(*args: object) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise OperationalError("connection reset")
        real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(daily, "mark_days", once_transient)
    insert_verdicts(store, flipped[:half])
    assert calls[0] == 3 and _dirty(client, db), "retried, then marked before and after"
    _compare(client, db)
    daily.refresh_all(client, db)

    def fails_after_the_insert(*args: object) -> None:
        calls[0] += 1
        if calls[0] > 4:  # the first mark (call 4) works, every later one fails
            raise ValueError("permanent")
        real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(daily, "mark_days", fails_after_the_insert)
    with pytest.raises(ValueError):
        insert_verdicts(store, flipped[half:])
    assert calls[0] == 5, calls
    monkeypatch.undo()
    assert _count(client, f"SELECT count() FROM `{db}`.review_verdicts "
                          "WHERE reviewer = 'reviewer-m'") == len(flipped)  # fmt: skip
    assert _dirty(client, db), "the mark before the insert keeps the days dirty"
    daily.refresh_all(client, db)
    _compare(client, db)
    monkeypatch.setattr(daily, "VERDICT_ID_CHUNK", 3)
    days = daily.mark_verdict_days(client, db, [v.log_id for v in flipped])
    assert days and sorted(days) == sorted(set(_dirty(client, db)))
