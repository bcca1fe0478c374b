"""The clarification service on Kafka: a state store on a compacted topic and the consumer loop.

``refusal-audit clarify serve --kafka`` runs the HTTP app and :class:`KafkaLoop` in one
process, on one event loop, over one :class:`~refusal_audit.clarification.service.ClarifyService`
and one state store, so both interfaces give the same answers from the same states.

Topics (``streams.topics``, names ``<kafka_topic_prefix>clarify.*``; contracts of
``schemas.clarification``, JSON values, the conversation id as key):

- in: ``clarify.requests`` (``ClarificationRequest``), ``clarify.answers``
  (``ClarificationAnswer``), ``clarify.outcomes`` (``ReevaluationOutcome``);
- out: ``clarify.questions`` (the ``ClarificationResponse`` after every step: route,
  decision, the questions when asking), ``clarify.clarified-requests``
  (``ClarifiedRequest``), ``clarify.escalations`` (``Escalation``);
- ``dead-letters``: malformed, oversized or refused input (``schemas.deadletter``), with
  the reason code (``not_json``, ``invalid_request``, ``oversized``, ``tombstone``,
  ``missing_key`` / ``key_mismatch`` (the key must be the body's conversation id), or the
  service's error code: ``unknown_conversation``, ``finished``, ``wrong_round``,
  ``conflict``, ...);
- ``clarify.state``: compacted, every conversation's newest ``ConversationState``
  (:class:`KafkaStateStore`).

Why not a faust Table: a faust table can only be changed from inside an agent's stream
iteration (faust raises "Cannot modify table outside of agent/stream" otherwise), so the HTTP
interface could not write the state without a round trip through a topic, and a table's
changelog write is not confirmed before the source offset is committed. The store here
writes each state synchronously (``acks=all``, idempotent producer) before the service
answers, and the loop commits an input offset only after the state and every output are on
the broker and (with ``clarify_audit_trail``) the step's audit trail row is in the
warehouse.

Outputs of every step: :class:`KafkaOutputs` is the service's ``outputs``, so a step made
over HTTP is published exactly like one made over Kafka; the service confirms a step's
outputs before it answers (the HTTP response, or the loop's commit).

Delivery: at least once. A message is processed (state written), its outputs are confirmed,
then its offset is committed. After a crash (SIGKILL included) the message is redelivered;
the state machine recognises it (same request, same answer, same outcome) and changes
nothing, and its outputs are sent again, so a consumer of the output topics deduplicates by
(conversation id, round, outcome). No round is lost or asked twice: the round number lives
in the stored state, never in the loop. A state or an output the broker did not confirm
makes the loop exit with status 70 without committing (a supervisor restarts it), and so
does a trail row the warehouse did not store; over HTTP it is a 503 (``store_unavailable``:
nothing stored; ``trail_unavailable`` / ``outputs_unavailable``: the state is stored, the
trail row / the outputs maybe not), and the caller sends the same call again, which is
recognised as a repeat and writes the row and publishes the outputs again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from processors.redaction import Redactor
from refusal_audit.clarification.service import (
    ClarifyService,
    OutputsUnavailableError,
    ServiceError,
    StepResult,
)
from refusal_audit.clarification.store import StaleStateError, StoreUnavailableError
from refusal_audit.config import Settings
from schemas.clarification import (
    ClarificationAnswer,
    ClarificationRequest,
    ClarificationResponse,
    ConversationState,
    ReevaluationOutcome,
)
from schemas.deadletter import DeadLetter
from streams.clients import SERVICE_SESSION_TIMEOUT_MS, Brokers, Message
from streams.consumer_loop import (
    EXIT_CRASH,
    ConsumerLoop,
    Handled,
    LoopConfig,
    Rejected,
    dead_letter,
    require_topics,
)
from streams.dead_letters import OriginalRecord
from streams.membership import group_members
from streams.producer import DeliveryError, make_producer, produce_and_wait
from streams.state_topic import read_to_end
from streams.topics import TopicError, Topics, admin_client

log = logging.getLogger("refusal_audit.clarify")

RESTORE_TIMEOUT = 120.0
MEMBER_WAIT_MARGIN = 5.0
"""Seconds beyond the service consumer's session timeout
(``streams.clients.SERVICE_SESSION_TIMEOUT_MS``) that ``check_single_instance`` waits for a
group's members to leave."""


class InstanceConflictError(TopicError):
    """Another clarification service serves the same consumer group (and so the same state
    topic): a second instance would accept conflicting steps."""


