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
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from pydantic import BaseModel, ValidationError

from processors.adapters import SourceRecord
from processors.intake import make_dead_letter
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
from streams.producer import KAFKA_LOGGER, TopicWriter, make_producer
from streams.sink import dead_letter_message, kafka_location, original_record
from streams.topics import TopicError, Topics, admin_client, require_topic

log = logging.getLogger("refusal_audit.clarify")

EXIT_CRASH = 70
RESTORE_TIMEOUT = 120.0
SESSION_TIMEOUT_MS = 10_000
"""The service consumer's ``session.timeout.ms``: how long the broker keeps a member that
stopped heartbeating (a killed instance) in the group. librdkafka's default is 45 s; 10 s
shortens the wait of a restart after a SIGKILL (heartbeats come from librdkafka's own
thread, so a busy event loop does not miss them)."""
MEMBER_WAIT_MARGIN = 5.0
"""Seconds beyond ``SESSION_TIMEOUT_MS`` that ``check_single_instance`` waits for a
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

    def __init__(self, bootstrap_servers: str, topic: str, timeout: float = 30.0) -> None:
        self.topic = topic
        self.timeout = timeout
        self._states: dict[str, ConversationState] = {}
        self._lock = threading.Lock()
        self._producer = make_producer(bootstrap_servers, **{"linger.ms": 0})
        self.restored = self._restore(bootstrap_servers)

    def _restore(self, bootstrap_servers: str) -> int:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": "refusal-audit-clarify-restore",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
            },
            logger=KAFKA_LOGGER,
        )
        try:
            metadata = consumer.list_topics(self.topic, timeout=10)
            found = metadata.topics.get(self.topic)
            if found is None or found.error is not None or not found.partitions:
                raise TopicError(
                    f"topic {self.topic!r} does not exist; create the topics with "
                    "`refusal-audit topics create`"
                )
            pending: dict[int, int] = {}
            assign = []
            for partition in found.partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition), timeout=10
                )
                if high > low:
                    pending[partition] = high
                    assign.append(TopicPartition(self.topic, partition, OFFSET_BEGINNING))
            consumer.assign(assign)
            deadline = time.monotonic() + RESTORE_TIMEOUT
            read = 0
            while pending:
                if time.monotonic() > deadline:
                    raise TopicError(f"could not read {self.topic!r} within {RESTORE_TIMEOUT} s")
                msg = consumer.poll(1.0)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.pop(msg.partition() or 0, None)
                        continue
                    raise TopicError(f"reading {self.topic!r}: {error}")
                read += 1
                self._apply(msg)
                partition, offset = msg.partition() or 0, msg.offset() or 0
                if offset + 1 >= pending.get(partition, 0):
                    pending.pop(partition, None)
            return read
        finally:
            consumer.close()

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

    def __init__(self, bootstrap_servers: str, topics: Topics, timeout: float = 30.0) -> None:
        self.topics = topics
        self.timeout = timeout
        self._producer = make_producer(bootstrap_servers, **{"linger.ms": 0})

    def publish(self, conversation_id: str, result: StepResult) -> None:
        """See ``StepOutputs``: produce the step's messages (``step_messages``) and wait up to
        ``timeout`` seconds for the broker to confirm every one. Raises
        ``OutputsUnavailableError``."""
        key = conversation_id.encode()
        messages = step_messages(self.topics, result)
        reports: list[KafkaError | None] = []

        def report(err: KafkaError | None, _msg: Message) -> None:
            reports.append(err)

        try:
            for topic, value in messages:
                while True:
                    try:
                        self._producer.produce(topic, value=value, key=key, on_delivery=report)
                        break
                    except BufferError:
                        self._producer.poll(0.1)
            deadline = time.monotonic() + self.timeout
            while len(reports) < len(messages):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise OutputsUnavailableError(
                        f"{len(messages) - len(reports)} output(s) of {conversation_id!r} "
                        f"not confirmed within {self.timeout:g} s"
                    )
                if self._producer.flush(min(left, 1.0)) == 0 and len(reports) < len(messages):
                    time.sleep(0.001)  # another thread is serving our delivery reports
        except KafkaException as exc:
            raise OutputsUnavailableError(
                f"producing the outputs of {conversation_id!r}: {exc}"
            ) from exc
        failed = [err for err in reports if err is not None]
        if failed:
            raise OutputsUnavailableError(
                f"the broker refused {len(failed)} output(s) of {conversation_id!r}: {failed[0]}"
            )

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
    admin = admin_client(cfg.kafka_bootstrap_servers)
    for name in required_topics(topics):
        require_topic(admin, name)
    return topics


_COORDINATOR_NOT_READY = frozenset({
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
})  # fmt: skip


def group_members(admin: Any, group: str, timeout: float = 30.0) -> list[str]:
    """The members of consumer group ``group`` (``client_id@host``; empty when the group is
    empty or unknown). A coordinator that is not ready yet (a fresh broker, a moved
    coordinator) is asked again for up to ``timeout`` seconds. Raises ``TopicError`` when
    the broker cannot describe the group."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            future = admin.describe_consumer_groups([group], request_timeout=10.0)[group]
            description = future.result(timeout=15.0)
            return [f"{m.client_id}@{m.host}" for m in description.members or []]
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            code = error.code() if isinstance(error, KafkaError) else None
            if code not in _COORDINATOR_NOT_READY or time.monotonic() > deadline:
                raise TopicError(f"cannot describe consumer group {group!r}: {exc}") from exc
        except Exception as exc:  # TimeoutError
            raise TopicError(f"cannot describe consumer group {group!r}: {exc}") from exc
        time.sleep(0.5)


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
    admin = admin if admin is not None else admin_client(cfg.kafka_bootstrap_servers)
    wait = wait if wait is not None else SESSION_TIMEOUT_MS / 1000 + MEMBER_WAIT_MARGIN
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


