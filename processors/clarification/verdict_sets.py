"""Reviewers' clarification verdicts as labelled question sets (pure).

The review app records, per reviewer, whether a clarification conversation's questions were
neutral (``clarification_verdicts.questions_ok``; the newest verdict of each reviewer
counts). ``questions_ok = no`` is the circumvention check's ``reject`` label, so a reviewed
conversation becomes one set in the ``datasets/circumvention`` format
(``datasets/circumvention/README.md``): ``refusal-audit review clarification-labels`` writes
them and ``refusal-audit train --with-verdicts`` trains the circumvention model on them.

- **Questions**: every question of every round the conversation asked up to the judged
  revision (the state of that step holds them all). The model pools a set by noisy-OR, so a
  set is bad when any one question is, as a reviewer's "not neutral" judges the whole set.
- **Label** (:func:`verdict_label`): ``reject`` when at least half of the reviewers (each
  reviewer's newest verdict) said the questions were not neutral; a tie rejects, the
  conservative side for a safety check.
- **Domain** :data:`VERDICT_DOMAIN` for every set: the model's leave-one-domain-out then
  keeps the reviewers' sets together as a fold of their own, apart from the corpus domains.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from schemas.clarification import ConversationState

VERDICT_DOMAIN = "reviewer-verdicts"
"""The ``domain`` of every set made from reviewers' verdicts."""
VERDICT_AUTHOR = "reviewers"
"""The ``author`` of every set made from reviewers' verdicts."""
MAX_RATIONALE = 1000
"""Characters of the ``rationale`` (the vote and the reviewers' notes) kept; longer is cut
with an ellipsis."""


def verdict_label(questions_ok: Sequence[bool]) -> str:
    """``reject`` when at least half of ``questions_ok`` (one per reviewer) is False, else
    ``acceptable``. Raises ``ValueError`` for an empty sequence."""
    if not questions_ok:
        raise ValueError("a label needs at least one verdict")
    not_neutral = sum(1 for ok in questions_ok if not ok)
    return "reject" if 2 * not_neutral >= len(questions_ok) else "acceptable"


def verdict_set_id(conversation_id: str) -> str:
    """A stable set id for a conversation: ``rv-`` and 16 hex digits of its SHA-256."""
    return "rv-" + hashlib.sha256(conversation_id.encode("utf-8")).hexdigest()[:16]


def asked_questions(state: ConversationState) -> list[dict[str, str]]:
    """Every question of every round of ``state``, in order, as the corpus's question
    objects (``question_text``, ``target_ambiguity``, ``safety_guardrail``); empty when no
    question was surfaced (a set rejected before it was asked is not in the state)."""
    return [
        {
            "question_text": q.question_text,
            "target_ambiguity": q.target_ambiguity,
            "safety_guardrail": q.safety_guardrail,
        }
        for r in state.rounds
        for q in r.questions
    ]


def _rationale(verdicts: Sequence[Mapping[str, Any]]) -> str:
    no = sum(1 for v in verdicts if not v["questions_ok"])
    notes = [" ".join(str(v["note"]).split()) for v in verdicts if str(v["note"]).strip()]
    text = f"{no} of {len(verdicts)} reviewer(s) held the questions not neutral"
    if notes:
        text += ": " + " / ".join(notes)
    if len(text) > MAX_RATIONALE:
        text = text[: MAX_RATIONALE - 1] + "…"
    return text


def verdict_set(
    state: ConversationState, verdicts: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The corpus record of one reviewed conversation: ``state`` at the judged revision and
    ``verdicts``, the newest verdict of each reviewer (mappings with ``questions_ok`` and
    ``note``). None when ``state`` holds no question. Besides the corpus fields the record
    keeps ``conversation_id``, ``revision``, ``reviewers`` and ``not_neutral`` (their count
    of ``questions_ok = no``) for tracing it back. Raises ``ValueError`` without verdicts."""
    label = verdict_label([bool(v["questions_ok"]) for v in verdicts])
    questions = asked_questions(state)
    if not questions:
        return None
    return {
        "set_id": verdict_set_id(state.conversation_id),
        "domain": VERDICT_DOMAIN,
        "request": state.request,
        "refusal": state.refusal,
        "questions": questions,
        "label": label,
        "reasons": [],
        "rationale": _rationale(verdicts),
        "author": VERDICT_AUTHOR,
        "conversation_id": state.conversation_id,
        "revision": state.revision,
        "reviewers": len(verdicts),
        "not_neutral": sum(1 for v in verdicts if not v["questions_ok"]),
    }
