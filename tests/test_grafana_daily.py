"""The audit dashboard's panels and variables that read the daily aggregates (migration 0025,
trendA) return what their former SQL over ``current_assessments`` returned
(``tests/grafana_reference.py``), expanded as Grafana does (``tests/grafana_expand.py``) over
day-aligned time ranges (00:00:00 to 23:59:59 UTC, as Grafana sends a range of whole days at
second precision) with a one-day and a seven-day interval: on a generated store as stored
(every day dirty), partly and fully recomputed, after re-audits and re-judged or moved events,
and after a redelivery."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest
from grafana_expand import ALL, Variable, expand
from grafana_reference import PANELS, VARIABLES
from review_reference import PANELS as REVIEW_PANELS
from test_daily_aggregates import ROWS, _dirty, _later_changes, generated_store

from refusal_audit.dashboards import build_dashboards
from warehouse import daily
from warehouse.client import Client

AUDIT = build_dashboards()["refusal-audit.json"]
DAY = 86400


@pytest.fixture(scope="module")
def store(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    """A migrated store filled by the trend generator (5% redelivered)."""
    yield from generated_store(chdb_dsn, "gdaily", ROWS)


def _ranges() -> list[tuple[datetime, datetime]]:
    """Whole UTC days: (first day 00:00:00, last day 23:59:59)."""
    today = datetime.now(UTC).date()
    spans = [(today - timedelta(days=420), today + timedelta(days=1)),
             (today - timedelta(days=300), today - timedelta(days=10)),
             (today - timedelta(days=60), today)]  # fmt: skip
    return [
        (datetime.combine(a, time(), UTC), datetime.combine(b, time(23, 59, 59), UTC))
        for a, b in spans
    ]


def _run(client: Client, sql: str, variables: dict[str, Variable], span: Any, step: int) -> list:
    result = client.query(expand(sql, variables, span[0], span[1], step))
    return [tuple(r) for r in result.result_rows]


def _variables(client: Client) -> list[dict[str, Variable]]:
    """ "All" for every variable, and one model and product chosen."""
    options = {
        name: [str(r[0]) for r in client.query(sql).result_rows] for name, sql in VARIABLES.items()
    }
    every = {name: Variable([ALL], values) for name, values in options.items()}
    one = {**every, "model": Variable([options["model"][1]], options["model"]),
           "product": Variable([options["product"][0]], options["product"])}  # fmt: skip
    return [every, one]


AUDIT_PANELS = {title: sql for title, sql in PANELS.items() if title not in REVIEW_PANELS}
"""The panels of the assessments and events; the review panels (which read the verdicts)
are compared in the verdicts' states by ``tests/test_review_daily.py``."""


def _compare(
    client: Client, references: Mapping[str, str] = AUDIT_PANELS, with_variables: bool = True
) -> int:
    """Assert every rewritten panel in ``references`` (title: former SQL) and, with
    ``with_variables``, every dashboard variable equals its reference; return the rows."""
    compared = 0
    for variable in AUDIT["templating"]["list"] if with_variables else []:
        new = client.query(expand(variable["query"]["rawSql"], {}, *_ranges()[0], DAY))
        assert new.result_rows == client.query(VARIABLES[variable["name"]]).result_rows
        compared += len(new.result_rows)
    panels = {p["title"]: p for p in AUDIT["panels"]}
    for variables in _variables(client):
        for title, old in references.items():
            assert panels[title]["interval"] == "1d", title
            new = panels[title]["targets"][0]["rawSql"]
            for span in _ranges():
                for step in (DAY, 7 * DAY):
                    got = _run(client, new, variables, span, step)
                    assert got == _run(client, old, variables, span, step), (title, span, step)
                    compared += len(got)
    return compared


def test_the_daily_panels_equal_their_former_sql_in_every_state(
    store: tuple[Client, str],
) -> None:
    client, db = store
    assert len(_dirty(client, db)) > 300
    assert _compare(client) > 1000  # every day live
    daily.refresh(client, db, max_days=5)
    assert _compare(client) > 1000  # a few days recorded, the rest live
    daily.refresh_all(client, db)
    assert _dirty(client, db) == []
    assert _compare(client) > 1000  # every day recorded
    _later_changes(client, db)
    assert _dirty(client, db)
    assert _compare(client) > 1000  # the changed days live, their stale rows not read
    daily.refresh_all(client, db)
    assert _compare(client) > 1000
    for table in ("refusal_events", "assessments"):  # a redelivery: the same rows again
        client.command(f"INSERT INTO `{db}`.{table} SELECT * FROM `{db}`.{table} FINAL "
                       "WHERE cityHash64(log_id) % 7 = 0")  # fmt: skip
    assert _dirty(client, db)
    assert _compare(client) > 1000
    daily.refresh_all(client, db)
    assert _compare(client) > 1000
