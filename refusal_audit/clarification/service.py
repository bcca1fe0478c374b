"""The clarification service: a ``Clarifier``, a ``StateStore`` and a clock, interface-free.

The HTTP app (``refusal_audit.clarification.app``) calls it; a Kafka service can call the same
methods, so both give the same answers from one store. Every method raises
:class:`ServiceError` (an HTTP status, a stable ``code`` and a message) for input that does
not fit; nothing else is expected to escape.

Personal data: every input is redacted first (``processors.clarification.privacy``, with
the audit's redactor), before it reaches an engine, the store, the trail or an output; the
conversation keeps, and hands back, only the redacted texts (docs/clarification.md).

Redelivery and retries: opening a conversation id again with the same request returns the
stored answer; applying the same answer or outcome again returns the same result
(``processors.clarification.conversation``). Concurrent calls for one conversation are
serialised per process, and the store's revision check refuses a lost update across
processes (409 ``concurrent_update``; the caller retries).

Outputs: with ``outputs`` (a :class:`StepOutputs`; ``clarify serve --kafka`` passes the
Kafka topics' publisher) every step, whichever interface made it, is published after its
state is stored and before the method returns, repeats included (a repeat is how a caller
recovers from a step whose outputs were not confirmed: 503 ``outputs_unavailable``, the
state stored, the outputs maybe not sent; the same call again sends them). The
per-conversation lock is held until the outputs are confirmed, so one conversation's outputs
come out in the order of its steps.

Audit trail: with ``trail`` (a :class:`StepLog`; ``clarify serve`` passes
``refusal_audit.clarification.trail.StepTrail`` when ``clarify_audit_trail`` is on) every step's
``clarification_steps`` row is part of the step, like its outputs: it is submitted after the
state is stored, and the method returns only once the row is stored (the outputs are
confirmed meanwhile, concurrently). A row the warehouse did not store is a 503
``trail_unavailable`` (the state stored, the row maybe not); the same call again is a repeat,
and a repeat always writes its state's row again. A step also writes the row of the state it
starts from unless this process has stored that row, so a state whose row was lost (its
caller gave up after the 503, or the process died) gets its row with the conversation's
next step; rows are keyed (conversation, revision), so writing one twice is harmless.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pydantic import BaseModel

from processors.clarification.conversation import (
    ConversationError,
    apply_answer,
    apply_outcome,
    check_not_ahead,
    escalation_for,
    response_for,
)
from processors.clarification.flow import Clarifier, Opened, UnknownBundleError
from processors.clarification.privacy import redact_answer, redact_outcome, redact_request
from processors.clarification.routing import request_hash
from processors.redaction import Redactor
from refusal_audit.clarification.store import StaleStateError, StateStore, StoreUnavailableError
from schemas.clarification import (
    ClarificationAnswer,
    ClarificationRequest,
    ClarificationResponse,
    ConversationState,
    ReevaluationOutcome,
)

log = logging.getLogger("refusal_audit.clarify")

_STATUS = {
    "finished": 409,
    "not_asking": 409,
    "not_awaiting": 409,
    "wrong_round": 409,
    "conflict": 409,
    "unknown_question": 422,
    "wrong_conversation": 422,
    "invalid_time": 422,
    "time_in_future": 422,
}


class ServiceError(Exception):
    """A request the service refuses: ``status`` (HTTP), ``code`` and ``message``;
    ``field`` names the message's field at fault when there is one (e.g. ``answered_at``)."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field


@dataclass(frozen=True)
class StepResult:
    """What an answer or an outcome produced: the conversation's ``response`` and, as JSON
    objects, the ``clarified_request`` and the ``escalation`` (None when there is none)."""

    response: ClarificationResponse
    clarified_request: dict[str, Any] | None = None
    escalation: dict[str, Any] | None = None

    def body(self) -> dict[str, Any]:
        """The JSON body of the HTTP answer."""
        return {
            "conversation": self.response.model_dump(mode="json"),
            "clarified_request": self.clarified_request,
            "escalation": self.escalation,
        }


