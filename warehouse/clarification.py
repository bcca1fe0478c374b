"""The clarification service in ClickHouse: its audit trail (``clarification_steps``, one row
per conversation state, ``processors.clarification.trail.step_row``) and the reviewers'
verdicts on clarification review items (``clarification_verdicts``); migrations 0015 and
0016 (the LLM judge's column ``circumvention_judge``).

Both tables are ``ReplacingMergeTree`` keyed on their natural id and read with ``FINAL``,
so a step or verdict written twice counts once (docs/warehouse.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from warehouse.store import Warehouse, to_utc

STEP_COLUMNS = (
    "conversation_id", "revision", "step", "log_id", "request_hash", "policy_bundle", "model",
    "product", "category", "route", "engine", "engine_model", "prompt_version", "round",
    "outcome", "questions", "validation", "circumvention", "circumvention_judge", "surfaced",
    "escalated",
    "escalation_reason", "escalation_detail", "reevaluation", "final", "sampled_for_review",
    "sample_probability", "state", "created_at", "step_at", "recorded_at",
)  # fmt: skip

VERDICT_COLUMNS = (
    "verdict_id", "conversation_id", "revision", "reviewer", "decision", "questions_ok",
    "note", "outcome", "escalation_reason", "submitted_at",
)  # fmt: skip

DECISIONS = ("fulfil", "refuse")
"""A reviewer's decision on a clarification item: the request should be fulfilled, or the
refusal should stand."""

_TIMES = ("created_at", "step_at", "recorded_at", "submitted_at")


def _values(row: Mapping[str, Any], columns: Sequence[str]) -> list[Any]:
    return [to_utc(row[c]) if c in _TIMES else row[c] for c in columns]


def insert_steps(store: Warehouse, rows: Sequence[Mapping[str, Any]]) -> None:
    """Store step rows (``step_row`` dicts), all in one insert. Raises ``WarehouseError``."""
    if rows:
        store.insert_rows(
            "clarification_steps", STEP_COLUMNS, [_values(r, STEP_COLUMNS) for r in rows]
        )


def recorded_revisions(store: Warehouse, conversation_ids: Sequence[str]) -> dict[str, int]:
    """conversation id -> the newest revision the trail holds, for ``conversation_ids``.
    Raises ``WarehouseError``."""
    if not conversation_ids:
        return {}
    rows = store.select(
        "SELECT conversation_id, max(revision) AS revision "
        "FROM {db:Identifier}.clarification_steps "
        "WHERE conversation_id IN {ids:Array(String)} GROUP BY conversation_id",
        {"ids": list(conversation_ids)},
    )
    return {r["conversation_id"]: int(r["revision"]) for r in rows}


_LATEST = (
    "SELECT * FROM {db:Identifier}.clarification_steps FINAL "
    "ORDER BY revision DESC LIMIT 1 BY conversation_id"
)


def review_items(store: Warehouse, limit: int = 500) -> list[dict[str, Any]]:
    """The clarification review items: each conversation's newest step when it is escalated
    or sampled for review, oldest step first, with ``reviewers`` (who gave a verdict).
    Raises ``WarehouseError``."""
    return store.select(
        "SELECT s.conversation_id AS conversation_id, s.revision AS revision, s.log_id AS log_id, "
        "s.policy_bundle AS policy_bundle, s.category AS category, s.route AS route, "
        "s.round AS round, s.outcome AS outcome, s.escalated AS escalated, "
        "s.escalation_reason AS escalation_reason, s.sampled_for_review AS sampled_for_review, "
        "s.step_at AS step_at, v.reviewers AS reviewers "
        f"FROM ({_LATEST}) AS s LEFT JOIN ("
        "  SELECT conversation_id, groupUniqArray(reviewer) AS reviewers "
        "  FROM {db:Identifier}.clarification_verdicts FINAL GROUP BY conversation_id"
        ") AS v USING (conversation_id) "
        "WHERE s.escalated OR s.sampled_for_review "
        "ORDER BY s.step_at, s.conversation_id LIMIT {limit:UInt32}",
        {"limit": limit},
    )


def conversation_steps(store: Warehouse, conversation_id: str) -> list[dict[str, Any]]:
    """Every step row of ``conversation_id``, oldest first (empty when unknown). Raises
    ``WarehouseError``."""
    return store.select(
        "SELECT * FROM {db:Identifier}.clarification_steps FINAL "
        "WHERE conversation_id = {id:String} ORDER BY revision",
        {"id": conversation_id},
    )


def verdict_id(conversation_id: str, revision: int, reviewer: str, decision: str,
               questions_ok: bool, note: str) -> str:  # fmt: skip
    """Deterministic id of a verdict: the same verdict submitted twice is one row."""
    payload = orjson.dumps([conversation_id, revision, reviewer, decision, questions_ok, note])
    return hashlib.sha256(payload).hexdigest()


def insert_verdict(store: Warehouse, row: Mapping[str, Any]) -> None:
    """Store one verdict (a ``VERDICT_COLUMNS`` mapping; ``verdict_id`` computed when
    absent). Raises ``ValueError`` for an unknown decision, ``WarehouseError``."""
    if row["decision"] not in DECISIONS:
        raise ValueError(f"decision must be one of {DECISIONS}")
    values = dict(row)
    values.setdefault(
        "verdict_id",
        verdict_id(values["conversation_id"], values["revision"], values["reviewer"],
                   values["decision"], values["questions_ok"], values["note"]),
    )  # fmt: skip
    store.insert_rows("clarification_verdicts", VERDICT_COLUMNS, [_values(values, VERDICT_COLUMNS)])


def verdicts_on(store: Warehouse, conversation_id: str) -> list[dict[str, Any]]:
    """Each reviewer's newest verdict on ``conversation_id``, newest first. Raises
    ``WarehouseError``."""
    return store.select(
        "SELECT * FROM {db:Identifier}.clarification_verdicts FINAL "
        "WHERE conversation_id = {id:String} "
        "ORDER BY submitted_at DESC LIMIT 1 BY reviewer",
        {"id": conversation_id},
    )


def reviewed_conversations(store: Warehouse) -> list[dict[str, Any]]:
    """Every conversation with a clarification verdict, for the labels export (``refusal-audit
    review clarification-labels``), ordered by conversation id.

    Each item: ``conversation_id``; ``revision``, the newest revision of the conversation
    that has verdicts; ``verdicts``, each reviewer's newest verdict ON that revision
    (``reviewer``, ``revision``, ``questions_ok``, ``note``, ``submitted_at``; ordered by
    reviewer; same-time ties broken by ``verdict_id``): a verdict on an earlier revision
    never saw the later questions and does not count, even when its reviewer gave none on
    the newest; ``state``, the ``ConversationState`` JSON of that revision's step, or None
    when the trail lacks it. Raises ``WarehouseError``.
    """
    verdicts = store.select(
        "SELECT conversation_id, reviewer, revision, questions_ok, note, submitted_at "
        "FROM {db:Identifier}.clarification_verdicts FINAL "
        "ORDER BY conversation_id, reviewer, revision DESC, submitted_at DESC, verdict_id DESC "
        "LIMIT 1 BY conversation_id, reviewer, revision"
    )
    if not verdicts:
        return []
    by_conversation: dict[str, list[dict[str, Any]]] = {}
    for v in verdicts:
        by_conversation.setdefault(v["conversation_id"], []).append(v)
    states = {
        (r["conversation_id"], int(r["revision"])): r["state"]
        for r in store.select(
            "SELECT conversation_id, revision, state "
            "FROM {db:Identifier}.clarification_steps FINAL "
            "WHERE conversation_id IN {ids:Array(String)}",
            {"ids": sorted(by_conversation)},
        )
    }
    out = []
    for conversation_id in sorted(by_conversation):
        all_verdicts = by_conversation[conversation_id]
        revision = max(int(v["revision"]) for v in all_verdicts)
        out.append({
            "conversation_id": conversation_id,
            "revision": revision,
            "state": states.get((conversation_id, revision)),
            "verdicts": [v for v in all_verdicts if int(v["revision"]) == revision],
        })  # fmt: skip
    return out