class _DeadLetter(Exception):
    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _decode(model: type[BaseModel], raw: bytes | None, limit: int) -> Any:
    """``raw`` as ``model``; raises ``_DeadLetter`` with a reason naming fields, never
    their values."""
    if raw is None:
        raise _DeadLetter("tombstone", "the message has no value")
    if len(raw) > limit:
        raise _DeadLetter("oversized", f"the message has {len(raw)} bytes; the limit is {limit}")
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        if any(e["type"] == "json_invalid" for e in errors) or not raw.strip():
            raise _DeadLetter("not_json", "the message is not valid JSON") from None
        fields = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or model.__name__}: {e['msg']}" for e in errors
        )
        raise _DeadLetter("invalid_request", f"not a {model.__name__}: {fields}"[:2000]) from None


def _check_key(key: bytes | None, conversation_id: str) -> None:
    """Raise ``_DeadLetter`` unless the message key is ``conversation_id`` (UTF-8): the key
    places every message of a conversation on one partition, in order, so a keyless message
    (``missing_key``) or one keyed otherwise (``key_mismatch``) could overtake or be
    overtaken by its conversation's other messages. The reason never shows either value."""
    if key is None:
        raise _DeadLetter("missing_key", "the message has no key; key it with its conversation_id")
    if key != conversation_id.encode():
        raise _DeadLetter("key_mismatch", "the message key is not the body's conversation_id")