class KafkaStateStore:
    """A ``StateStore`` on the compacted topic ``topic``: every state is produced (key: the
    conversation id, value: the state's JSON) and confirmed by the broker before ``put``
    returns; reads come from memory, filled from the topic when the store opens.

    One process serves a state topic at a time (the clarification service); a second
    instance would not see the first one's writes, so ``clarify serve --kafka`` refuses to
    start while the service's consumer group has a live member (``check_single_instance``).
    Raises ``TopicError`` when the topic is missing or cannot be read within
    ``RESTORE_TIMEOUT`` seconds.
    """

    def __init__(self, brokers: Brokers, topic: str, timeout: float = 30.0) -> None:
        self.topic = topic
        self.timeout = timeout
        self._states: dict[str, ConversationState] = {}
        self._lock = threading.Lock()
        self._producer = make_producer(brokers, **{"linger.ms": 0})
        self.restored = read_to_end(
            brokers, topic, "refusal-audit-clarify-restore", self._apply, RESTORE_TIMEOUT
        )

    def _apply(self, msg: Message) -> None:
        key = msg.key()
        value = msg.value()
        if key is None:
            return
        conversation_id = key.decode("utf-8", "replace")
        if value is None:
            self._states.pop(conversation_id, None)
            return
        try:
            self._states[conversation_id] = ConversationState.model_validate_json(value)
        except ValidationError as exc:  # never written by this code; keep going
            log.error("clarify: unreadable state of %s in %s: %s", conversation_id, self.topic, exc)

    def get(self, conversation_id: str) -> ConversationState | None:
        """See ``StateStore``."""
        with self._lock:
            return self._states.get(conversation_id)

    def put(self, state: ConversationState, expected_revision: int | None) -> None:
        """See ``StateStore``; raises ``StoreUnavailableError`` when the broker does not
        confirm the state within ``timeout`` seconds (the state is then not kept here)."""
        errors: list[Any] = []
        with self._lock:
            current = self._states.get(state.conversation_id)
            found = current.revision if current is not None else None
            if found != expected_revision:
                raise StaleStateError(
                    f"conversation {state.conversation_id!r}: revision {found}, "
                    f"expected {expected_revision}"
                )
            self._producer.produce(
                self.topic,
                key=state.conversation_id.encode(),
                value=state.model_dump_json().encode(),
                on_delivery=lambda err, msg: errors.append(err),
            )
            left = self._producer.flush(self.timeout)
            if left or not errors or errors[0] is not None:
                raise StoreUnavailableError(
                    f"the broker did not confirm the state of {state.conversation_id!r}: "
                    f"{errors[0] if errors else 'timed out'}"
                )
            self._states[state.conversation_id] = state

    def all_states(self) -> Iterator[ConversationState]:
        """Every stored state (a snapshot)."""
        with self._lock:
            states = list(self._states.values())
        return iter(states)

    def close(self) -> None:
        """Flush the producer."""
        self._producer.flush(5.0)

    def __len__(self) -> int:
        return len(self._states)


def step_messages(topics: Topics, result: StepResult) -> list[tuple[str, bytes]]:
    """A step's output messages (topic, value), in this order: the ``ClarificationResponse``
    on ``clarify.questions`` (always), the ``ClarifiedRequest`` on
    ``clarify.clarified-requests`` and the ``Escalation`` on ``clarify.escalations`` (when
    the step produced them)."""
    messages = [(topics.clarify_questions, _json(result.response))]
    if result.clarified_request is not None:
        messages.append((topics.clarify_clarified, _dumps(result.clarified_request)))
    if result.escalation is not None:
        messages.append((topics.clarify_escalations, _dumps(result.escalation)))
    return messages


class KafkaOutputs:
    """The service's ``StepOutputs`` on the output topics (key: the conversation id), with
    an idempotent producer of its own (``acks=all``). ``publish`` is thread-safe: each call
    waits for its own messages' delivery reports, whichever thread serves them."""

    def __init__(self, brokers: Brokers, topics: Topics, timeout: float = 30.0) -> None:
        self.topics = topics
        self.timeout = timeout
        self._producer = make_producer(brokers, **{"linger.ms": 0})

    def publish(self, conversation_id: str, result: StepResult) -> None:
        """See ``StepOutputs``: produce the step's messages (``step_messages``) and wait up to
        ``timeout`` seconds for the broker to confirm every one
        (``streams.producer.produce_and_wait``). Raises ``OutputsUnavailableError``."""
        messages = step_messages(self.topics, result)
        try:
            produce_and_wait(self._producer, messages, conversation_id.encode(), self.timeout,
                             f"of {conversation_id!r}")  # fmt: skip
        except DeliveryError as exc:
            raise OutputsUnavailableError(str(exc)) from exc

    def close(self) -> None:
        """Flush the producer."""
        self._producer.flush(5.0)


