"""The review app's forms read into checked values: a verdict (``verdict_from_form``), a
queue (``queue_from_form``) and the judged assessment's audit time (``audited_at``). Each
raises ``ValueError`` with a message for the reviewer."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from processors.review import validation_message
from schemas.review import MAX_NOTE_CHARS, ReviewQueue, VerdictInput


def _blank(value: Any) -> str | None:
    text = str(value).strip() if value is not None else ""
    return text or None


def verdict_from_form(form: Mapping[str, Any], reviewer: str, log_id: str) -> VerdictInput:
    """A ``VerdictInput`` from the item form. On ``agree`` the correction fields are ignored
    (the form keeps them, hidden, for a change of mind). ``corrected_clause`` = ``none``
    means no clause applies (a policy gap). Raises ``ValueError`` with a message for the
    reviewer."""
    verdict = _blank(form.get("verdict"))
    if verdict not in ("agree", "disagree"):
        raise ValueError("choose Agree or Disagree")
    note = _blank(form.get("note")) or ""
    if len(note) > MAX_NOTE_CHARS:
        raise ValueError(
            f"the note may have at most {MAX_NOTE_CHARS} characters ({len(note)} given)"
        )
    if "\ufffd" in note or any(ord(ch) < 32 and ch not in "\t\r\n" for ch in note):
        raise ValueError("the note holds bytes that are not text; retype it")
    if verdict == "agree":
        return VerdictInput(log_id=log_id, reviewer=reviewer, verdict="agree", note=note)
    fp = _blank(form.get("corrected_false_positive"))
    if fp not in ("yes", "no"):
        raise ValueError("on Disagree, say whether the refusal was a false positive")
    category = _blank(form.get("corrected_category"))
    if category is None:
        raise ValueError("on Disagree, choose the corrected category")
    clause = _blank(form.get("corrected_clause"))
    try:
        return VerdictInput(
            log_id=log_id,
            reviewer=reviewer,
            verdict="disagree",
            corrected_category=category,
            corrected_false_positive=fp == "yes",
            corrected_clause=None if clause in (None, "none") else clause,
            note=note,
        )
    except ValidationError as exc:
        raise ValueError(validation_message(exc)) from None


def queue_from_form(form: Mapping[str, Any]) -> ReviewQueue:
    """A ``ReviewQueue`` from the admin form (empty fields mean "any"). Raises
    ``ValueError`` with a message naming the field."""
    values: dict[str, Any] = {}
    for name in ReviewQueue.model_fields:
        raw = _blank(form.get(name))
        values[name] = raw if raw is not None else ("" if name == "description" else None)
    try:
        return ReviewQueue.model_validate(values)
    except ValidationError as exc:
        raise ValueError(
            "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'queue'}: {e['msg']}" for e in exc.errors()
            )
        ) from None


def audited_at(form: Mapping[str, Any]) -> datetime:
    """The form's ``audited_at`` (the judged assessment's audit time, ISO 8601 with its
    offset). Raises ``ValueError``."""
    try:
        value = datetime.fromisoformat(str(form.get("audited_at") or ""))
    except ValueError:
        raise ValueError("the form lacks the assessment's audit time: reload the item") from None
    if value.tzinfo is None:
        raise ValueError("the assessment's audit time needs its UTC offset: reload the item")
    return value
