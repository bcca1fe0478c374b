"""Human review verdicts in ClickHouse (``review_verdicts``, ``current_verdicts``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schemas.review import Verdict
from warehouse.store import Warehouse, to_utc

VERDICT_COLUMNS = (
    "verdict_id", "log_id", "policy_bundle", "assessment_audited_at", "reviewer", "verdict",
    "corrected_category", "corrected_false_positive", "corrected_clause", "note", "model",
    "product", "model_category", "model_false_positive", "model_clause", "engine",
    "engine_model", "engine_version", "prompt_version", "bundle_version", "review_reason",
    "submitted_at", "source",
)  # fmt: skip


def _row(v: Verdict) -> list[Any]:
    values = v.model_dump()
    values["assessment_audited_at"] = to_utc(v.assessment_audited_at)
    values["submitted_at"] = to_utc(v.submitted_at)
    return [values[c] for c in VERDICT_COLUMNS]


def insert_verdicts(store: Warehouse, verdicts: Sequence[Verdict]) -> None:
    """Store verdicts, all in one insert (none or all are written). Raises
    ``WarehouseError``."""
    store.insert_rows("review_verdicts", VERDICT_COLUMNS, [_row(v) for v in verdicts])


def current_verdicts(store: Warehouse) -> list[Verdict]:
    """Every reviewer's newest verdict on every assessment. Raises ``WarehouseError``."""
    rows = store.select(
        "SELECT * FROM {db:Identifier}.current_verdicts ORDER BY policy_bundle, log_id, reviewer"
    )
    return [Verdict.model_validate(row) for row in rows]