def required_topics(topics: Topics) -> list[str]:
    """The topics ``clarify serve --kafka`` needs."""
    return [
        topics.clarify_requests, topics.clarify_questions, topics.clarify_answers,
        topics.clarify_clarified, topics.clarify_outcomes, topics.clarify_escalations,
        topics.clarify_state, topics.dead_letters,
    ]  # fmt: skip


def check_topics(cfg: Settings) -> Topics:
    """The topic names; raises ``TopicError`` when the broker or a topic is missing."""
    topics = Topics.from_prefix(cfg.kafka_topic_prefix)
    require_topics(cfg.kafka(), required_topics(topics))
    return topics


def check_single_instance(
    cfg: Settings, wait: float | None = None, admin: Any = None, poll: float = 1.0
) -> None:
    """Refuse to start a second service on the same state: raise ``InstanceConflictError``
    when the service's consumer group (``clarify_consumer_group``) still has members after
    ``wait`` seconds (default: the session timeout and a margin).

    A member that does not leave within the wait is alive (it heartbeats); a killed instance
    (SIGKILL) is dropped by the broker after its session timeout, so a restart after a crash
    waits for that, then starts. A cleanly stopped instance leaves the group at once.
    Remaining race: two instances started within the same few seconds (before either one's
    consumer has joined the group, i.e. during the state restore) both pass this check
    (docs/clarification.md)."""
    group = cfg.clarify_consumer_group
    admin = admin if admin is not None else admin_client(cfg.kafka())
    wait = wait if wait is not None else SERVICE_SESSION_TIMEOUT_MS / 1000 + MEMBER_WAIT_MARGIN
    deadline = time.monotonic() + wait
    members = group_members(admin, group)
    if members:
        log.warning("clarify: consumer group %s has member(s) %s; waiting up to %.0f s "
                    "for them to leave (a killed instance times out)", group, members,
                    wait)  # fmt: skip
    while members and time.monotonic() < deadline:
        time.sleep(poll)
        members = group_members(admin, group)
    if members:
        raise InstanceConflictError(
            f"another clarification service is consuming with group {group!r} "
            f"(member(s): {', '.join(members)}); only one instance may serve a state topic. "
            "Stop it first (or give this instance its own kafka_topic_prefix and "
            "clarify_consumer_group)"
        )


def _decode(model: type[BaseModel], raw: bytes | None, limit: int) -> Any:
    """``raw`` as ``model``; raises ``Rejected`` with a reason naming fields, never
    their values."""
    if raw is None:
        raise Rejected("tombstone", "the message has no value")
    if len(raw) > limit:
        raise Rejected("oversized", f"the message has {len(raw)} bytes; the limit is {limit}")
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        if any(e["type"] == "json_invalid" for e in errors) or not raw.strip():
            raise Rejected("not_json", "the message is not valid JSON", "decode") from None
        fields = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or model.__name__}: {e['msg']}" for e in errors
        )
        raise Rejected("invalid_request", f"not a {model.__name__}: {fields}"[:2000]) from None


def _check_key(key: bytes | None, conversation_id: str) -> None:
    """Raise ``Rejected`` unless the message key is ``conversation_id`` (UTF-8): the key
    places every message of a conversation on one partition, in order, so a keyless message
    (``missing_key``) or one keyed otherwise (``key_mismatch``) could overtake or be
    overtaken by its conversation's other messages. The reason never shows either value."""
    if key is None:
        raise Rejected("missing_key", "the message has no key; key it with its conversation_id")
    if key != conversation_id.encode():
        raise Rejected("key_mismatch", "the message key is not the body's conversation_id")