class OutputsUnavailableError(RuntimeError):
    """A step's outputs were not confirmed (e.g. the broker did not acknowledge them); the
    step's state is stored, and the same call again publishes them."""


class TrailUnavailableError(RuntimeError):
    """A step's audit trail rows were not stored (the warehouse refused or timed out); the
    step's state is stored, and the same call again writes them."""


class StepLog(Protocol):
    """Where the service logs every step (the audit trail, ``StepTrail``)."""

    def submit(self, states: Sequence[ConversationState]) -> Future[None]:
        """Store the trail rows of ``states`` (never blocking): the future completes once
        they are stored, or fails with :class:`TrailUnavailableError`."""
        ...


class StepOutputs(Protocol):
    """Where the service publishes every step's results (``clarify serve --kafka``: the
    ``clarify.questions`` / ``clarified-requests`` / ``escalations`` topics)."""

    def publish(self, conversation_id: str, result: StepResult) -> None:
        """Send ``result`` and return once it is confirmed; blocking (the service calls it
        in a thread). Raises :class:`OutputsUnavailableError` when it is not confirmed."""
        ...


def opened_result(state: ConversationState) -> StepResult:
    """The ``StepResult`` of opening (or re-opening) ``state``'s conversation: its response
    and, for a conversation escalated when it was opened (revision 0), its escalation."""
    escalation = None
    if state.escalation_reason is not None and state.revision == 0:
        escalation = escalation_for(state, state.updated_at).model_dump(mode="json")
    return StepResult(response_for(state), escalation=escalation)


def _utcnow() -> datetime:
    return datetime.now(UTC)


DEFAULT_REDACTOR = Redactor()
"""Every PII kind, as the ``redaction_kinds`` default (``Redactor`` is immutable)."""


