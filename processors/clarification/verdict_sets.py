"""Reviewers' clarification verdicts as labelled question sets (pure).

The review app records, per reviewer, whether a clarification conversation's questions were
neutral (``clarification_verdicts.questions_ok``; the newest verdict of each reviewer on the
judged revision counts). ``questions_ok = no`` is the circumvention check's ``reject``
label, so a reviewed conversation becomes one set in the ``datasets/circumvention`` format
(``datasets/circumvention/README.md``): ``refusal-audit review clarification-labels`` writes
them and ``refusal-audit train --with-verdicts`` trains the circumvention model on them.

- **Revision**: the newest revision of the conversation that has verdicts; only verdicts on
  that revision count (a verdict on an earlier revision never saw the later questions).
- **Questions**: the distinct questions the conversation asked up to that revision, in
  first-asked order (the state of that step holds every round; a second round re-asks the
  questions the first left open, and each is kept once, so noisy-OR counts it once). The
  model pools a set by noisy-OR, so a set is bad when any one question is, as a reviewer's
  "not neutral" judges the whole set.
- **Label** (:func:`verdict_label`): ``reject`` when at least half of the reviewers (each
  reviewer's newest verdict on that revision) said the questions were not neutral; a tie
  rejects, the conservative side for a safety check.
- **Domain** :data:`VERDICT_DOMAIN` for every set: the model's leave-one-domain-out then
  keeps the reviewers' sets together as a fold of their own, apart from the corpus domains.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from schemas.clarification import MAX_QUESTIONS, MAX_ROUNDS, ConversationState

VERDICT_DOMAIN = "reviewer-verdicts"
"""The ``domain`` of every set made from reviewers' verdicts."""
VERDICT_AUTHOR = "reviewers"
"""The ``author`` of every set made from reviewers' verdicts."""
MAX_RATIONALE = 1000
"""Characters of the ``rationale`` (the vote and the reviewers' notes) kept; longer is cut
with an ellipsis."""


MAX_SET_QUESTIONS = MAX_ROUNDS * MAX_QUESTIONS
"""Most questions a set made from a conversation can hold: ``MAX_ROUNDS`` rounds of at most
``MAX_QUESTIONS`` (``schemas.clarification``; 2 x 4 = 8)."""


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
    """The distinct questions of ``state``'s rounds in first-asked order (a later round
    re-asks questions the earlier left open: each is kept once, by its text), as the
    corpus's question objects (``question_text``, ``target_ambiguity``,
    ``safety_guardrail``); empty when no question was surfaced (a set rejected before it was
    asked is not in the state)."""
    out: dict[str, dict[str, str]] = {}
    for r in state.rounds:
        for q in r.questions:
            out.setdefault(
                q.question_text,
                {
                    "question_text": q.question_text,
                    "target_ambiguity": q.target_ambiguity,
                    "safety_guardrail": q.safety_guardrail,
                },
            )
    return list(out.values())


def normalised_text(text: str) -> str:
    """``text`` compared by content: NFKC, case-folded, whitespace runs collapsed to one
    space, punctuation and symbols stripped at both ends (``"  Why?? "`` -> ``"why"``)."""
    words = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    start, end = 0, len(words)
    while start < end and _edge(words[start]):
        start += 1
    while end > start and _edge(words[end - 1]):
        end -= 1
    return words[start:end]


def _edge(ch: str) -> bool:
    return ch.isspace() or unicodedata.category(ch)[0] in "PS"


class SetIndex:
    """Question sets of a corpus by content, to refuse the same set under another form.

    A set matches an indexed one when their requests are equal after
    :func:`normalised_text` and its normalised questions, taken as a set (order and repeats
    ignored), are a subset of the indexed set's (the same set, reordered or reformatted, or
    part of it)."""

    def __init__(self, sets: Iterable[tuple[str, str, Sequence[str]]] = ()) -> None:
        """``sets``: ``(set_id, request, question texts)`` triples."""
        self._ids: set[str] = set()
        self._by_request: dict[str, list[tuple[frozenset[str], str]]] = {}
        for set_id, request, questions in sets:
            self._ids.add(set_id)
            key = frozenset(normalised_text(q) for q in questions)
            self._by_request.setdefault(normalised_text(request), []).append((key, set_id))

    def match(self, set_id: str, request: str, questions: Sequence[str]) -> str | None:
        """The id of an indexed set that ``(set_id, request, questions)`` repeats: the same
        id, or the same request with its questions a subset of that set's; else None."""
        if set_id in self._ids:
            return set_id
        key = frozenset(normalised_text(q) for q in questions)
        for indexed, indexed_id in self._by_request.get(normalised_text(request), []):
            if key <= indexed:
                return indexed_id
        return None


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
    ``verdicts``, the newest verdict of each reviewer on that revision (mappings with
    ``questions_ok`` and ``note``). None when ``state`` holds no question. Besides the
    corpus fields the record keeps ``conversation_id``, ``revision``, ``reviewers`` and
    ``not_neutral`` (their count of ``questions_ok = no``) for tracing it back.
    Raises ``ValueError`` without verdicts."""
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
