"""Migration 0026 (``daily_disagreement_counts``, the ``refusal_disagreements`` named query)
on a populated warehouse whose days 0024's refresh had already recomputed: every stored day
is marked dirty again, so the query equals its reference (``tests/daily_reference.py``)
before any refresh, after a partial and a full refresh, and after newer event versions that
change a disagreement are stored."""

from __future__ import annotations

import uuid
from datetime import date, timedelta

import pytest
from test_daily_aggregates import ROWS, _dirty, _old
from trend_data import generate

from warehouse import daily
from warehouse.client import Client
from warehouse.connect import connect
from warehouse.migrate import load_migrations, migrate
from warehouse.queries import run_named

_NAME = "refusal_disagreements"


def _compare(client: Client, db: str) -> int:
    """Assert the query equals its reference under a few filters; return the rows compared."""
    today = date.today()
    compared = 0
    for f in ({}, {"since": today - timedelta(days=40)}, {"model": "model-01"},
              {"until": today - timedelta(days=90), "product": "product-00"}):  # fmt: skip
        new = run_named(client, db, _NAME, **f).rows
        assert new == _old(client, db, _NAME, f), f
        compared += len(new)
    return compared


def test_0026_on_a_refreshed_0024_store_reads_the_same(
    chdb_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"from24_{uuid.uuid4().hex[:12]}"
    client = connect(chdb_dsn, db)
    try:
        migrate(client, db, migrations=[m for m in load_migrations() if m.version < "0026"])
        generate(client, db, ROWS // 3, redelivered=0.05)
        with monkeypatch.context() as m:  # the release before 0026 refreshes its aggregates
            later = ("disagreements", "agreements", "reviews", "gaps")  # 0026's, 0028's, 0029's
            m.setattr(daily, "AGGREGATES", {k: v for k, v in daily.AGGREGATES.items()
                                            if k not in later})  # fmt: skip
            daily.refresh_all(client, db)
        assert _dirty(client, db) == []
        assert "0026_daily_disagreements" in migrate(client, db)
        days = client.query(
            f"SELECT uniqExact(toDate(event_time)) FROM `{db}`.refusal_events"
        ).result_rows[0][0]
        assert len(_dirty(client, db)) == days, "0026 marked every stored day"
        assert _compare(client, db) > 100  # every day live
        daily.refresh(client, db, max_days=5)
        assert _compare(client, db) > 100
        daily.refresh_all(client, db)
        assert _compare(client, db) > 100  # every day from the aggregate
        client.command(
            f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE (false AS classifier_is_refusal, "
            "true AS detected_is_refusal, 'detector_refusal_classifier_not' AS "
            "refusal_disagreement, ingested_at + toIntervalDay(1) AS ingested_at) "
            f"FROM `{db}`.refusal_events FINAL WHERE cityHash64(log_id) % 9 = 0"
        )
        assert _dirty(client, db), "the newer versions marked their days"
        assert _compare(client, db) > 100
        daily.refresh_all(client, db)
        assert _compare(client, db) > 100
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{db}`")
        client.close()