class ClarifyService:
    """The service (module docstring). ``clock`` returns the aware current time;
    ``redactor`` redacts every input (None: no redaction, for ``redaction_enabled = false``;
    ``refusal_audit.clarification.server.build_service`` passes the configured one)."""

    def __init__(
        self,
        clarifier: Clarifier,
        store: StateStore,
        clock: Callable[[], datetime] = _utcnow,
        on_change: Callable[[ConversationState], None] | None = None,
        redactor: Redactor | None = DEFAULT_REDACTOR,
        outputs: StepOutputs | None = None,
        trail: StepLog | None = None,
        trail_timeout: float = 30.0,
        max_clock_skew: timedelta = timedelta(seconds=300),
    ) -> None:
        self.clarifier = clarifier
        self.store = store
        self.clock = clock
        self.redactor = redactor
        self.on_change = on_change
        """Called with every state the service stored (after the store accepted it), e.g.
        to observe them in a test; it must not raise. (The audit trail is ``trail``, which
        the step waits for.)"""
        self.outputs = outputs
        """Publishes every step (module docstring); None: the callers' answers only."""
        self.trail = trail
        """Logs every step (module docstring); None: no audit trail."""
        self.trail_timeout = trail_timeout
        """Seconds a step waits for its trail rows before answering 503."""
        self.max_clock_skew = max_clock_skew
        """How far ahead of ``clock`` a client's ``answered_at`` / ``decided_at`` may be
        (``clarify_max_clock_skew_seconds``); further is a 422 ``time_in_future``."""
        self._logged: OrderedDict[str, int] = OrderedDict()
        """conversation id -> the newest revision whose row this process stored (bounded:
        forgetting one only means its row is written again)."""
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, conversation_id: str) -> asyncio.Lock:
        lock = self._locks.get(conversation_id)
        if lock is None:
            if len(self._locks) > 10_000:  # forget idle locks; a held one stays referenced
                self._locks = {k: v for k, v in self._locks.items() if v.locked()}
            lock = self._locks[conversation_id] = asyncio.Lock()
        return lock

    def _state(self, conversation_id: str) -> ConversationState:
        state = self.store.get(conversation_id)
        if state is None:
            raise ServiceError(404, "unknown_conversation", "no such conversation")
        return state

    def _put(self, state: ConversationState, expected: int | None) -> None:
        try:
            self.store.put(state, expected)
        except StaleStateError as exc:
            raise ServiceError(409, "concurrent_update", str(exc)) from exc
        except StoreUnavailableError as exc:
            log.error("clarify: the state store refused conversation %s: %s",
                      state.conversation_id, exc)  # fmt: skip
            raise ServiceError(503, "store_unavailable", "the state store is unavailable") from exc
        if self.on_change is not None:
            self.on_change(state)

    def _unlogged(self, state: ConversationState) -> bool:
        """Whether this process has not stored the trail row of ``state``."""
        return self._logged.get(state.conversation_id, -1) < state.revision

    async def _log(self, states: list[ConversationState]) -> None:
        """Store the trail rows of ``states`` (if there is a trail) and wait for them.
        Raises ``ServiceError`` 503 ``trail_unavailable``."""
        if self.trail is None or not states:
            return
        conversation_id = states[-1].conversation_id
        try:
            await asyncio.wait_for(
                asyncio.wrap_future(self.trail.submit(states)), self.trail_timeout
            )
        except (TrailUnavailableError, TimeoutError) as exc:
            log.error("clarify: the trail rows of conversation %s were not stored: %s",
                      conversation_id, str(exc) or "timed out")  # fmt: skip
            raise ServiceError(
                503, "trail_unavailable",
                "the step is stored but its audit trail row was not; send it again",
            ) from exc  # fmt: skip
        newest = max(s.revision for s in states)
        if self._logged.get(conversation_id, -1) < newest:
            self._logged[conversation_id] = newest
            self._logged.move_to_end(conversation_id)
            if len(self._logged) > 100_000:
                self._logged.popitem(last=False)

    async def _confirm(
        self, conversation_id: str, states: list[ConversationState], result: StepResult
    ) -> None:
        """Make a stored step durable: its trail rows (``states``) and its outputs, both
        confirmed (concurrently) before this returns. Raises ``ServiceError`` 503
        ``trail_unavailable`` / ``outputs_unavailable``."""
        outcomes = await asyncio.gather(
            self._log(states), self._publish(conversation_id, result), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _publish(self, conversation_id: str, result: StepResult) -> None:
        """Publish ``result`` on ``outputs`` (if any) and wait for the confirmation. Raises
        ``ServiceError`` 503 ``outputs_unavailable``."""
        if self.outputs is None:
            return
        try:
            await asyncio.to_thread(self.outputs.publish, conversation_id, result)
        except OutputsUnavailableError as exc:
            log.error("clarify: the outputs of conversation %s were not confirmed: %s",
                      conversation_id, exc)  # fmt: skip
            raise ServiceError(
                503, "outputs_unavailable",
                "the step is stored but its outputs were not confirmed; send it again",
            ) from exc  # fmt: skip

    async def open(
        self, request: ClarificationRequest
    ) -> tuple[ClarificationResponse, Opened | None]:
        """Open a conversation for a refusal; returns the response and, when it was new, what
        opening it produced (``None`` for a repeated request). The step is logged on
        ``trail`` and published on ``outputs`` first (a repeated request logs the current
        state and publishes the current response again). Raises ``ServiceError``: 409
        ``conversation_exists`` (the id holds another request), 422 ``unknown_bundle``, 503
        ``store_unavailable`` / ``trail_unavailable`` / ``outputs_unavailable``."""
        if self.redactor is not None:
            request = redact_request(request, self.redactor)
        async with self._lock(request.conversation_id):
            existing = self.store.get(request.conversation_id)
            if existing is not None:
                if (
                    existing.request_hash == request_hash(request.request)
                    and existing.log_id == request.log_id
                ):
                    result = opened_result(existing)
                    await self._confirm(request.conversation_id, [existing], result)
                    return result.response, None
                raise ServiceError(
                    409, "conversation_exists", "the conversation id holds another request"
                )
            try:
                opened = await self.clarifier.open(request, self.clock())
            except UnknownBundleError as exc:
                raise ServiceError(422, "unknown_bundle", str(exc)) from exc
            self._put(opened.state, None)
            log.info(
                "clarify: conversation %s opened: route %s, outcome %s",
                request.conversation_id,
                opened.state.route,
                opened.state.outcome.value,
            )
            result = opened_result(opened.state)
            await self._confirm(request.conversation_id, [opened.state], result)
            return result.response, opened

    async def answer(self, conversation_id: str, answer: ClarificationAnswer) -> StepResult:
        """Apply the user's answers (and log the step on ``trail``, publish it on
        ``outputs``). Raises ``ServiceError`` (404 unknown conversation; 409 finished, not
        asking, wrong round, conflict; 422 unknown question, id mismatch, ``invalid_time``:
        answered before the round was asked; 503 store, trail or outputs unavailable)."""
        self._same_id(conversation_id, answer.conversation_id)
        if self.redactor is not None:
            answer = redact_answer(answer, self.redactor)

        def step(state: ConversationState) -> tuple[ConversationState, bool, StepResult]:
            now = self.clock()
            check_not_ahead("answered_at", answer.answered_at, now, self.max_clock_skew)
            result = apply_answer(state, answer, now)
            stepped = self._stored(
                state, result.state, result.replayed, result.clarified, result.escalation
            )
            return result.state, result.replayed, stepped

        return await self._step(conversation_id, step)

    async def outcome(self, conversation_id: str, outcome: ReevaluationOutcome) -> StepResult:
        """Apply the application's re-evaluation outcome (and log and publish the step). Raises
        ``ServiceError`` as :meth:`answer` (409 not awaiting instead of not asking;
        ``invalid_time``: decided before the round was answered; ``time_in_future``:
        ``decided_at`` ahead of the service's clock by more than ``max_clock_skew``)."""
        self._same_id(conversation_id, outcome.conversation_id)
        if self.redactor is not None:
            outcome = redact_outcome(outcome, self.redactor)

        def step(state: ConversationState) -> tuple[ConversationState, bool, StepResult]:
            now = self.clock()
            check_not_ahead("decided_at", outcome.decided_at, now, self.max_clock_skew)
            result = apply_outcome(state, outcome, now)
            stepped = self._stored(state, result.state, result.replayed, None, result.escalation)
            return result.state, result.replayed, stepped

        return await self._step(conversation_id, step)

    async def _step(
        self,
        conversation_id: str,
        step: Callable[[ConversationState], tuple[ConversationState, bool, StepResult]],
    ) -> StepResult:
        """Run ``step`` (state -> new state, replayed, result) on the stored state under the
        conversation's lock, then log and publish it (``_confirm``): a new state's row, with
        the row of the state it started from when this process has not stored that one; a
        repeat's row (the current state) always."""
        async with self._lock(conversation_id):
            state = self._state(conversation_id)
            try:
                after, replayed, result = step(state)
            except ConversationError as exc:
                status = _STATUS.get(exc.code, 409)
                raise ServiceError(status, exc.code, str(exc), exc.field) from exc
            rows = [after] if replayed or not self._unlogged(state) else [state, after]
            await self._confirm(conversation_id, rows, result)
            return result

    def _stored(
        self,
        before: ConversationState,
        after: ConversationState,
        replayed: bool,
        clarified: BaseModel | None,
        escalation: BaseModel | None,
    ) -> StepResult:
        if not replayed:
            self._put(after, before.revision)
        return StepResult(
            response_for(after),
            clarified.model_dump(mode="json") if clarified is not None else None,
            escalation.model_dump(mode="json") if escalation is not None else None,
        )

    def get(self, conversation_id: str) -> ConversationState:
        """The full state. Raises ``ServiceError`` 404 for an unknown conversation."""
        return self._state(conversation_id)

    @staticmethod
    def _same_id(path_id: str, body_id: str) -> None:
        if path_id != body_id:
            raise ServiceError(
                422, "wrong_conversation", "conversation_id in the body differs from the path"
            )
