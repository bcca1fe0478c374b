"""Migration 0027 (trendC): the policy-gap reads look up the sightings' own log ids instead of
reading every stored event and every current assessment. The report's ``top_gap_flags``, the
dashboard's panels "New gaps", "Gap sightings" and "Open gaps with example log ids", and the
views ``policy_gap_dated`` / ``policy_gap_summary`` (``refusal-audit gaps``) return exactly
what their former SQL returned (``tests/gap_reference.py``) on a generated store with
sightings: as stored, after re-audits, events re-judged non-refusals or moved to another
bundle, new sightings (some of log ids without a stored event, dated by their audit time),
those events arriving later, and a redelivery of everything."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest
from gap_reference import DATED, PANELS, SUMMARY, TOP_GAP_FLAGS
from grafana_expand import ALL, Variable, expand
from test_daily_aggregates import BUNDLE, ROWS, _filters, _later_changes, generated_store

from refusal_audit.dashboards import build_dashboards
from warehouse import daily
from warehouse import report_queries as rq
from warehouse.client import Client
from warehouse.partition_keys import LOCAL_FINAL

AUDIT = build_dashboards()["refusal-audit.json"]
DAY = 86400
LATE = 40  # sightings of log ids whose event is stored only later


@pytest.fixture(scope="module")
def store(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    """A generated store (``generated_store``) with sightings of 1 in 6 assessed log ids
    in five gaps, several member descriptions each, and ``LATE`` sightings of log ids that
    have no stored event yet."""
    for client, db in generated_store(chdb_dsn, "gaps", ROWS):
        _sight(client, db, "cityHash64(log_id) % 6 = 0", "")
        _sight_unstored(client, db)
        yield client, db


def _sight(client: Client, db: str, where: str, suffix: str) -> None:
    """Sightings of the assessed log ids matching ``where`` (batch ids get ``suffix``)."""
    client.command(
        f"INSERT INTO `{db}`.policy_gap_sightings "
        "SELECT policy_bundle, concat('gap-', toString(cityHash64(log_id) % 5)), log_id, "
        f"concat(batch_id, '{suffix}'), concat('member ', toString(cityHash64(log_id) % 3)), "
        "'opening description', audited_at "
        f"FROM `{db}`.assessments FINAL WHERE {where}"
    )


def _sight_unstored(client: Client, db: str) -> None:
    client.command(
        f"INSERT INTO `{db}`.policy_gap_sightings "
        f"SELECT '{BUNDLE}', concat('gap-', toString(number % 5)), "
        "concat('late-', toString(number)), concat('late-batch-', toString(number % 4)), "
        "'member 0', 'opening description', "
        "toDateTime64('2026-01-01 00:00:00', 3, 'UTC') + toIntervalDay(number) "
        f"FROM numbers({LATE})"
    )


def _store_late_events(client: Client, db: str) -> None:
    """The unstored log ids' events (and assessments) arrive: copies of stored refusals
    under the new ids, so they carry other event times than the sightings' audit times."""
    ids = (
        f"(SELECT groupArray(log_id) FROM (SELECT log_id FROM `{db}`.current_assessments "
        f"WHERE policy_bundle = '{BUNDLE}' ORDER BY log_id LIMIT {LATE}))"
    )
    for table in ("refusal_events", "assessments"):
        client.command(
            f"INSERT INTO `{db}`.{table} SELECT * REPLACE (concat('late-', "
            f"toString(indexOf({ids}, log_id) - 1)) AS log_id) FROM (SELECT * FROM "
            f"`{db}`.{table} FINAL WHERE policy_bundle = '{BUNDLE}' AND has({ids}, log_id))"
        )  # the WHERE in a subquery: ClickHouse would read `log_id` as the new alias


def _rows(client: Client, sql: str, params: dict[str, Any] | None = None) -> list[tuple]:
    raw = client.query(sql, parameters=params or {}, settings=LOCAL_FINAL)
    return sorted((tuple(r) for r in raw.result_rows), key=repr)


def _compare_views(client: Client, db: str) -> int:
    """``policy_gap_dated`` and ``policy_gap_summary`` equal their former bodies."""
    compared = 0
    for view, old in (("policy_gap_dated", DATED), ("policy_gap_summary", SUMMARY)):
        new = _rows(client, f"SELECT * FROM `{db}`.{view}")
        assert new == _rows(client, f"SELECT * FROM {old.replace('{db}', f'`{db}`.')}"), view
        compared += len(new)
    return compared


def _compare_report(client: Client, db: str) -> int:
    compared = 0
    for f in _filters():
        report = rq.ReportFilter(f.get("since", date(2000, 1, 1)),
                                 f.get("until", date(2100, 1, 1)),
                                 f.get("model"), f.get("product"))  # fmt: skip
        for limit in (3, 100):
            new = rq.top_gap_flags(client, db, report, limit=limit).rows
            old = client.query(TOP_GAP_FLAGS, parameters=report.params(db) | {"limit": limit},
                               settings=LOCAL_FINAL).result_rows  # fmt: skip
            assert new == [tuple(r) for r in old], (f, limit)
            compared += len(new)
    return compared


