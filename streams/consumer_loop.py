"""The service consumers' loop (issue 26): clarification
(``refusal_audit.clarification.kafka.KafkaLoop``), calibration and A/B
(``refusal_audit.calibration.consumers.CalibrateConsumer`` and ``ABConsumer``), on the one
consumer core (``streams.group_consumer.GroupConsumer``) with its commit strategy: the
offsets committed synchronously after the handler and the broker's confirmation.

:class:`ConsumerLoop` joins a consumer group (a consumer of ``streams.clients``: no automatic
commit, ``read_committed``, the short service session), then until :meth:`ConsumerLoop.stop`
(SIGTERM/SIGINT through ``streams.group_consumer.stop_on_signals``, or the caller's own
shutdown), an idle timeout or a message limit:

1. polls a batch of at most ``batch_size`` messages (what arrived within ``batch_wait``
   seconds; a batch of one is message-at-a-time); a poll error is logged and passed over;
2. hands it to the caller's :class:`Handler`, which decodes each message (or rejects it:
   :class:`Rejected`, a reason code, turned into a dead letter by :func:`dead_letter`),
   stores or produces its results, and returns :class:`Handled`: the outputs to publish,
   the dead letters and how many messages (a prefix of the batch) it handled (unless the
   loop is stopping, the rest of the batch is handed over again: :meth:`ConsumerLoop.rewind`);
3. sends the outputs and then the dead letters (``streams.dead_letters.dead_letter_message``:
   the original key and headers kept) on one idempotent producer and waits for the broker to
   confirm every one;
4. only then commits the offsets after the handled messages (synchronously).

Delivery is at least once: a failure in 2-4 commits nothing of the batch, which is
redelivered after a restart. What the failure does is the caller's
(:attr:`LoopConfig.exit_on_error`): calibration and A/B get :class:`ConsumeError` out of
:meth:`ConsumerLoop.run` (their command exits :data:`EXIT_CRASH`); the clarification service,
whose HTTP side shares the process, exits at once with :data:`EXIT_CRASH` (:func:`crash`).
A commit refused because the partitions were reassigned is logged and passed over for
calibration and A/B (their writes are idempotent: the new owner redelivers), a failure for
clarification (:attr:`LoopConfig.reassigned_commit_ok`), as each did before the loops were
one.

The transactional worker (``streams.transactional``: consume-transform-produce, offsets
committed inside the output transaction) and the warehouse sink (``streams.blocks``: large
blocks over four topics, offsets committed after the block's deduplicated insert) are the
core's two other readers; they differ from this loop in their commits only
(docs/architecture.md, "The Kafka side").
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from processors.adapters import SourceRecord
from processors.intake import make_dead_letter
from processors.redaction import Redactor
from schemas.deadletter import DeadLetter, DeadLetterStage
from streams import clients
from streams.clients import SERVICE_CONSUMER, Brokers
from streams.dead_letters import (
    OriginalRecord,
    dead_letter_message,
    kafka_location,
    original_record,
)
from streams.group_consumer import BatchBounds, GroupConsumer, as_partitions, next_offsets
from streams.producer import DeliveryError, TopicWriter, make_producer
from streams.topics import admin_client, require_topic

EXIT_CRASH = 70
"""Exit status of a service consumer that stopped without committing the batch in hand."""

_REBALANCED = frozenset({
    KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.REBALANCE_IN_PROGRESS, KafkaError._ASSIGNMENT_LOST,
})  # fmt: skip
"""Commit errors after which the partitions belong to another member: the messages are
redelivered there, which the idempotent writes make harmless."""


class ConsumeError(RuntimeError):
    """A batch could not be stored (after the retries), its outputs or dead letters were not
    confirmed by the broker, or its offsets could not be committed: nothing of it was
    committed, so it is redelivered after a restart."""


class Rejected(Exception):
    """A message that is dead-lettered: its reason ``code``, the human-readable ``reason``
    (never the message's values) and the ``stage``."""

    def __init__(self, code: str, reason: str, stage: DeadLetterStage = "validate") -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.stage: DeadLetterStage = stage


@dataclass
class Handled:
    """A batch's result: the ``outputs`` to publish (topic, key, value), the dead letters
    with their originals, and how many messages of the batch (a prefix) were handled."""

    outputs: list[tuple[str, bytes, bytes]]
    letters: list[tuple[DeadLetter, OriginalRecord]]
    done: int


@dataclass
class LoopStats:
    """What a loop did: ``messages`` consumed and committed, ``dead_letters`` confirmed (by
    reason ``codes``), ``batches`` committed; ``stored`` (results written) and
    ``republished`` (results already stored, published again) are counted by the handler."""

    messages: int = 0
    stored: int = 0
    republished: int = 0
    dead_letters: int = 0
    batches: int = 0
    codes: dict[str, int] = field(default_factory=dict)


class Handler(Protocol):
    """What a caller gives the loop."""

    def handle(self, batch: Sequence[Message]) -> Handled:
        """Process ``batch`` (store or produce its results; the dead letters are the loop's
        to send); raise to commit nothing of it."""
        ...


@dataclass(frozen=True)
class LoopConfig:
    """One loop: ``name`` (the prefix of its log lines), consumer ``group``, the ``topics``
    it subscribes to, where dead letters go (``dead_letter_topic``), the batch bounds
    (``batch_size`` messages, ``batch_wait`` seconds), when to stop by itself
    (``idle_timeout`` seconds without a message once assigned, ``max_messages``; None:
    never), ``confirm_timeout`` (seconds the broker gets to confirm a batch's outputs),
    librdkafka ``consumer_overrides`` (e.g. a long ``max.poll.interval.ms``), and the two
    rules the callers differ in: ``exit_on_error`` (end the process with
    :data:`EXIT_CRASH` instead of raising; clarification) and ``reassigned_commit_ok`` (log
    and pass over a commit refused by a rebalance; calibration and A/B). ``log_assignments``
    logs each partition assignment."""

    name: str
    group: str
    topics: tuple[str, ...]
    dead_letter_topic: str
    batch_size: int = 1
    batch_wait: float = 0.5
    idle_timeout: float | None = None
    max_messages: int | None = None
    confirm_timeout: float = 150.0
    consumer_overrides: Mapping[str, Any] = field(default_factory=dict)
    exit_on_error: bool = False
    reassigned_commit_ok: bool = True
    log_assignments: bool = True


class ConsumerLoop:
    """The loop (module docstring) of ``config`` over ``handler``, logging on ``logger``.
    ``run`` blocks until :meth:`stop`, the idle timeout or the message limit, then leaves
    the group; it raises :class:`ConsumeError` (unless ``exit_on_error``). Raises
    ``KafkaException`` from the constructor on a setting librdkafka refuses."""

    def __init__(
        self, brokers: Brokers, config: LoopConfig, handler: Handler, logger: logging.Logger
    ) -> None:
        self.config = config
        self.handler = handler
        self.log = logger
        self.writer = TopicWriter(make_producer(brokers))
        self.group = GroupConsumer(
            clients.consumer_config(
                brokers, config.group, **{**SERVICE_CONSUMER, **config.consumer_overrides}
            ),
            config.topics,
            logger,
            on_assign=self._on_assign,
            subscribe=False,
        )
        self.stopping = threading.Event()
        self.assigned = threading.Event()
        self.stats = LoopStats()

    def stop(self) -> None:
        """Ask ``run`` to return after the message in hand (thread- and signal-safe)."""
        self.stopping.set()

    def _on_assign(self, partitions: list[TopicPartition]) -> None:
        if self.config.log_assignments:
            self.log.info("%s: assigned %s", self.config.name, [p.partition for p in partitions])
        self.assigned.set()

    def run(self) -> LoopStats:
        """Consume until stopped (module docstring); return what was done. Raises
        :class:`ConsumeError` (the batch in hand is not committed)."""
        config = self.config
        self.group.subscribe()
        group = f" (group {config.group})" if config.group != config.name else ""
        self.log.info("%s: consuming %s%s", config.name, ", ".join(config.topics), group)
        idle_since: float | None = None
        try:
            while not self.stopping.is_set():
                want = config.batch_size
                if config.max_messages is not None:
                    want = min(want, config.max_messages - self.stats.messages)
                    if want <= 0:
                        break
                bounds = BatchBounds(max_messages=want, max_wait=config.batch_wait)
                batch = self.group.poll_batch(bounds, on_error=self._poll_error).messages
                if batch:
                    self._process_or_crash(batch)
                    idle_since = None
                    continue
                if config.idle_timeout is None or not self.assigned.is_set():
                    continue
                now = time.monotonic()
                idle_since = now if idle_since is None else idle_since
                if now - idle_since >= config.idle_timeout:
                    self.log.info("%s: idle for %.1f s, stopping", config.name, now - idle_since)
                    break
        finally:
            self.close()
        return self.stats

    def _poll_error(self, error: KafkaError) -> None:
        self.log.warning("%s: consumer error: %s", self.config.name, error)

    def _process_or_crash(self, batch: Sequence[Message]) -> None:
        if not self.config.exit_on_error:
            self.process(batch)
            return
        try:
            self.process(batch)
        except Exception as exc:  # the batch stays uncommitted
            cause = exc.__cause__ if isinstance(exc, ConsumeError) else None
            crash(self.config.name, batch[0], cause if isinstance(cause, Exception) else exc,
                  self.log)  # fmt: skip

    def process(self, batch: Sequence[Message]) -> None:
        """Handle ``batch``, publish and confirm its outputs and dead letters, then commit the
        handled messages' offsets (and, unless stopping, seek back to the unhandled rest).
        Raises :class:`ConsumeError` (and whatever the handler raises)."""
        handled = self.handler.handle(batch)
        for topic, key, value in handled.outputs:
            self.writer.send(topic, value, key)
        for letter, original in handled.letters:
            copy, copy_key, headers = dead_letter_message(letter, original)
            self.writer.send(self.config.dead_letter_topic, copy, copy_key, headers)
        try:
            self.writer.confirm(self.config.confirm_timeout)
        except DeliveryError as exc:
            raise ConsumeError(f"the broker did not confirm the batch's outputs: {exc}") from exc
        for letter, _ in handled.letters:
            self.stats.dead_letters += 1
            self.stats.codes[letter.reason_code] = self.stats.codes.get(letter.reason_code, 0) + 1
        self.commit(batch[: handled.done])
        self.stats.messages += handled.done
        self.stats.batches += 1
        if handled.done < len(batch) and not self.stopping.is_set():
            self.rewind(batch[handled.done :])

    def rewind(self, messages: Sequence[Message]) -> None:
        """Seek each partition of ``messages`` back to its first one, so the loop's next
        polls hand them over again (the consumer's position is past them; a later commit
        would skip them). Raises :class:`ConsumeError` when a seek fails."""
        try:
            self.group.rewind_to(messages)
        except KafkaException as exc:
            raise ConsumeError(f"seeking back to the unhandled messages failed: {exc}") from exc

    def commit(self, messages: Sequence[Message]) -> None:
        """Commit the offsets after ``messages`` (synchronously). A commit refused because
        the partitions were reassigned is logged when ``reassigned_commit_ok`` (the messages
        are redelivered to their new owner); any other failure raises
        :class:`ConsumeError`."""
        offsets = as_partitions(next_offsets(messages))
        if not offsets:
            return
        try:
            result = self.group.commit(offsets)
        except KafkaException as exc:
            error = clients.error_of(exc)
            if (
                self.config.reassigned_commit_ok
                and error is not None
                and (error.code() in _REBALANCED)
            ):
                self.log.warning("%s: offsets not committed, the partitions were reassigned "
                                 "(%s); the messages are redelivered", self.config.name,
                                 error)  # fmt: skip
                return
            raise ConsumeError(f"committing offsets failed: {exc}") from exc
        failed = [tp for tp in result if tp.error is not None]
        if failed:
            raise ConsumeError(f"committing offsets failed: {failed[0].error}")

    def close(self) -> None:
        """Leave the group and flush the producer (nothing more is committed). Never
        raises."""
        try:
            self.group.close()
        except Exception as exc:  # closing must not hide why the loop ended
            self.log.warning("%s: closing the consumer failed: %s", self.config.name, exc)
        self.writer.producer.flush(5.0)


def dead_letter(
    msg: Message,
    rejected: Rejected,
    now: datetime,
    *,
    name: str,
    logger: logging.Logger,
    redactor: Redactor | None,
    max_raw_bytes: int,
    log_id: str | None = None,
) -> tuple[DeadLetter, OriginalRecord]:
    """The dead letter of ``msg`` (value and reason redacted by ``redactor``, at most
    ``max_raw_bytes`` of the value kept) and its original key, headers and tombstone flag;
    logged on ``logger`` as ``<name>: dead letter <code> from <topic> <location>: <reason>``."""
    value = msg.value()
    record = SourceRecord(
        msg.topic() or "", kafka_location(msg.partition() or 0, msg.offset() or 0),
        value or b"", tombstone=value is None,
    )  # fmt: skip
    letter = make_dead_letter(
        record, rejected.stage, rejected.code, rejected.reason, now, log_id=log_id,
        redactor=redactor, max_raw_bytes=max_raw_bytes,
    )  # fmt: skip
    logger.warning("%s: dead letter %s from %s %s: %s", name, rejected.code,
                   record.source, record.location, letter.reason)  # fmt: skip
    return letter, original_record(msg.key(), msg.headers(), value)


def require_topics(brokers: Brokers, names: Iterable[str]) -> None:
    """The topic check at a loop's start: raise ``streams.topics.TopicError`` when the
    broker cannot be reached or a topic of ``names`` is missing."""
    admin = admin_client(brokers)
    for name in names:
        require_topic(admin, name)


def crash(name: str, msg: Message, exc: BaseException, logger: logging.Logger) -> None:
    """Log and exit at once (status :data:`EXIT_CRASH`) without committing ``msg``. Does not
    return."""
    logger.critical(
        "%s: stopping without committing %s partition %s offset %s: %s: %s",
        name, msg.topic(), msg.partition(), msg.offset(), type(exc).__name__, exc, exc_info=exc,
    )  # fmt: skip
    logging.shutdown()
    sys.stderr.flush()
    os._exit(EXIT_CRASH)


__all__ = [
    "EXIT_CRASH",
    "ConsumeError",
    "ConsumerLoop",
    "Handled",
    "Handler",
    "LoopConfig",
    "LoopStats",
    "Rejected",
    "crash",
    "dead_letter",
    "require_topics",
]