class KafkaLoop:
    """Consumes requests, answers and outcomes for ``service``; the service publishes each
    step's results on its ``outputs`` (:class:`KafkaOutputs`, set by ``clarify serve
    --kafka``) before it returns, the loop sends dead letters.

    The loop is ``streams.consumer_loop.ConsumerLoop`` one message at a time, in a thread;
    each message's step runs on the service's event loop (the HTTP app's), so HTTP calls and
    Kafka messages go through the same per-conversation locks. Anything unexpected ends the
    process with status 70, unacked (``exit_on_error``), and so does a commit refused by a
    rebalance (``reassigned_commit_ok`` false).
    """

    def __init__(self, cfg: Settings, service: ClarifyService, topics: Topics) -> None:
        """Raises ``ValueError`` when ``service`` has no ``outputs`` (its steps would reach
        no output topic)."""
        if service.outputs is None:
            raise ValueError("the Kafka loop needs a service with outputs (KafkaOutputs)")
        self.cfg = cfg
        self.service = service
        self.topics = topics
        self.max_bytes = cfg.clarify_max_body_bytes
        # dead letters are redacted like everything the service stores (its redactor)
        self.redactor: Redactor | None = service.redactor
        config = LoopConfig(
            name="clarify", group=cfg.clarify_consumer_group,
            topics=(topics.clarify_requests, topics.clarify_answers, topics.clarify_outcomes),
            dead_letter_topic=topics.dead_letters, batch_size=1, batch_wait=0.5,
            exit_on_error=True, reassigned_commit_ok=False, log_assignments=False,
        )  # fmt: skip
        self.loop = ConsumerLoop(cfg.kafka(), config, self, log)
        self._events: asyncio.AbstractEventLoop | None = None
        self.processed = 0

    async def run(self) -> None:
        """Consume until ``stop``; crashes the process (status 70) on an unexpected error."""
        self._events = asyncio.get_running_loop()
        try:
            await asyncio.to_thread(self.loop.run)
        except asyncio.CancelledError:
            self.loop.stop()
            raise

    def stop(self) -> None:
        """Ask ``run`` to return after the message in hand."""
        self.loop.stop()

    def handle(self, batch: Sequence[Message]) -> Handled:
        """The loop's handler (in its thread): each message's step on the service's event
        loop (:meth:`step`); its dead letter, if any, for the loop to send."""
        assert self._events is not None, "run() sets the event loop"
        letters: list[tuple[DeadLetter, OriginalRecord]] = []
        for done, msg in enumerate(batch):
            future = asyncio.run_coroutine_threadsafe(self.step(msg), self._events)
            try:
                letter = future.result()
            except concurrent.futures.CancelledError:  # the event loop is shutting down
                self.loop.stop()
                return Handled([], letters, done)  # the message in hand is not committed
            if letter is not None:
                letters.append(letter)
        return Handled([], letters, len(batch))

    async def step(self, msg: Message) -> tuple[DeadLetter, OriginalRecord] | None:
        """Process one message: the service stores the step, its trail row (on its ``trail``)
        and confirms its outputs (on its ``outputs``); return the message's dead letter
        (``streams.consumer_loop.dead_letter``) or None. Raises on a state store, trail or
        output failure (the caller must not commit)."""
        topic = msg.topic() or ""
        try:
            if topic == self.topics.clarify_requests:
                request = _decode(ClarificationRequest, msg.value(), self.max_bytes)
                _check_key(msg.key(), request.conversation_id)
                await self._retry(lambda: self.service.open(request))
            elif topic == self.topics.clarify_answers:
                answer = _decode(ClarificationAnswer, msg.value(), self.max_bytes)
                _check_key(msg.key(), answer.conversation_id)
                await self._retry(lambda: self.service.answer(answer.conversation_id, answer))
            elif topic == self.topics.clarify_outcomes:
                outcome = _decode(ReevaluationOutcome, msg.value(), self.max_bytes)
                _check_key(msg.key(), outcome.conversation_id)
                await self._retry(lambda: self.service.outcome(outcome.conversation_id, outcome))
            else:
                raise Rejected("unknown_topic", f"not a clarification topic: {topic}")
            self.processed += 1
            return None
        except Rejected as exc:
            return self._dead_letter(msg, exc)
        except ServiceError as exc:
            if exc.status >= 500:
                raise
            return self._dead_letter(msg, Rejected(exc.code, exc.message))

    async def _retry(self, call: Any) -> Any:
        """``call()`` again once after a ``concurrent_update`` (another writer won)."""
        try:
            return await call()
        except ServiceError as exc:
            if exc.code != "concurrent_update":
                raise
            return await call()

    def _dead_letter(self, msg: Message, rejected: Rejected) -> tuple[DeadLetter, OriginalRecord]:
        return dead_letter(
            msg, rejected, datetime.now(UTC), name="clarify", logger=log,
            redactor=self.redactor, max_raw_bytes=self.cfg.dead_letter_max_raw_bytes,
        )  # fmt: skip


def _json(model: ClarificationResponse) -> bytes:
    return model.model_dump_json().encode()


def _dumps(value: dict[str, Any]) -> bytes:
    return orjson.dumps(value)


__all__ = [
    "EXIT_CRASH",
    "InstanceConflictError",
    "KafkaLoop",
    "KafkaOutputs",
    "KafkaStateStore",
    "StoreUnavailableError",
    "check_single_instance",
    "check_topics",
    "step_messages",
]
