"""Daily aggregates (migration 0024) at their edges (issue 27, break27): event times on UTC
midnight boundaries and outside ClickHouse's ``Date`` range (a store written before
``RefusalEvent``'s event-time check, or by a manual INSERT: ``toDate`` wraps them onto other
days, and the old queries count them there), many months in one block, a day whose every
assessment is later retired, and a store migrated from 0023 with data, read before any
refresh. Every rewritten query must return what ``tests/daily_reference.py`` returns."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from typing import Any

import pytest
from daily_reference import NAMED
from test_daily_aggregates import (
    ROWS,
    _compare_day_range,
    _compare_report,
    _dirty,
    _old,
    generate,
)

from warehouse import daily
from warehouse.client import Client
from warehouse.connect import connect
from warehouse.migrate import load_migrations, migrate
from warehouse.queries import run_named


def _compare_all(client: Client, db: str, filters: list[dict[str, Any]]) -> None:
    """Every rewritten query (named and report) against the reference under ``filters``."""
    for f in filters:
        for name in NAMED:
            assert run_named(client, db, name, **f).rows == _old(client, db, name, f), (name, f)
        _compare_report(client, db, f, date(1970, 1, 1), date(2149, 6, 6))
    _compare_day_range(client, db)


@pytest.fixture
def small(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    """A migrated store with 300 generated refusals (and their assessments)."""
    db = f"edges_{uuid.uuid4().hex[:12]}"
    client = connect(chdb_dsn, db)
    migrate(client, db)
    generate(client, db, 300, redelivered=0.05)
    try:
        yield client, db
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{db}`")
        client.close()


def _copy_at(client: Client, db: str, times: list[str], share: int = 10) -> None:
    """Copies of a ``1/share`` sample of events and their assessments, one per time in
    ``times`` (UTC ``DateTime64`` literals), with new log ids: what a block written later
    with those event times would hold."""
    for i, t in enumerate(times):
        for table in ("refusal_events", "assessments"):
            client.command(
                f"INSERT INTO `{db}`.{table} SELECT * REPLACE ("
                f"concat(log_id, '-t{i}-{t[:10]}') AS log_id, "
                f"toDateTime64('{t}', 3, 'UTC') AS event_time) FROM `{db}`.{table} FINAL "
                f"WHERE cityHash64(log_id) % {share} = 0"
            )


_ODD_FILTERS: list[dict[str, Any]] = [
    {},
    {"since": date(2001, 1, 1), "until": date(2001, 1, 2)},
    {"since": date(2079, 6, 7), "until": date(2079, 6, 7)},
    {"until": date(1970, 1, 1)},
    {"since": date(2149, 6, 5)},
    {"model": "model-00"},
]


def test_midnight_boundaries_and_many_months_in_one_block(small: tuple[Client, str]) -> None:
    client, db = small
    _copy_at(client, db, [
        "2001-01-01 00:00:00.000", "2000-12-31 23:59:59.999", "2001-01-01 23:59:59.999",
        "2001-01-02 00:00:00.000", "1970-01-01 00:00:00.000", "2149-06-05 23:59:59.999",
        "2010-03-31 23:59:59.999", "2010-04-01 00:00:00.000",
    ])  # fmt: skip
    _compare_all(client, db, _ODD_FILTERS)  # live
    daily.refresh_all(client, db)
    assert _dirty(client, db) == []
    _compare_all(client, db, _ODD_FILTERS)  # from the aggregates


def test_event_times_outside_the_date_range(small: tuple[Client, str]) -> None:
    """1900 and 2299 (``DateTime64``'s range, not ``Date``'s): ``toDate`` wraps them (1900 ->
    2079-06-07 on the ClickHouse of chDB); the reference counts them on the wrapped day, so
    must the live part and the recompute."""
    client, db = small
    _copy_at(client, db, ["1900-01-01 00:00:00.000", "2299-12-31 23:59:59.999"])
    _compare_all(client, db, _ODD_FILTERS)  # live
    daily.refresh_all(client, db)
    assert _dirty(client, db) == []
    _compare_all(client, db, _ODD_FILTERS)  # from the aggregates


def test_a_day_whose_every_assessment_is_retired(small: tuple[Client, str]) -> None:
    """One day's events all re-judged non-refusals, another day's all moved to another
    bundle (its assessments under the old bundle retired, none under the new one), after
    the days were recomputed: the days drop out of the assessment queries."""
    client, db = small
    _copy_at(client, db, ["2005-05-05 10:00:00.000"], share=5)
    _copy_at(client, db, ["2006-06-06 10:00:00.000"], share=5)
    daily.refresh_all(client, db)
    filters = [*_ODD_FILTERS, {"since": date(2005, 5, 5), "until": date(2006, 6, 6)}]
    _compare_all(client, db, filters)
    client.command(
        f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE (false AS is_refusal, "
        f"ingested_at + toIntervalDay(1) AS ingested_at) FROM `{db}`.refusal_events FINAL "
        "WHERE toDate(event_time) = '2005-05-05'"
    )
    client.command(
        f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE ('moved' AS policy_bundle, "
        f"ingested_at + toIntervalDay(1) AS ingested_at) FROM `{db}`.refusal_events FINAL "
        "WHERE toDate(event_time) = '2006-06-06'"
    )
    _compare_all(client, db, filters)  # live
    daily.refresh_all(client, db)
    _compare_all(client, db, filters)  # recomputed: the days hold no assessment rows
    gone = client.query(
        f"SELECT count() FROM `{db}`.current_assessments "
        "WHERE toDate(event_time) IN ('2005-05-05', '2006-06-06')"
    ).result_rows[0][0]
    assert gone == 0


def test_a_store_migrated_from_0023_reads_the_same_before_any_refresh(chdb_dsn: str) -> None:
    db = f"from23_{uuid.uuid4().hex[:12]}"
    client = connect(chdb_dsn, db)
    try:
        migrate(client, db, migrations=[m for m in load_migrations() if m.version <= "0023"])
        generate(client, db, ROWS // 3, redelivered=0.05)
        applied = [m for m in migrate(client, db) if m[:4] <= "0026"]  # later ones: views
        assert applied == ["0024_daily_aggregates", "0025_daily_configurations",
                           "0026_daily_disagreements"]  # fmt: skip
        days = client.query(
            f"SELECT uniqExact(toDate(event_time)) FROM `{db}`.refusal_events"
        ).result_rows[0][0]
        assert len(_dirty(client, db)) == days
        today = date.today()
        filters = [*_ODD_FILTERS, {"since": today - timedelta(days=30)},
                   {"until": today - timedelta(days=100), "product": "product-01"}]  # fmt: skip
        _compare_all(client, db, filters)
        daily.refresh(client, db)  # one month recomputed, the rest live
        _compare_all(client, db, filters)
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{db}`")
        client.close()


def test_a_refreshed_store_migrated_from_0024_reads_the_same_before_any_refresh(
    chdb_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0025 and 0026 on a populated store whose days 0024's code had all recomputed: every day
    is marked dirty again, so the new aggregates (empty until a refresh) are not read for them."""
    db = f"from24_{uuid.uuid4().hex[:12]}"
    client = connect(chdb_dsn, db)
    try:
        migrate(client, db, migrations=[m for m in load_migrations() if m.version <= "0024"])
        generate(client, db, ROWS // 3, redelivered=0.05)
        new = ("configurations", "batch_scopes", "disagreements", "agreements", "reviews",
               "gaps")
        at_0024 = {k: v for k, v in daily.AGGREGATES.items() if k not in new}
        monkeypatch.setattr(daily, "AGGREGATES", at_0024)  # the refresh of 0024's code
        daily.refresh_all(client, db)
        monkeypatch.undo()
        assert _dirty(client, db) == []
        applied = [m for m in migrate(client, db) if m[:4] <= "0026"]  # later ones: views
        assert applied == ["0025_daily_configurations", "0026_daily_disagreements"]
        days = client.query(
            f"SELECT uniqExact(toDate(event_time)) FROM `{db}`.refusal_events"
        ).result_rows[0][0]
        assert len(_dirty(client, db)) == days
        filters = [*_ODD_FILTERS, {"since": date.today() - timedelta(days=30)}]
        _compare_all(client, db, filters)
        daily.refresh(client, db)  # one month recomputed, the rest live
        _compare_all(client, db, filters)
        daily.refresh_all(client, db)
        _compare_all(client, db, filters)
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{db}`")
        client.close()
