"""Grafana dashboards for refusal-audit, built as plain dicts (issue 15, part 1).

``build_dashboards()`` returns ``{file name: dashboard}`` for the two dashboards written to
``deploy/grafana/dashboards/`` by ``python -m refusal_audit.dashboards``:

- ``refusal-audit.json``: the warehouse (ClickHouse, through Grafana's official
  ``grafana-clickhouse-datasource`` plugin): audit overview, category mix, policy gaps,
  alerts as annotations, human review, clarification and calibration; variables
  ``model``, ``product`` and ``bundle`` and the dashboard's time range.
- ``refusal-audit-workers.json``: the workers' Prometheus metrics.

Pure: no I/O, no warehouse. See docs/dashboards.md.
"""

from __future__ import annotations

from refusal_audit.dashboards import audit_panels, review_panels
from refusal_audit.dashboards.model import (
    CLICKHOUSE_UID,
    PLUGIN_ID,
    PLUGIN_VERSION,
    PROMETHEUS_UID,
    Json,
    ch_variable,
    dashboard,
)
from refusal_audit.dashboards.sql import DAILY_SETTINGS, daily_source
from refusal_audit.dashboards.workers import workers_dashboard

__all__ = [
    "CLICKHOUSE_UID",
    "PLUGIN_ID",
    "PLUGIN_VERSION",
    "PROMETHEUS_UID",
    "audit_dashboard",
    "build_dashboards",
    "workers_dashboard",
]


def variables() -> list[Json]:
    """The audit dashboard's variables: ``model``, ``product``, ``bundle`` (multi-value,
    with "All"), their options: the values of the current assessments, read from the daily
    aggregate ``counts`` of every day (``warehouse.daily``)."""
    source = daily_source("counts", every_day=True)
    return [
        ch_variable(
            name,
            label,
            f"SELECT DISTINCT {column} FROM {source} ORDER BY {column} {DAILY_SETTINGS}",
        )
        for name, label, column in (
            ("model", "Model", "model"),
            ("product", "Product", "product"),
            ("bundle", "Policy bundle", "policy_bundle"),
        )
    ]


def audit_dashboard() -> Json:
    """The ClickHouse dashboard ``refusal-audit``."""
    return dashboard(
        "refusal-audit",
        "refusal-audit: audit",
        [*audit_panels.panels(), *review_panels.panels()],
        variables(),
        audit_panels.alert_annotations(),
        time_from="now-90d",
        description="Audited LLM refusals from the refusal-audit warehouse.",
    )


def build_dashboards() -> dict[str, Json]:
    """``{file name: dashboard JSON object}`` of every dashboard, in file-name order."""
    return {
        "refusal-audit-workers.json": workers_dashboard(),
        "refusal-audit.json": audit_dashboard(),
    }