class KafkaLoop:
    """Consumes requests, answers and outcomes for ``service``; the service publishes each
    step's results on its ``outputs`` (:class:`KafkaOutputs`, set by ``clarify serve
    --kafka``) before it returns, the loop sends dead letters.

    ``run`` is a coroutine for the service's event loop (the HTTP app's), so HTTP calls and
    Kafka messages go through the same per-conversation locks. Polling, confirming and
    committing run in threads. Anything unexpected ends the process with status 70, unacked.
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
        self.writer = TopicWriter(make_producer(cfg.kafka_bootstrap_servers))
        self.consumer = Consumer(
            {
                "bootstrap.servers": cfg.kafka_bootstrap_servers,
                "group.id": cfg.clarify_consumer_group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "session.timeout.ms": SESSION_TIMEOUT_MS,
            },
            logger=KAFKA_LOGGER,
        )
        self.stopping = threading.Event()
        self.processed = 0
        self.dead_letters = 0

    async def run(self) -> None:
        """Consume until ``stop``; crashes the process (status 70) on an unexpected error."""
        self.consumer.subscribe(
            [self.topics.clarify_requests, self.topics.clarify_answers,
             self.topics.clarify_outcomes]
        )  # fmt: skip
        log.info("clarify: consuming %s, %s, %s (group %s)", self.topics.clarify_requests,
                 self.topics.clarify_answers, self.topics.clarify_outcomes,
                 self.cfg.clarify_consumer_group)  # fmt: skip
        try:
            while not self.stopping.is_set():
                msg = await asyncio.to_thread(self.consumer.poll, 0.5)
                if msg is None:
                    continue
                if msg.error() is not None:
                    log.warning("clarify: consumer error: %s", msg.error())
                    continue
                try:
                    await self.handle(msg)
                    await asyncio.to_thread(self.writer.confirm)
                    await asyncio.to_thread(self.consumer.commit, message=msg, asynchronous=False)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the message stays uncommitted
                    crash(msg, exc)
        finally:
            await asyncio.to_thread(self.consumer.close)

    def stop(self) -> None:
        """Ask ``run`` to return after the message in hand."""
        self.stopping.set()

    async def handle(self, msg: Message) -> None:
        """Process one message: the service stores the step, its trail row (on its ``trail``)
        and confirms its outputs (on its ``outputs``), or a dead letter is queued on
        ``writer``. Raises on a state store, trail or output failure (the caller must not
        commit)."""
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
                raise _DeadLetter("unknown_topic", f"not a clarification topic: {topic}")
            self.processed += 1
        except _DeadLetter as exc:
            self._dead_letter(msg, "validate" if exc.code != "not_json" else "decode",
                              exc.code, exc.reason)  # fmt: skip
        except ServiceError as exc:
            if exc.status >= 500:
                raise
            self._dead_letter(msg, "validate", exc.code, exc.message)

    async def _retry(self, call: Any) -> Any:
        """``call()`` again once after a ``concurrent_update`` (another writer won)."""
        try:
            return await call()
        except ServiceError as exc:
            if exc.code != "concurrent_update":
                raise
            return await call()

    def _dead_letter(self, msg: Message, stage: Any, code: str, reason: str) -> None:
        partition, offset = msg.partition() or 0, msg.offset() or 0
        record = SourceRecord(
            msg.topic() or "", kafka_location(partition, offset), msg.value() or b"",
            tombstone=msg.value() is None,
        )  # fmt: skip
        letter = make_dead_letter(
            record, stage, code, reason, datetime.now(UTC), redactor=self.redactor,
            max_raw_bytes=self.cfg.dead_letter_max_raw_bytes,
        )  # fmt: skip
        original = original_record(msg.key(), msg.headers(), msg.value())
        value, key, out_headers = dead_letter_message(letter, original)
        self.writer.send(self.topics.dead_letters, value, key, out_headers)
        self.dead_letters += 1
        log.warning("clarify: dead letter %s from %s %s: %s", code, record.source,
                    record.location, reason)  # fmt: skip


def _json(model: ClarificationResponse) -> bytes:
    return model.model_dump_json().encode()


def _dumps(value: dict[str, Any]) -> bytes:
    return orjson.dumps(value)


def crash(msg: Message, exc: BaseException) -> None:
    """Log and exit at once (status 70) without committing ``msg``. Does not return."""
    log.critical(
        "clarify: stopping without committing %s partition %s offset %s: %s: %s",
        msg.topic(), msg.partition(), msg.offset(), type(exc).__name__, exc, exc_info=exc,
    )  # fmt: skip
    logging.shutdown()
    sys.stderr.flush()
    os._exit(EXIT_CRASH)


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
