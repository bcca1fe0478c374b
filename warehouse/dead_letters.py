"""Dead letters read back for ``refusal-audit reaudit`` (the ``dead_letters`` table, written
by ``Warehouse.insert_dead_letters``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from warehouse.store import Warehouse

__all__ = ["audit_dead_letters"]


def audit_dead_letters(
    store: Warehouse, since: date | None, until: date | None, ids: Sequence[str]
) -> list[dict[str, Any]]:
    """Dead letters of stage ``audit`` recorded in [since, until] (UTC days; None: open), or
    with ``ids`` (empty: any), oldest first, as ``{"dead_letter_id", "raw"}`` dicts. Raises
    ClickHouse errors."""
    rows = store.client.query(
        "SELECT dead_letter_id, raw FROM {db:Identifier}.dead_letters FINAL "
        "WHERE stage = 'audit' AND (length({ids:Array(String)}) = 0 "
        "OR has({ids:Array(String)}, dead_letter_id)) "
        "AND toDate(created_at) BETWEEN {since:Date} AND {until:Date} ORDER BY created_at",
        parameters={
            "db": store.database,
            "ids": list(ids),
            "since": since or date(1970, 1, 1),
            "until": until or date(2299, 12, 31),
        },
    ).result_rows
    return [{"dead_letter_id": r[0], "raw": r[1]} for r in rows]