def _variables(client: Client, db: str) -> list[dict[str, Variable]]:
    """ "All" everywhere, and one model and product, and one bundle."""
    options = {
        name: [str(r[0]) for r in client.query(
            f"SELECT DISTINCT {column} FROM `{db}`.current_assessments ORDER BY {column}"
        ).result_rows]
        for name, column in (("model", "model"), ("product", "product"),
                             ("bundle", "policy_bundle"))
    }  # fmt: skip
    every = {name: Variable([ALL], values) for name, values in options.items()}
    one = {"model": Variable([options["model"][1]], options["model"]),
           "product": Variable([options["product"][0]], options["product"]),
           "bundle": Variable([options["bundle"][0]], options["bundle"])}  # fmt: skip
    return [every, one]


def _compare_panels(client: Client, db: str) -> int:
    panels = {p["title"]: p for p in AUDIT["panels"]}
    today = datetime.now(UTC).date()
    spans = [(datetime.combine(today - timedelta(days=500), time(), UTC),
              datetime.combine(today + timedelta(days=1), time(23, 59, 59), UTC)),
             (datetime(2025, 12, 20, 6, 30, tzinfo=UTC), datetime(2026, 1, 20, tzinfo=UTC)),
             (datetime.combine(today - timedelta(days=60), time(), UTC),
              datetime.combine(today, time(12), UTC))]  # fmt: skip
    compared = 0
    for variables in _variables(client, db):
        for title, old in PANELS.items():
            new = panels[title]["targets"][0]["rawSql"]
            for span in spans:
                for step in (3600, DAY):
                    got = _rows(client, expand(new, variables, *span, step))
                    assert got == _rows(client, expand(old, variables, *span, step)), (
                        title, span, step)  # fmt: skip
                    compared += len(got)
    return compared


def _compare(client: Client, db: str) -> int:
    """Every rewritten read equals its reference (the panels' tables resolve in the
    client's database); return the rows compared."""
    return (_compare_views(client, db) + _compare_report(client, db)
            + _compare_panels(client, db))  # fmt: skip


def test_the_gap_reads_equal_their_former_sql_in_every_state(
    store: tuple[Client, str],
) -> None:
    client, db = store
    sightings = client.query(f"SELECT count() FROM `{db}`.policy_gap_sightings FINAL")
    assert sightings.result_rows[0][0] > 300
    assert _compare(client, db) > 300  # as stored, the late ids dated by their audit time
    _later_changes(client, db)  # re-audits (new batch ids), re-judged and moved events
    assert _compare(client, db) > 300
    _sight(client, db, "cityHash64(log_id) % 11 = 0", "-re")  # newer sightings
    assert _compare(client, db) > 300
    before = _rows(client, f"SELECT * FROM `{db}`.policy_gap_dated WHERE log_id LIKE 'late-%'")
    _store_late_events(client, db)
    after = _rows(client, f"SELECT * FROM `{db}`.policy_gap_dated WHERE log_id LIKE 'late-%'")
    assert len(after) == len(before) == LATE and after != before, "now dated by their events"
    assert _compare(client, db) > 300
    daily.refresh_all(client, db)
    for table in ("refusal_events", "assessments", "policy_gap_sightings"):  # redelivered
        client.command(f"INSERT INTO `{db}`.{table} SELECT * FROM `{db}`.{table} FINAL "
                       "WHERE cityHash64(log_id) % 7 = 0")  # fmt: skip
    assert _compare(client, db) > 300


def test_the_gap_views_look_up_the_sightings_log_ids(store: tuple[Client, str]) -> None:
    """The rewritten views filter on the sightings' log ids by primary key and PREWHERE (so
    FINAL merges only their versions, not every granule the key analysis keeps)."""
    client, db = store
    total = client.query(f"SELECT count() FROM `{db}`.refusal_events").result_rows[0][0]
    for view in ("policy_gap_dated", "policy_gap_current"):
        plan = "\n".join(
            r[0] for r in client.query(f"EXPLAIN indexes = 1 SELECT * FROM `{db}`.{view}")
            .result_rows
        )  # fmt: skip
        assert "PrimaryKey" in plan and "log_id" in plan, (view, plan)
        body = client.query(
            "SELECT create_table_query FROM system.tables WHERE database = {db:String} "
            "AND name = {view:String}",
            parameters={"db": db, "view": view},
        ).result_rows[0][0]
        assert "PREWHERE log_id IN" in body, view  # filtered before FINAL merges versions
    assert total > 0
