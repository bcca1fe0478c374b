"""The ``alerts`` table read back: which alert ids are stored, and the stored alerts for
``refusal-audit alerts list`` (written by ``Warehouse.insert_alerts``).

The functions take a ``Warehouse`` and plain values and raise ClickHouse errors as they come
(the callers decide on retries).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from schemas.alerts import Alert
from warehouse.store import Warehouse

__all__ = ["known_alert_ids", "list_alerts"]


def known_alert_ids(store: Warehouse, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` (non-empty, sorted) are already in the alerts table. Raises
    ClickHouse errors."""
    result = store.client.query(
        "SELECT DISTINCT alert_id FROM {db:Identifier}.alerts "
        "WHERE alert_id IN {ids:Array(String)}",
        parameters={"db": store.database, "ids": list(ids)},
    )
    return {row[0] for row in result.result_rows}


def list_alerts(
    store: Warehouse,
    *,
    kinds: Sequence[str] = (),
    severity: str | None = None,
    policy_bundle: str | None = None,
    model: str | None = None,
    product: str | None = None,
    since: datetime | None = None,
    limit: int = 100,
) -> list[Alert]:
    """Stored alerts, newest first, filtered (None/empty = any). Raises ClickHouse errors.

    ``since`` compares with the alert's window start; ``limit`` caps the rows (>= 1).
    """
    where = ["1"]
    params: dict[str, Any] = {"db": store.database, "limit": limit}
    for column, value in (
        ("severity", severity),
        ("policy_bundle", policy_bundle),
        ("model", model),
        ("product", product),
    ):
        if value is not None:
            where.append(f"{column} = {{{column}:String}}")
            params[column] = value
    if kinds:
        where.append("kind IN {kinds:Array(String)}")
        params["kinds"] = list(kinds)
    if since is not None:
        where.append("window_start >= {since:DateTime64(3, 'UTC')}")
        params["since"] = since
    result = store.client.query(
        "SELECT payload FROM {db:Identifier}.alerts FINAL WHERE "
        + " AND ".join(where)
        + " ORDER BY window_start DESC, created_at DESC, alert_id LIMIT {limit:UInt32}",
        parameters=params,
    )
    return [Alert.model_validate_json(row[0]) for row in result.result_rows]
