"""The conversation state machine: pure functions over ``ConversationState``.

Deterministic (the caller passes ``now``) and free of I/O, so the HTTP service and a Kafka
service share them and give the same answers. Every transition returns a new state with
``revision`` + 1 and ``updated_at = now``; applying the same answer or outcome again (a
redelivered message, a retried HTTP call) changes nothing and returns the same result.

::

    open ──(route != policy_gray_zone)──> not_asked                      (final)
      │ ──(no valid / checked questions, judge rejected or failed,
      │    classifier failed)──> escalated                                (final)
      └──(questions)──> asking (round 1)
    asking ──answer, every question answered──> awaiting_reevaluation
           ──answer, some left open, round < MAX_ROUNDS──> asking (next round: the open
             questions again)
           ──answer, some left open, round = MAX_ROUNDS──> escalated (budget_spent)
    awaiting_reevaluation ──accepted──> clarified                        (final)
                          ──refused_again──> escalated (refused_again)   (final)

The service never decides that a clarified request is safe: it emits the
``ClarifiedRequest`` and waits for the application's ``ReevaluationOutcome``.

Client times: ``answered_at`` and ``decided_at`` come from the application's clock, the
rounds' ``asked_at`` from the service's. An answer dated before its round was asked, or an
outcome dated before the answer it decides, is refused (``invalid_time``) when it is earlier
by more than ``CLOCK_SKEW_TOLERANCE``; within the tolerance an early ``answered_at`` is
stored as the round's ``asked_at``, so a conversation's history never runs backwards. A
time ahead of the service's clock by more than the allowed skew (``check_not_ahead``; the
service passes ``clarify_max_clock_skew_seconds``) is refused (``time_in_future``): a
conversation answered "in 9999" would refuse every later outcome as ``invalid_time``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import orjson
from pydantic_core import to_jsonable_python

from processors.clarification.routing import RoutingDecision, request_hash
from processors.engines.llm_call import cut
from schemas.clarification import (
    FINAL_OUTCOMES,
    MAX_ROUNDS,
    NOTE_MAX_CHARS,
    ROUTE_DECISIONS,
    AnsweredQuestion,
    AnswerItem,
    ClarificationAnswer,
    ClarificationQuestion,
    ClarificationRequest,
    ClarificationResponse,
    ClarificationRound,
    ClarifiedRequest,
    ConversationState,
    Escalation,
    EscalationReason,
    JudgeVerdict,
    Outcome,
    QuestionSet,
    ReevaluationOutcome,
)

NON_ANSWERS = frozenset({"", "-", "n/a", "na", "skip", "?", "...", "no comment"})
"""Answers that leave a question open (compared lower-cased, stripped)."""
CLARIFIED_HEADER = "Clarifications from the user:"

_DETAIL_MAX = NOTE_MAX_CHARS * 4

CLOCK_SKEW_TOLERANCE = timedelta(seconds=60)
"""How much earlier than the service's own time of the step before a client's
``answered_at`` / ``decided_at`` may be (clock skew between the application and the
service); earlier is refused (``invalid_time``)."""


class ConversationError(ValueError):
    """A message that does not fit the conversation's state.

    ``code``: ``finished`` (the conversation is over), ``not_asking`` (no questions are
    open), ``not_awaiting`` (no clarified request awaits an outcome), ``wrong_round`` (the
    message names another round), ``unknown_question`` (a question index the round lacks),
    ``conflict`` (a different message for a round that was already answered or decided),
    ``invalid_time`` (an answer dated before its round was asked, or an outcome dated before
    the answer it decides, by more than ``CLOCK_SKEW_TOLERANCE``), ``time_in_future`` (a
    client time ahead of the service's clock by more than the allowed skew).
    """

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        """The message's field at fault, when the error is about one (``time_in_future``)."""


@dataclass(frozen=True)
class EngineIdentity:
    """The question engine a conversation's questions came from (name, model, prompt)."""

    name: str = ""
    model: str = ""
    prompt_version: str = ""


@dataclass(frozen=True)
class AnswerResult:
    """After an answer: the new ``state``; ``clarified`` when every question is answered
    (for the application's re-evaluation); ``escalation`` when the budget is spent; neither
    when another round is asked (``state.outcome == asking``). ``replayed`` is True when the
    same answer had been applied before (nothing changed)."""

    state: ConversationState
    clarified: ClarifiedRequest | None = None
    escalation: Escalation | None = None
    replayed: bool = False


@dataclass(frozen=True)
class OutcomeResult:
    """After a re-evaluation outcome: the new ``state`` and the ``escalation`` when the
    clarified request was refused again; ``replayed`` as for :class:`AnswerResult`."""

    state: ConversationState
    escalation: Escalation | None = None
    replayed: bool = False


def _base(
    request: ClarificationRequest,
    decision: RoutingDecision | None,
    engine: EngineIdentity,
    now: datetime,
) -> dict[str, object]:
    return {
        "conversation_id": request.conversation_id,
        "log_id": request.log_id,
        "policy_bundle": request.policy_bundle,
        "model": request.model,
        "product": request.product,
        "request_hash": request_hash(request.request),
        "request": request.request,
        "refusal": request.refusal,
        "category": decision.category if decision is not None else "",
        "route": decision.route if decision is not None else None,
        "engine": engine.name,
        "engine_model": engine.model,
        "prompt_version": engine.prompt_version,
        "created_at": now,
        "updated_at": now,
    }


def open_not_asked(
    request: ClarificationRequest, decision: RoutingDecision, now: datetime
) -> ConversationState:
    """A conversation whose route asks nothing (``outcome == not_asked``, final)."""
    return ConversationState(
        **_base(request, decision, EngineIdentity(), now),
        round=0,
        outcome=Outcome.not_asked,
    )


def open_asking(
    request: ClarificationRequest,
    decision: RoutingDecision,
    questions: QuestionSet,
    engine: EngineIdentity,
    now: datetime,
    judge: JudgeVerdict | None = None,
) -> ConversationState:
    """A conversation asking round 1 with ``questions`` (already validated and checked;
    ``judge``: the LLM judge's ``pass`` when it ran)."""
    first = ClarificationRound(number=1, questions=list(questions.questions), asked_at=now)
    return ConversationState(
        **_base(request, decision, engine, now),
        judge=judge,
        rounds=[first],
        round=1,
        outcome=Outcome.asking,
    )


def open_escalated(
    request: ClarificationRequest,
    decision: RoutingDecision | None,
    reason: EscalationReason,
    detail: str,
    engine: EngineIdentity,
    now: datetime,
    judge: JudgeVerdict | None = None,
    circumvention_reasons: Sequence[str] = (),
) -> ConversationState:
    """A conversation escalated before any question was surfaced (``detail``: why, cut to
    the contract's bound; ``judge``: the LLM judge's verdict when it ran;
    ``circumvention_reasons``: the circumvention check's reason codes when it rejected the
    set, each once, in the order given). Raises ``pydantic.ValidationError`` for a code
    outside ``schemas.clarification.CircumventionReason``."""
    return ConversationState(
        **_base(request, decision, engine, now),
        circumvention_reasons=list(dict.fromkeys(circumvention_reasons)),
        judge=judge,
        round=0,
        outcome=Outcome.escalated,
        escalation_reason=reason,
        escalation_detail=cut(detail or reason.value, _DETAIL_MAX),
    )


def _is_answered(text: str) -> bool:
    return " ".join(text.split()).lower() not in NON_ANSWERS


def _pairs(state: ConversationState) -> list[AnsweredQuestion]:
    """Every answered question of every round, in order."""
    out: list[AnsweredQuestion] = []
    for r in state.rounds:
        by_index = {a.question_index: a.text for a in r.answers}
        for i, q in enumerate(r.questions):
            text = by_index.get(i, "")
            if _is_answered(text):
                out.append(
                    AnsweredQuestion(
                        round=r.number,
                        question_index=i,
                        question_text=q.question_text,
                        answer=text.strip(),
                    )
                )
    return out


def clarified_text(request: str, pairs: list[AnsweredQuestion]) -> str:
    """The original request followed by ``CLARIFIED_HEADER`` and one ``Q:``/``A:`` pair per
    answered question: what the application re-evaluates."""
    lines = [request, "", CLARIFIED_HEADER]
    for p in pairs:
        lines += [f"Q: {p.question_text}", f"A: {p.answer}"]
    return "\n".join(lines)


def clarified_request(state: ConversationState, now: datetime) -> ClarifiedRequest:
    """The ``ClarifiedRequest`` of a conversation awaiting re-evaluation (its last round)."""
    pairs = _pairs(state)
    return ClarifiedRequest(
        conversation_id=state.conversation_id,
        log_id=state.log_id,
        round=state.round,
        request=state.request,
        answers=pairs,
        clarified_request=clarified_text(state.request, pairs),
        emitted_at=now,
    )


def escalation_for(state: ConversationState, now: datetime) -> Escalation:
    """The ``Escalation`` of an escalated conversation, with its full history. Raises
    ``ConversationError`` (``not_escalated``) for a conversation that is not escalated."""
    if state.escalation_reason is None:
        raise ConversationError("not_escalated", "the conversation is not escalated")
    return Escalation(
        conversation_id=state.conversation_id,
        log_id=state.log_id,
        reason=state.escalation_reason,
        detail=state.escalation_detail or state.escalation_reason.value,
        state=state,
        escalated_at=now,
    )


def _next(state: ConversationState, now: datetime, **changes: object) -> ConversationState:
    """``state`` with ``changes``, ``updated_at = now`` and ``revision + 1``, validated (a
    JSON round trip: strict models read enum and datetime strings from JSON only)."""
    data = state.model_dump(mode="json")
    data.update(to_jsonable_python(changes))
    data["updated_at"] = to_jsonable_python(now)
    data["revision"] = state.revision + 1
    return ConversationState.model_validate_json(orjson.dumps(data))


def check_not_ahead(field: str, value: datetime, now: datetime, max_ahead: timedelta) -> None:
    """Refuse a client time ``value`` (the message's ``field``, e.g. ``answered_at``) that
    is ahead of the service's clock ``now`` by more than ``max_ahead`` (clock skew between
    the application and the service; the setting ``clarify_max_clock_skew_seconds``).
    Raises ``ConversationError`` (``time_in_future``) naming the field."""
    ahead = value - now
    if ahead > max_ahead:
        raise ConversationError(
            "time_in_future",
            f"{field} {value.isoformat()} is ahead of the service's clock "
            f"({now.isoformat()}) by more than {max_ahead.total_seconds():.0f} s "
            "(clarify_max_clock_skew_seconds): send the time the user answered, or now",
            field,
        )


def answer_time(
    asked_at: datetime, answered_at: datetime, tolerance: timedelta = CLOCK_SKEW_TOLERANCE
) -> datetime:
    """The ``answered_at`` stored for an answer to a round asked at ``asked_at``: the
    client's time, or ``asked_at`` when the client's is earlier by at most ``tolerance``.
    Raises ``ConversationError`` (``invalid_time``) when it is earlier by more."""
    if answered_at >= asked_at:
        return answered_at
    if asked_at - answered_at > tolerance:
        raise ConversationError(
            "invalid_time",
            f"answered_at {answered_at.isoformat()} is before the round was asked "
            f"({asked_at.isoformat()})",
        )
    return asked_at


def _open_round(state: ConversationState, answer: ClarificationAnswer) -> ClarificationRound:
    """The round ``answer`` answers, which must be open; raises ``ConversationError``
    (``finished``, ``not_asking``, ``wrong_round``, ``unknown_question``) otherwise."""
    if state.outcome in FINAL_OUTCOMES:
        raise ConversationError("finished", f"the conversation is finished ({state.outcome.value})")
    if state.outcome != Outcome.asking:
        raise ConversationError("not_asking", f"no questions are open ({state.outcome.value})")
    if answer.round != state.round:
        raise ConversationError(
            "wrong_round", f"the answer is for round {answer.round}; round {state.round} is asked"
        )
    current = state.rounds[-1]
    bad = [a.question_index for a in answer.answers if a.question_index >= len(current.questions)]
    if bad:
        raise ConversationError(
            "unknown_question",
            f"round {state.round} has {len(current.questions)} questions; no index {bad[0]}",
        )
    return current


def apply_answer(
    state: ConversationState,
    answer: ClarificationAnswer,
    now: datetime,
    tolerance: timedelta = CLOCK_SKEW_TOLERANCE,
) -> AnswerResult:
    """Apply the user's answers to the round asked (module docstring).

    Raises ``ConversationError``: ``finished``, ``not_asking``, ``wrong_round``,
    ``unknown_question``, ``conflict`` (another answer for a round already answered) or
    ``invalid_time`` (``answer_time``, with ``tolerance``).
    """
    if answer.conversation_id != state.conversation_id:
        raise ConversationError("wrong_conversation", "the answer names another conversation")
    try:
        done = _replay_answer(state, answer)
    except ConversationError:
        if state.outcome in FINAL_OUTCOMES:
            raise ConversationError(
                "finished", f"the conversation is finished ({state.outcome.value})"
            ) from None
        raise
    if done is not None:
        return done
    current = _open_round(state, answer)
    answered_at = answer_time(current.asked_at, answer.answered_at, tolerance)
    by_index = {a.question_index: a for a in answer.answers}
    answered = current.model_copy(
        update={
            "answers": [by_index[i] for i in sorted(by_index)],
            "answered_at": answered_at,
        }
    )
    open_questions: list[ClarificationQuestion] = [
        q
        for i, q in enumerate(current.questions)
        if i not in by_index or not _is_answered(by_index[i].text)
    ]
    rounds = [*state.rounds[:-1], answered]
    if not open_questions:
        interim = _next(state, now, rounds=rounds)
        pairs = _pairs(interim)
        text = clarified_text(state.request, pairs)
        rounds[-1] = answered.model_copy(update={"clarified_request": text})
        new = _next(state, now, rounds=rounds, outcome=Outcome.awaiting_reevaluation)
        return AnswerResult(new, clarified=clarified_request(new, now))
    if state.round < MAX_ROUNDS:
        follow_up = ClarificationRound(
            number=state.round + 1, questions=open_questions, asked_at=now
        )
        new = _next(
            state, now, rounds=[*rounds, follow_up], round=state.round + 1, outcome=Outcome.asking
        )
        return AnswerResult(new)
    detail = (
        f"{len(open_questions)} question(s) still unanswered after {MAX_ROUNDS} rounds: "
        + " | ".join(q.question_text for q in open_questions)
    )
    new = _next(
        state,
        now,
        rounds=rounds,
        outcome=Outcome.escalated,
        escalation_reason=EscalationReason.budget_spent,
        escalation_detail=cut(detail, _DETAIL_MAX),
    )
    return AnswerResult(new, escalation=escalation_for(new, now))


def _replay_answer(state: ConversationState, answer: ClarificationAnswer) -> AnswerResult | None:
    """The result of an answer already applied to its round, or None when the round is not
    answered yet. Raises ``ConversationError`` (``conflict``) for a different answer."""
    if not 1 <= answer.round <= len(state.rounds):
        return None
    recorded = state.rounds[answer.round - 1]
    if recorded.answered_at is None:
        return None
    given = sorted(answer.answers, key=lambda a: a.question_index)
    # an answer stored with its time moved up to asked_at (answer_time) is the same answer
    stored_time = max(answer.answered_at, recorded.asked_at)
    same_time = recorded.answered_at in (answer.answered_at, stored_time)
    if given != list(recorded.answers) or not same_time:
        raise ConversationError(
            "conflict", f"round {answer.round} was already answered differently"
        )
    clarified = None
    escalation = None
    if state.outcome == Outcome.awaiting_reevaluation and answer.round == state.round:
        clarified = clarified_request(state, state.updated_at)
    if state.outcome == Outcome.escalated:
        escalation = escalation_for(state, state.updated_at)
    return AnswerResult(state, clarified, escalation, replayed=True)


def apply_outcome(
    state: ConversationState,
    outcome: ReevaluationOutcome,
    now: datetime,
    tolerance: timedelta = CLOCK_SKEW_TOLERANCE,
) -> OutcomeResult:
    """Apply the application's re-evaluation of the clarified request (module docstring).

    Raises ``ConversationError``: ``finished``, ``not_awaiting``, ``wrong_round``,
    ``conflict`` (another outcome for a round already decided) or ``invalid_time``
    (``decided_at`` before the round's ``answered_at`` by more than ``tolerance``).
    """
    if outcome.conversation_id != state.conversation_id:
        raise ConversationError("wrong_conversation", "the outcome names another conversation")
    if 1 <= outcome.round <= len(state.rounds):
        decided = state.rounds[outcome.round - 1]
        if decided.reevaluation is not None:
            if decided.reevaluation != outcome.outcome:
                raise ConversationError(
                    "conflict", f"round {outcome.round} was already decided {decided.reevaluation}"
                )
            escalation = (
                escalation_for(state, state.updated_at)
                if state.outcome == Outcome.escalated
                else None
            )
            return OutcomeResult(state, escalation, replayed=True)
    if state.outcome != Outcome.awaiting_reevaluation:
        code = "finished" if state.outcome in FINAL_OUTCOMES else "not_awaiting"
        raise ConversationError(
            code, f"no clarified request awaits an outcome ({state.outcome.value})"
        )
    if outcome.round != state.round:
        raise ConversationError(
            "wrong_round", f"the outcome is for round {outcome.round}; round {state.round} awaits"
        )
    answered_at = state.rounds[-1].answered_at
    if answered_at is not None and answered_at - outcome.decided_at > tolerance:
        raise ConversationError(
            "invalid_time",
            f"decided_at {outcome.decided_at.isoformat()} is before the round was answered "
            f"({answered_at.isoformat()})",
        )
    current = state.rounds[-1].model_copy(
        update={"reevaluation": outcome.outcome, "reevaluation_refusal": outcome.refusal}
    )
    rounds = [*state.rounds[:-1], current]
    if outcome.outcome == "accepted":
        return OutcomeResult(_next(state, now, rounds=rounds, outcome=Outcome.clarified))
    detail = "the application refused the clarified request again"
    if outcome.refusal:
        detail += f": {outcome.refusal}"
    new = _next(
        state,
        now,
        rounds=rounds,
        outcome=Outcome.escalated,
        escalation_reason=EscalationReason.refused_again,
        escalation_detail=cut(detail, _DETAIL_MAX),
    )
    return OutcomeResult(new, escalation_for(new, now))


def response_for(state: ConversationState) -> ClarificationResponse:
    """What the service answers about ``state``: route, decision, outcome, the open round's
    questions when asking."""
    if state.outcome == Outcome.escalated:
        decision = "escalated to human review"
    elif state.route is not None:
        decision = ROUTE_DECISIONS[state.route]
    else:
        decision = "unclassified"
    questions = list(state.rounds[-1].questions) if state.outcome == Outcome.asking else []
    return ClarificationResponse(
        conversation_id=state.conversation_id,
        log_id=state.log_id,
        route=state.route,
        category=state.category,
        decision=decision,
        outcome=state.outcome,
        round=state.round,
        questions=questions,
        escalation_reason=state.escalation_reason,
    )


__all__ = [
    "CLOCK_SKEW_TOLERANCE",
    "NON_ANSWERS",
    "AnswerItem",
    "AnswerResult",
    "ConversationError",
    "EngineIdentity",
    "OutcomeResult",
    "answer_time",
    "apply_answer",
    "apply_outcome",
    "clarified_request",
    "clarified_text",
    "escalation_for",
    "open_asking",
    "open_escalated",
    "open_not_asked",
    "response_for",
]
