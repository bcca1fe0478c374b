"""The audit trail of a conversation: one step row per state, and the review sample (pure).

Every clarification step is a new ``ConversationState`` revision, and everything the trail
keeps is a function of that state: :func:`step_row` turns a state into the
``clarification_steps`` row (``warehouse.clarification``), so writing it again after a
redelivery, a retry or a restart gives the same row. The question engine's validation and
the circumvention check are read from the state too: a conversation is only ``asking`` after
its set validated and passed the check, and a failed one is escalated with
``invalid_questions`` or ``circumvention`` and the reasons in ``escalation_detail``. The
optional LLM judge's verdict is the state's ``judge`` (column ``circumvention_judge``:
``passed``/``rejected``/``failed``, empty when it did not run); a set it rejected is
escalated with ``circumvention``, one it could not judge with ``judge_failed``, its reasons
and explanation in ``escalation_detail`` as for the rules.

Review sample (issue 12: "a configurable share, default 5%, of clarification interactions
... weighted toward cases where the clarified request was finally accepted"): a finished
conversation is drawn with probability :func:`sample_probability` -- ``rate`` for most,
``min(1, rate * accepted_weight)`` for a ``clarified`` one (the riskiest path for boundary
erosion) -- by a seeded hash of its id (:func:`sampled`), so the draw never changes on
re-processing. Escalations are always reviewed and not part of the sample. The probability
is stored with the row, so an estimate over the sample can weight each item by its inverse.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson

from schemas.clarification import (
    FINAL_OUTCOMES,
    ConversationState,
    EscalationReason,
    Outcome,
)

SAMPLE_SEED = "clarification-review-v1"
"""Seed of the review sample's hash: changing it draws another sample."""


def step_name(state: ConversationState) -> str:
    """What the transition into ``state`` was: ``opened`` (revision 0), ``asked_again``
    (round 2), ``answered`` (awaiting re-evaluation), ``accepted`` or ``escalated``."""
    if state.revision == 0:
        return "opened"
    return {
        Outcome.asking: "asked_again",
        Outcome.awaiting_reevaluation: "answered",
        Outcome.clarified: "accepted",
        Outcome.escalated: "escalated",
        Outcome.not_asked: "not_asked",
    }[state.outcome]


def checks_of(state: ConversationState) -> tuple[str, str]:
    """(validation, circumvention) of the question set of ``state``: ``valid``/``invalid``
    and the deterministic rules' ``passed``/``rejected``; empty strings when no question was
    generated. (The judge runs only on a set the rules passed.)"""
    reason = state.escalation_reason
    if reason == EscalationReason.invalid_questions:
        return "invalid", ""
    if state.rounds or state.judge is not None:
        return "valid", "passed"
    if reason == EscalationReason.circumvention:
        return "valid", "rejected"
    return "", ""


JUDGE_COLUMN = {"pass": "passed", "reject": "rejected", "failed": "failed"}
"""The judge's verdict -> the ``circumvention_judge`` column."""


def judge_of(state: ConversationState) -> str:
    """The LLM judge's result on ``state``'s set: ``passed``/``rejected``/``failed``, or an
    empty string when the judge did not run."""
    return JUDGE_COLUMN[state.judge.verdict] if state.judge is not None else ""


def sample_probability(state: ConversationState, rate: float, accepted_weight: float) -> float:
    """The chance that a finished ``state`` is drawn into the review sample (0 for an
    unfinished or escalated conversation: escalations are always reviewed)."""
    if state.outcome not in FINAL_OUTCOMES or state.outcome == Outcome.escalated:
        return 0.0
    if state.outcome == Outcome.clarified:
        return min(1.0, rate * accepted_weight)
    return min(1.0, rate)


def sampled(conversation_id: str, probability: float) -> bool:
    """Whether ``conversation_id`` is drawn at ``probability`` (a seeded sha256 of the id,
    uniform on [0, 1)): deterministic, so re-processing never changes the sample."""
    if probability <= 0.0:
        return False
    digest = hashlib.sha256(f"{SAMPLE_SEED}\0{conversation_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < probability


def step_row(
    state: ConversationState,
    recorded_at: datetime,
    rate: float = 0.05,
    accepted_weight: float = 4.0,
) -> dict[str, Any]:
    """The ``clarification_steps`` row of ``state`` (column -> value; times as aware
    datetimes). ``questions`` is the JSON array of the current round's questions,
    ``state`` the state's JSON."""
    validation, circumvention = checks_of(state)
    probability = sample_probability(state, rate, accepted_weight)
    last = state.rounds[-1] if state.rounds else None
    return {
        "conversation_id": state.conversation_id,
        "revision": state.revision,
        "step": step_name(state),
        "log_id": state.log_id,
        "request_hash": state.request_hash,
        "policy_bundle": state.policy_bundle,
        "model": state.model or "",
        "product": state.product or "",
        "category": state.category,
        "route": state.route.value if state.route is not None else "",
        "engine": state.engine,
        "engine_model": state.engine_model,
        "prompt_version": state.prompt_version,
        "round": state.round,
        "outcome": state.outcome.value,
        "questions": orjson.dumps(
            [q.model_dump(mode="json") for q in last.questions] if last else []
        ).decode(),
        "validation": validation,
        "circumvention": circumvention,
        "circumvention_judge": judge_of(state),
        "surfaced": state.outcome == Outcome.asking,
        "escalated": state.outcome == Outcome.escalated,
        "escalation_reason": state.escalation_reason.value if state.escalation_reason else "",
        "escalation_detail": state.escalation_detail or "",
        "reevaluation": (last.reevaluation or "") if last else "",
        "final": state.outcome in FINAL_OUTCOMES,
        "sampled_for_review": sampled(state.conversation_id, probability),
        "sample_probability": probability,
        "state": state.model_dump_json(),
        "created_at": state.created_at,
        "step_at": state.updated_at,
        "recorded_at": recorded_at,
    }


def needs_review(row: Mapping[str, Any]) -> bool:
    """Whether a (latest) step row is a review item: escalated, or drawn into the sample."""
    return bool(row["escalated"] or row["sampled_for_review"])


__all__ = [
    "SAMPLE_SEED",
    "checks_of",
    "judge_of",
    "needs_review",
    "sample_probability",
    "sampled",
    "step_name",
    "step_row",
]
