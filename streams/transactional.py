"""Consume-transform-produce in Kafka transactions, with confluent-kafka (issue 14).

A :class:`TransactionalStream` reads windows of records from its input topics in a consumer
group (``isolation.level=read_committed``, no auto-commit) and commits each window with
:meth:`TransactionalStream.commit`: one Kafka transaction holds every output message of the
window **and** the window's input offsets (``send_offsets_to_transaction`` with the
consumer's group metadata, KIP-447). A reader with ``read_committed`` therefore sees each
window's outputs exactly once: a crash before the commit aborts the transaction (the broker
aborts it when the producer's transactional id is reused at start-up, or when it times out),
its outputs stay invisible and the window is consumed again from the committed offsets.

Why confluent-kafka and not faust's ``processing_guarantee="exactly_once"``: faust-streaming
issue #323 (open since 2022: "Crash and duplicated events on rebalance with
processing_guarantee=exactly_once") and #502 (messages processed twice after a rebalance)
report exactly the two failures this design must exclude; librdkafka's transactional
producer implements KIP-98/KIP-447 and fences zombies by transactional id and by consumer
group generation.

Rebalances: every window remembers the assignment generation it was read in; a window whose
partitions were revoked before its commit is refused with :class:`WindowAborted` (the new
owner consumes it again), and the broker itself refuses offsets sent with a stale group
generation. Any abortable transaction error aborts the transaction, rewinds the consumer to
its committed offsets and raises :class:`WindowAborted`; a fatal error (the producer was
fenced by a newer instance with the same transactional id) raises :class:`TransactionFatal`:
the process must exit.

Pure Kafka: no audit logic here. The caller (``refusal_audit.worker``) turns a window into
output messages.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from streams.producer import KAFKA_LOGGER, Headers

log = logging.getLogger("refusal_audit.transactional")

#: Seconds a watched transaction call may overrun its own timeout before ``on_stuck`` runs.
STUCK_GRACE_SECONDS = 15.0


class WindowAborted(RuntimeError):
    """The window's transaction was aborted (or never begun, its partitions were revoked):
    nothing of it is visible to ``read_committed`` readers and its records will be consumed
    again (by this process or the partitions' new owner)."""


class TransactionFatal(RuntimeError):
    """The producer cannot go on (fenced by another instance with the same transactional id,
    or a fatal librdkafka error): the process must exit."""


@dataclass(frozen=True)
class OutputMessage:
    """One message to produce in a window's transaction."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    headers: Headers | None = None


@dataclass
class Window:
    """Records read together: ``records`` in consumption order, ``offsets`` the next offset
    to commit per (topic, partition), ``generation`` the assignment generation they were
    read in, ``read_at`` the monotonic time the window closed."""

    records: list[Message]
    offsets: dict[tuple[str, int], int]
    generation: int
    read_at: float = field(default_factory=time.monotonic)

    def __len__(self) -> int:
        return len(self.records)

    def commit_offsets(self) -> list[TopicPartition]:
        """The offsets to commit with this window, as ``TopicPartition`` s."""
        return [TopicPartition(t, p, o) for (t, p), o in sorted(self.offsets.items())]


@dataclass(frozen=True)
class StreamConfig:
    """What a :class:`TransactionalStream` needs: brokers, consumer group, input topics, the
    producer's ``transactional_id`` (stable per worker instance, distinct across instances:
    a restarted instance fences its predecessor), window bounds (``take_max`` records or
    ``take_within`` seconds), the transaction timeout (ms) and librdkafka overrides."""

    bootstrap_servers: str
    group_id: str
    topics: Sequence[str]
    transactional_id: str
    take_max: int = 500
    take_within: float = 1.0
    transaction_timeout_ms: int = 60_000
    group_instance_id: str | None = None
    consumer_extra: dict[str, Any] = field(default_factory=dict)
    producer_extra: dict[str, Any] = field(default_factory=dict)


class CallWatchdog:
    """Calls ``on_stuck(what, seconds)`` from a daemon thread when a call guarded by
    :meth:`guard` runs longer than its allowance: librdkafka's
    ``send_offsets_to_transaction`` does not honour its timeout while the group coordinator
    moves (a broker restart; librdkafka issue #5456), and the thread inside it cannot be
    interrupted from Python. ``on_stuck`` runs at most once per guarded call; the worker's
    ends the process (exit 70), so a supervisor restarts it and the new instance fences the
    stuck transaction."""

    def __init__(self, on_stuck: Callable[[str, float], None]) -> None:
        self.on_stuck = on_stuck
        self._cond = threading.Condition()
        self._armed: tuple[str, float, float] | None = None  # what, allowance, deadline
        self._thread = threading.Thread(target=self._watch, name="tx-watchdog", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def guard(self, what: str, seconds: float) -> Iterator[None]:
        """Watch the ``with`` block: ``on_stuck`` runs if it lasts over ``seconds``."""
        with self._cond:
            self._armed = (what, seconds, time.monotonic() + seconds)
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._armed = None
                self._cond.notify()

    def _watch(self) -> None:
        while True:
            with self._cond:
                while self._armed is None:
                    self._cond.wait()
                what, seconds, deadline = self._armed
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                self._armed = None  # once per guarded call
            self.on_stuck(what, seconds)


def _log_stuck(what: str, seconds: float) -> None:
    log.critical("%s has not returned after %.0f s (librdkafka #5456)", what, seconds)


def _is(exc: KafkaException, check: str) -> bool:
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and bool(getattr(err, check)())


class TransactionalStream:
    """Windows in, one transaction per window out (module docstring).

    Not thread-safe: call :meth:`next_window`, :meth:`commit` and :meth:`close` from one
    thread (audit work may run elsewhere meanwhile). Raises ``KafkaException`` from the
    constructor when the producer cannot initialise its transactions.
    """

    def __init__(
        self,
        cfg: StreamConfig,
        on_assignment: Callable[[int], None] | None = None,
        on_stuck: Callable[[str, float], None] = _log_stuck,
    ):
        self.cfg = cfg
        self.watchdog = CallWatchdog(on_stuck)
        self.generation = 0
        self.assigned: set[tuple[str, int]] = set()
        self._committed: dict[tuple[str, int], int] = {}  # next offsets this stream committed
        self._on_assignment = on_assignment
        self._lock = threading.Lock()
        consumer_conf: dict[str, Any] = {
            "bootstrap.servers": cfg.bootstrap_servers,
            "group.id": cfg.group_id,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "range",
            "session.timeout.ms": 30_000,
            "max.poll.interval.ms": 600_000,
            "logger": KAFKA_LOGGER,
        }
        if cfg.group_instance_id:
            consumer_conf["group.instance.id"] = cfg.group_instance_id
        consumer_conf.update(cfg.consumer_extra)
        producer_conf: dict[str, Any] = {
            "bootstrap.servers": cfg.bootstrap_servers,
            "transactional.id": cfg.transactional_id,
            "transaction.timeout.ms": cfg.transaction_timeout_ms,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
            "logger": KAFKA_LOGGER,
        }
        producer_conf.update(cfg.producer_extra)
        self.producer = Producer(producer_conf)
        # aborts whatever a predecessor with this transactional id left open (fencing it)
        self.producer.init_transactions(cfg.transaction_timeout_ms / 1000)
        self.consumer = Consumer(consumer_conf)
        self.consumer.subscribe(
            list(cfg.topics), on_assign=self._assigned, on_revoke=self._revoked,
            on_lost=self._revoked,
        )  # fmt: skip

    # -- rebalance callbacks (run inside consume) ---------------------------------------------
    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self._lock:
            self.generation += 1
            self.assigned = {(p.topic, p.partition) for p in partitions}
        log.info("assigned %d partitions (generation %d)", len(partitions), self.generation)
        if self._on_assignment is not None:
            self._on_assignment(len(partitions))

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self._lock:
            self.generation += 1
            self.assigned -= {(p.topic, p.partition) for p in partitions}
            for p in partitions:  # another member may commit there now
                self._committed.pop((p.topic, p.partition), None)
        log.info("revoked %d partitions (generation %d)", len(partitions), self.generation)

    # -- windows -------------------------------------------------------------------------------
    def next_window(
        self, stop: threading.Event | None = None, until: Callable[[], bool] | None = None
    ) -> Window | None:
        """Read up to ``take_max`` records, waiting at most ``take_within`` seconds after the
        first one (and returning None when none came within ``take_within``, or ``stop`` is
        set). ``until()`` true ends the window early with what it holds (checked between
        polls, every 0.25 s at most: a pipelined caller whose previous window is ready to
        commit). Raises ``KafkaException`` for a consumer error other than a partition EOF."""
        records: list[Message] = []
        deadline = time.monotonic() + self.cfg.take_within
        generation = self.generation
        while len(records) < self.cfg.take_max:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (stop is not None and stop.is_set()):
                break
            if until is not None and until():
                break
            batch = self.consumer.consume(
                num_messages=self.cfg.take_max - len(records), timeout=min(remaining, 0.25)
            )
            if self.generation != generation:  # a rebalance inside consume: start over
                records, generation = [], self.generation
            for msg in batch:
                err = msg.error()
                if err is None:
                    records.append(msg)
                elif err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(err)
        if not records:
            return None
        offsets: dict[tuple[str, int], int] = {}
        for msg in records:
            key = (msg.topic() or "", msg.partition() or 0)
            offsets[key] = max(offsets.get(key, 0), (msg.offset() or 0) + 1)
        return Window(records, offsets, generation)

    def lag(self, timeout: float = 2.0) -> dict[tuple[str, int], int]:
        """Per assigned (topic, partition): the high watermark minus the offset this stream
        last committed there (else the consumer's position, else the low watermark): the
        records not yet committed (0 or more). No committed-offset request (that one waits for
        open transactions to settle); partitions whose watermarks cannot be read within
        ``timeout`` seconds are left out."""
        out: dict[tuple[str, int], int] = {}
        for topic, partition in sorted(self.assigned):
            tp = TopicPartition(topic, partition)
            try:
                low, high = self.consumer.get_watermark_offsets(tp, timeout=timeout)
                at = self._committed.get((topic, partition))
                if at is None:
                    (pos,) = self.consumer.position([tp])
                    at = pos.offset if pos.offset >= 0 else low
            except KafkaException as exc:
                log.info("consumer lag of %s[%d] not read: %s", topic, partition, exc)
                continue
            out[(topic, partition)] = max(0, high - at)
        return out

    def still_owned(self, window: Window) -> bool:
        """True when every partition of ``window`` is still assigned to this consumer and no
        rebalance happened since it was read."""
        return window.generation == self.generation and set(window.offsets) <= self.assigned

    def commit(
        self,
        window: Window,
        outputs: Iterable[OutputMessage],
        before_commit: Callable[[Window], None] | None = None,
        timeout: float = 30.0,
    ) -> int:
        """Produce ``outputs`` and commit ``window``'s offsets in one transaction; returns how
        many messages were produced. ``before_commit`` runs inside the transaction just
        before it is committed (fault injection in tests; an exception aborts it).

        Raises :class:`WindowAborted` (nothing visible, the window will be consumed again;
        the consumer is rewound to its committed offsets) or :class:`TransactionFatal`. The
        offsets and commit calls are watched (:class:`CallWatchdog`): one that has not
        returned ``STUCK_GRACE_SECONDS`` after its ``timeout`` calls the stream's
        ``on_stuck``.
        """
        if not self.still_owned(window):
            self._rewind()
            raise WindowAborted("a rebalance revoked the window's partitions before its commit")
        produced = 0
        try:
            self.producer.begin_transaction()
            for out in outputs:
                self._produce(out)
                produced += 1
            allowance = timeout + STUCK_GRACE_SECONDS
            with self.watchdog.guard("send_offsets_to_transaction", allowance):
                self.producer.send_offsets_to_transaction(
                    window.commit_offsets(), self.consumer.consumer_group_metadata(), timeout
                )
            if before_commit is not None:
                before_commit(window)
            with self.watchdog.guard("commit_transaction", allowance):
                self.producer.commit_transaction(timeout)
            self._committed.update(window.offsets)
        except KafkaException as exc:
            if _is(exc, "fatal"):
                raise TransactionFatal(f"transactional producer failed: {exc}") from exc
            self._abort(f"transaction failed: {exc}")
            raise WindowAborted(f"transaction aborted: {exc}") from exc
        except BaseException as exc:
            self._abort(f"window failed before its commit: {exc!r}")
            raise WindowAborted(f"transaction aborted: {exc!r}") from exc
        return produced

    def _produce(self, out: OutputMessage) -> None:
        while True:
            try:
                self.producer.produce(out.topic, value=out.value, key=out.key, headers=out.headers)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.producer.poll(0)  # serve delivery reports: abort and commit need an empty queue

    def _abort(self, why: str) -> None:
        """Abort the open transaction (retrying while librdkafka still drains its queue) and
        rewind. Raises :class:`TransactionFatal` when it cannot be aborted in time."""
        log.warning("aborting the window's transaction: %s", why)
        limit = self.cfg.transaction_timeout_ms / 1000
        with self.watchdog.guard("abort_transaction", limit + 10.0 + STUCK_GRACE_SECONDS):
            self._abort_within(time.monotonic() + limit)
        self._rewind()

    def _abort_within(self, deadline: float) -> None:
        # let what is in flight be delivered (into the transaction being aborted): a purge of
        # in-flight messages leaves sequence gaps that fail the next transaction once more
        self.producer.flush(10.0)
        while True:
            self.producer.poll(0.1)  # delivery reports of the purged messages
            try:
                self.producer.abort_transaction(5.0)
                break
            except KafkaException as exc:
                if _is(exc, "fatal") or time.monotonic() > deadline:
                    raise TransactionFatal(f"could not abort: {exc}") from exc
                log.info("abort_transaction not done yet: %s", exc)

    def _rewind(self) -> None:
        """Seek every assigned partition back to its committed offset (the start of the
        aborted window), so its records are consumed again."""
        assigned = [TopicPartition(t, p) for t, p in sorted(self.assigned)]
        if not assigned:
            return
        try:
            for tp in self.consumer.committed(assigned, timeout=30):
                offset = tp.offset
                if offset < 0:  # nothing committed yet: from the start of the partition
                    offset, _ = self.consumer.get_watermark_offsets(tp, timeout=30)
                self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        except KafkaException as exc:
            # going on from the current position would skip the aborted window's records
            raise TransactionFatal(f"could not rewind to the committed offsets: {exc}") from exc

    def close(self) -> None:
        """Leave the group and release the producer (an open transaction is aborted by the
        broker after its timeout, or at once when the same transactional id starts again)."""
        try:
            self.consumer.close()
        finally:
            try:
                self.producer.flush(5)
            except KafkaException as exc:  # fenced or fatal: nothing left to deliver
                log.info("producer not flushed on close: %s", exc)
