"""Reviewer verdicts from outside the review app: rows of an imported file checked and turned
into ``Verdict``s against the assessment they judge (issue 10; pure, no I/O).

Columns: ``log_id``, ``reviewer``, ``verdict`` (``agree``/``disagree``),
``corrected_category``, ``corrected_false_positive`` (``true``/``false``/``yes``/``no``/``1``/
``0``), ``corrected_clause``, ``note``, and optionally ``policy_bundle`` (needed only when a
log id is assessed under several bundles). Empty cells are "not given". The context columns
``review export`` writes (``CONTEXT_COLUMNS``) are ignored, so an exported file, filled in,
imports as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from schemas.policy import PolicyBundle
from schemas.review import Verdict, VerdictInput, verdict_id

IMPORT_COLUMNS = (
    "log_id", "reviewer", "verdict", "corrected_category", "corrected_false_positive",
    "corrected_clause", "note",
)  # fmt: skip
OPTIONAL_COLUMNS = ("policy_bundle",)
# what `review export` adds for the reviewer to read; ignored on import
CONTEXT_COLUMNS = (
    "model", "product", "event_time", "request", "response", "model_category",
    "model_false_positive", "false_positive_score", "model_clause", "rationale",
    "review_reason", "review_reasons", "engine", "prompt_version", "audited_at",
)  # fmt: skip
_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})


class RowError(ValueError):
    """Why one row cannot be imported (the message names the column and value)."""


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    if any("\udc80" <= ch <= "\udcff" for ch in text):
        raise RowError("not UTF-8 text")
    return text or None


def _flag(value: Any, column: str) -> bool | None:
    if isinstance(value, bool) or value is None:
        return value
    text = _text(value)
    if text is None:
        return None
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise RowError(f"{column} {text!r} is not true/false")


def validation_message(exc: ValidationError) -> str:
    """A pydantic error as one line for a reviewer (without pydantic's "Value error, ")."""
    return "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())


def parse_row(fields: Mapping[str, Any]) -> VerdictInput:
    """A row (column -> cell, str or JSON values) as a ``VerdictInput``.

    Raises ``RowError`` naming what is wrong (unknown column, missing log id or reviewer,
    a verdict other than agree/disagree, corrections that do not fit the verdict).
    """
    unknown = set(fields) - set(IMPORT_COLUMNS) - set(OPTIONAL_COLUMNS) - set(CONTEXT_COLUMNS)
    if unknown:
        raise RowError(f"unknown column(s) {sorted(unknown)}")
    verdict = (_text(fields.get("verdict")) or "").lower()
    if verdict not in ("agree", "disagree"):
        raise RowError(f"verdict {fields.get('verdict')!r} is not agree or disagree")
    values = {
        "log_id": _text(fields.get("log_id")),
        "reviewer": _text(fields.get("reviewer")),
        "verdict": verdict,
        "corrected_category": _text(fields.get("corrected_category")),
        "corrected_false_positive": _flag(
            fields.get("corrected_false_positive"), "corrected_false_positive"
        ),
        "corrected_clause": _text(fields.get("corrected_clause")),
        "note": _text(fields.get("note")) or "",
    }
    for required in ("log_id", "reviewer"):
        if values[required] is None:
            raise RowError(f"{required} is missing")
    try:
        return VerdictInput.model_validate(values)
    except ValidationError as exc:
        raise RowError(validation_message(exc)) from None


def make_verdict(
    item: VerdictInput,
    assessment: Mapping[str, Any],
    bundle: PolicyBundle,
    submitted_at: datetime,
    source: str,
) -> Verdict:
    """The stored verdict of ``item`` on ``assessment`` (a ``current_assessments`` row).

    Raises ``RowError`` for a corrected category not in the bundle's taxonomy or a clause
    the bundle does not have.
    """
    if item.corrected_category is not None and (
        item.corrected_category not in bundle.category_codes()
    ):
        raise RowError(
            f"corrected_category {item.corrected_category!r} is not in the taxonomy of "
            f"bundle {bundle.name!r}"
        )
    if item.corrected_clause is not None and bundle.clause(item.corrected_clause) is None:
        raise RowError(
            f"corrected_clause {item.corrected_clause!r} is not a clause of bundle "
            f"{bundle.name!r} (leave it empty when no clause applies)"
        )
    audited_at = assessment["audited_at"]
    return Verdict(
        **item.model_dump(),
        verdict_id=verdict_id(item, bundle.name, audited_at),
        policy_bundle=bundle.name,
        assessment_audited_at=audited_at,
        model=assessment["model"],
        product=assessment["product"],
        model_category=assessment["category"],
        model_false_positive=assessment["is_estimated_false_positive"],
        model_clause=assessment["policy_clause_cited"],
        engine=assessment["engine"],
        engine_model=assessment["engine_model"],
        engine_version=assessment["engine_version"],
        prompt_version=assessment["prompt_version"],
        bundle_version=assessment["bundle_version"],
        review_reason=assessment["review_reason"],
        submitted_at=submitted_at,
        source=source,
    )
