"""Migration 0022 (current_assessments read without the primary-key analysis of its IN set)
on a warehouse populated at the previous schema version: rows kept, every named query,
report query, Grafana panel and drift read returns exactly what it returned before, it can
be applied again, and re-delivered rows change nothing after it either.

The store is filled by the trend benchmark's generator (``benchmarks/trend_data.py``), with
duplicates FINAL must fold (redelivered events and assessments), plus the cases
current_assessments exists for: re-audits (a newer assessment with another category) and
events re-delivered as non-refusals (their assessments retired).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from grafana_expand import ALL, Variable, expand

from refusal_audit.dashboards import build_dashboards
from warehouse import report_queries as rq
from warehouse.client import Client
from warehouse.connect import connect
from warehouse.drift_assessments import window_counts
from warehouse.migrate import load_migrations, migrate
from warehouse.queries import NAMED_QUERIES, run_named

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from trend_data import generate

NEW = "0022_current_assessments_settings"
ROWS = 4000


def _tables(client: Client, db: str) -> dict[str, int]:
    rows = client.query(
        "SELECT name, total_rows FROM system.tables WHERE database = {db:String} "
        "AND engine LIKE '%MergeTree' AND name != 'schema_migrations' ORDER BY name",
        parameters={"db": db},
    ).result_rows
    return {str(name): int(n or 0) for name, n in rows}


def _edge_cases(client: Client, db: str) -> None:
    """Re-audits with another category and events re-delivered as non-refusals."""
    client.command(
        f"INSERT INTO `{db}`.assessments SELECT * REPLACE ("
        "'policy_gray_zone' AS category, NOT is_estimated_false_positive AS "
        "is_estimated_false_positive, audited_at + toIntervalDay(1) AS audited_at) "
        f"FROM `{db}`.assessments WHERE cityHash64(log_id) % 20 = 0"
    )
    client.command(
        f"INSERT INTO `{db}`.refusal_events SELECT * REPLACE (false AS is_refusal, "
        "ingested_at + toIntervalDay(1) AS ingested_at) "
        f"FROM `{db}`.refusal_events "
        "WHERE refusal_kind = 'explicit' AND cityHash64(log_id) % 25 = 1"
    )


def _snapshot(client: Client, db: str) -> dict[str, Any]:
    """Every result the migration must not change."""
    out: dict[str, Any] = {}
    today = datetime.now(UTC).date()
    for name in NAMED_QUERIES:
        out[name] = run_named(client, db, name).rows
        if NAMED_QUERIES[name].filters:
            out[f"{name} model-01 30d"] = run_named(
                client, db, name, since=today - timedelta(days=30), model="model-01"
            ).rows
    days = rq.event_day_range(client, db)
    assert days is not None
    f = rq.ReportFilter(*days)
    out["period_counts"] = rq.period_counts(client, db, f)
    out["configurations"] = rq.audit_configurations(client, db, f).rows
    out["by_model"] = rq.false_positives_by_model(client, db, f).rows
    out["gaps"] = rq.top_gap_flags(client, db, f).rows
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    for window in (3600, 86400):
        counts = window_counts(
            client, db, window_seconds=window, grace_seconds=300,
            start=now - timedelta(seconds=30 * window), end=now,
        )  # fmt: skip
        out[f"drift {window}"] = {k: sorted(v.items(), key=repr) for k, v in counts.items()}
    out["current"] = client.query(
        f"SELECT * FROM `{db}`.current_assessments ORDER BY policy_bundle, log_id"
    ).result_rows
    board = build_dashboards()["refusal-audit.json"]
    start, end = now - timedelta(days=90), now + timedelta(hours=1)
    options = {
        v["name"]: [str(r[0]) for r in client.query(v["query"]["rawSql"]).result_rows]
        for v in board["templating"]["list"]
    }
    every = {name: Variable([ALL], values) for name, values in options.items()}
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            if "rawSql" in target:
                sql = expand(target["rawSql"], every, start, end, 86400)
                out[f"panel {panel['title']}"] = sorted(client.query(sql).result_rows, key=repr)
    return out


@pytest.fixture(scope="module")
def populated(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    """A store at the schema before 0022, filled, with duplicates and edge cases."""
    db = f"trend_{uuid.uuid4().hex[:12]}"
    client = connect(chdb_dsn, db)
    previous = [m for m in load_migrations() if m.id != NEW]
    migrate(client, db, migrations=previous)
    generate(client, db, ROWS, redelivered=0.05)
    _edge_cases(client, db)
    try:
        yield client, db
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{db}`")
        client.close()


def test_the_migration_keeps_rows_and_results_and_can_run_again(
    populated: tuple[Client, str],
) -> None:
    client, db = populated
    tables, before = _tables(client, db), _snapshot(client, db)
    assert before["current"], "the store holds current assessments"
    assert len(before["current"]) < ROWS, "some assessments were retired"
    assert migrate(client, db) == [NEW]
    assert _tables(client, db) == tables
    assert _snapshot(client, db) == before
    assert migrate(client, db) == []
    (migration,) = [m for m in load_migrations() if m.id == NEW]
    for statement in migration.statements(db):  # an interrupted run applied again
        client.command(statement)
    assert _snapshot(client, db) == before
    view = client.query(
        "SELECT create_table_query FROM system.tables WHERE database = {db:String} "
        "AND name = 'current_assessments'",
        parameters={"db": db},
    ).result_rows[0][0]
    assert "use_index_for_in_with_subqueries = 0" in view


def test_redelivered_rows_change_nothing_after_the_migration(
    populated: tuple[Client, str],
) -> None:
    client, db = populated
    migrate(client, db)
    before = _snapshot(client, db)
    generate_again = (
        "INSERT INTO `{db}`.{t} SELECT * FROM `{db}`.{t} WHERE cityHash64(log_id) % 7 = 0"
    )
    for table in ("refusal_events", "assessments"):
        client.command(generate_again.format(db=db, t=table))
    assert _snapshot(client, db) == before
