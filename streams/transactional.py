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
its committed offsets and raises :class:`WindowAborted`. A broker restart is recovered from
in the process (:meth:`TransactionalStream.recover`, ``streams.txn_producer``): a transaction
call that hangs or fails otherwise renews the producer with the same transactional id and
rewinds; a consumer that failed fatally is renewed. Fenced by a newer live instance with the
same transactional id, or recovery failing for ``recovery_seconds``, raises
:class:`TransactionFatal`: the process must exit.

Pure Kafka: no audit logic here. The caller (``refusal_audit.streaming``) turns a window into
output messages.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

from streams.clients import (
    STREAM_READER,
    STREAM_SESSION_TIMEOUT_MS,
    Brokers,
    build_consumer,
    consumer_config,
    transactional_producer_config,
)
from streams.producer import Headers
from streams.txn_producer import ProducerStuck, TxnProducer

log = logging.getLogger("refusal_audit.transactional")


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
    ``take_within`` seconds), the transaction timeout (ms), librdkafka overrides and how long
    a recovery (a new producer, the consumer rewound) may keep failing before
    :class:`TransactionFatal` (``recovery_seconds``)."""

    bootstrap_servers: Brokers
    group_id: str
    topics: Sequence[str]
    transactional_id: str
    take_max: int = 500
    take_within: float = 1.0
    transaction_timeout_ms: int = 60_000
    group_instance_id: str | None = None
    consumer_extra: dict[str, Any] = field(default_factory=dict)
    producer_extra: dict[str, Any] = field(default_factory=dict)
    recovery_seconds: float = 600.0


def _is(exc: KafkaException, check: str) -> bool:
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and bool(getattr(err, check)())


_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def _code(exc: KafkaException) -> int | None:
    err = exc.args[0] if exc.args else None
    return err.code() if isinstance(err, KafkaError) else None


def _fenced(exc: KafkaException) -> bool:
    return _code(exc) in _FENCED


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
    ):
        self.cfg = cfg
        self.generation = 0
        self.assigned: set[tuple[str, int]] = set()
        # next offsets per assigned partition: the group's when assigned, then this stream's
        self._committed: dict[tuple[str, int], int] = {}
        self._group_unset: set[tuple[str, int]] = set()  # assigned, the group committed nothing
        # assigned partitions whose committed offset the group would not give (lag()), and
        # since when (time.monotonic()) some have been: a pending transactional offset
        # commit (UNSTABLE_OFFSET_COMMIT) or a broker that does not answer
        self.offsets_unreadable: tuple[tuple[str, int], ...] = ()
        self.offsets_unreadable_since: float | None = None
        self._on_assignment = on_assignment
        self._lock = threading.Lock()
        consumer_conf = consumer_config(
            cfg.bootstrap_servers, cfg.group_id, **STREAM_READER,
            **{"partition.assignment.strategy": "range",
               "session.timeout.ms": STREAM_SESSION_TIMEOUT_MS},
        )  # fmt: skip
        if cfg.group_instance_id:
            consumer_conf["group.instance.id"] = cfg.group_instance_id
        consumer_conf.update(cfg.consumer_extra)
        producer_conf = transactional_producer_config(
            cfg.bootstrap_servers, cfg.transactional_id, cfg.transaction_timeout_ms,
            **cfg.producer_extra,
        )  # fmt: skip
        # aborts whatever a predecessor with this transactional id left open (fencing it)
        self.txn = TxnProducer(producer_conf, cfg.transaction_timeout_ms / 1000)
        self._txn_began = 0.0  # monotonic time the open transaction began
        self.recovering = False  # inside recover(): read by /health from another thread
        self._consumer_conf = consumer_conf
        self.consumer = self._subscribed()
        self.consumer_renewals = 0

    def _subscribed(self) -> Consumer:
        consumer = build_consumer(self._consumer_conf)
        consumer.subscribe(
            list(self.cfg.topics), on_assign=self._assigned, on_revoke=self._revoked,
            on_lost=self._revoked,
        )  # fmt: skip
        return consumer

    def renew_consumer(self, why: str) -> None:
        """Replace a consumer that failed fatally by a new one with the same configuration
        (and ``group.instance.id``): librdkafka fences a static member's own rejoin after its
        session expired in a broker outage ("Static consumer fenced by other consumer with
        same group.instance.id", librdkafka #3437). The old consumer is closed in a thread of
        its own (not waited for); nothing is assigned until the new one joins, and windows
        read before are no longer owned (:meth:`still_owned`)."""
        log.warning("renewing the consumer: %s", why)
        old = self.consumer
        threading.Thread(target=old.close, name="consumer-close", daemon=True).start()
        with self._lock:
            self.generation += 1
            self.assigned = set()
            self._committed.clear()
            self._group_unset.clear()
        self.consumer = self._subscribed()
        self.consumer_renewals += 1

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
                self._group_unset.discard((p.topic, p.partition))
        log.info("revoked %d partitions (generation %d)", len(partitions), self.generation)

    # -- windows -------------------------------------------------------------------------------
    def next_window(
        self, stop: threading.Event | None = None, until: Callable[[], bool] | None = None
    ) -> Window | None:
        """Read up to ``take_max`` records, waiting at most ``take_within`` seconds after the
        first one (and returning None when none came within ``take_within``, or ``stop`` is
        set). ``until()`` true ends the window early with what it holds (checked between
        polls, every 0.25 s at most: a pipelined caller whose previous window is ready to
        commit). Raises ``KafkaException`` for a consumer error other than a partition EOF,
        and :class:`WindowAborted` after renewing a consumer that failed fatally
        (:meth:`renew_consumer`): drop the windows in hand, they are consumed again."""
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
                elif err.fatal() or err.code() == KafkaError._FATAL:
                    self.renew_consumer(f"fatal consumer error: {err}")
                    raise WindowAborted(f"the consumer failed ({err}) and was renewed")
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
        """Per assigned (topic, partition): the high watermark minus the group's committed
        offset there (the low watermark when the group committed nothing): the records not
        yet committed (0 or more), as ``kafka-consumer-groups`` reports them. The committed
        offset is asked of the group once per assignment (a committed-offset request waits
        for open transactions to settle) and then followed by this stream's own commits;
        partitions whose offsets cannot be read within ``timeout`` seconds are left out, and
        named in :attr:`offsets_unreadable` (with :attr:`offsets_unreadable_since`, the
        monotonic time since when some have been) so a caller can tell "no lag" from "lag
        unknown". Call it from the polling thread."""
        out: dict[tuple[str, int], int] = {}
        assigned = sorted(self.assigned)
        try:
            self._read_committed([tp for tp in assigned if tp not in self._committed], timeout)
        except KafkaException as exc:
            log.info("committed offsets not read: %s", exc)
        self._note_unreadable(
            [tp for tp in assigned if tp not in self._committed and tp not in self._group_unset]
        )
        for topic, partition in assigned:
            tp = TopicPartition(topic, partition)
            try:
                low, high = self.consumer.get_watermark_offsets(tp, timeout=timeout)
            except KafkaException as exc:
                log.info("consumer lag of %s[%d] not read: %s", topic, partition, exc)
                continue
            at = self._committed.get((topic, partition))
            if at is None and (topic, partition) not in self._group_unset:
                continue  # the group's offset is not known yet
            out[(topic, partition)] = max(0, high - max(at or 0, low))
        return out

    def _note_unreadable(self, partitions: list[tuple[str, int]]) -> None:
        """Record which assigned partitions' committed offsets are unknown after a read, and
        since when some have been (kept while the set is not empty)."""
        self.offsets_unreadable = tuple(partitions)
        if not partitions:
            self.offsets_unreadable_since = None
        elif self.offsets_unreadable_since is None:
            self.offsets_unreadable_since = time.monotonic()

    def _read_committed(self, partitions: list[tuple[str, int]], timeout: float) -> None:
        """The group's committed offsets of ``partitions`` into ``_committed`` (a partition
        the group committed nothing for is noted in ``_group_unset``)."""
        if not partitions:
            return
        found = self.consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout)
        with self._lock:
            for tp in found:
                key = (tp.topic, tp.partition)
                if key not in self.assigned or key in self._committed:
                    continue  # revoked meanwhile, or committed by this stream since
                if tp.offset >= 0:
                    self._committed[key] = tp.offset
                    self._group_unset.discard(key)
                else:
                    self._group_unset.add(key)

    def reachable(self, timeout: float = 2.0) -> bool:
        """Whether the broker answers a metadata request for the input topics within
        ``timeout`` seconds (polling thread only)."""
        try:
            for topic in self.cfg.topics:
                self.consumer.list_topics(topic, timeout=timeout)
        except KafkaException:
            return False
        return True

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
        the consumer is rewound to its committed offsets) or :class:`TransactionFatal`
        (fenced by another instance, or :meth:`recover` failed). When librdkafka reported
        every broker down since the last transaction, the producer is renewed first and the
        window aborted (``streams.txn_producer``); an offsets or commit call that has not returned
        ``STUCK_GRACE_SECONDS`` after its ``timeout`` abandons the producer and recovers.
        """
        self.txn.poll(0)  # serve the error callback: were the brokers lost meanwhile?
        if self.txn.brokers_lost:  # renew before the hang (streams.txn_producer)
            self.recover("every broker was down since the last transaction")
            raise WindowAborted("the producer was renewed and the consumer rewound")
        if not self.still_owned(window):
            self._rewind()
            raise WindowAborted("a rebalance revoked the window's partitions before its commit")
        produced = 0
        try:
            self._txn_began = time.monotonic()
            self.txn.producer.begin_transaction()
            for out in outputs:
                self._produce(out)
                produced += 1
            offsets, group = window.commit_offsets(), self.consumer.consumer_group_metadata()
            self.txn.call("send_offsets_to_transaction",
                          lambda p: p.send_offsets_to_transaction(offsets, group, timeout),
                          timeout)  # fmt: skip
            if before_commit is not None:
                before_commit(window)
            self.txn.call("commit_transaction", lambda p: p.commit_transaction(timeout), timeout)
            self._committed.update(window.offsets)
            self._group_unset.difference_update(window.offsets)
        except ProducerStuck as exc:
            self.recover(f"window not committed: {exc}")
            raise WindowAborted(f"transaction abandoned: {exc}") from exc
        except KafkaException as exc:
            self._failed(exc)
            raise WindowAborted(f"transaction aborted: {exc}") from exc
        except BaseException as exc:
            self._abort(f"window failed before its commit: {exc!r}")
            raise WindowAborted(f"transaction aborted: {exc!r}") from exc
        return produced

    def _failed(self, exc: KafkaException) -> None:
        """After a failed transaction call: exit when fenced by another instance; abort an
        abortable error; renew the producer after any other error (fatal, a timeout, or a
        fencing by the broker's abort of a transaction older than ``transaction.timeout.ms``:
        an outage that long)."""
        if _fenced(exc) and not self._self_fenced():
            raise TransactionFatal(f"transactional producer fenced: {exc}") from exc
        if _is(exc, "fatal") or _fenced(exc) or not _is(exc, "txn_requires_abort"):
            # a timed-out call (retriable) stays in progress inside librdkafka and conflicts
            # with abort_transaction: a new producer aborts the transaction instead
            self.recover(f"transactional producer failed: {exc}")
        else:
            self._abort(f"transaction failed: {exc}")

    def _self_fenced(self) -> bool:
        """Whether a fencing may be this process's own doing: the open transaction outlived
        ``transaction.timeout.ms`` (the broker aborted it, bumping the epoch), or a producer
        abandoned inside ``init_transactions`` may have finished it since."""
        expired = time.monotonic() - self._txn_began > self.cfg.transaction_timeout_ms / 1000
        return expired or self.txn.init_abandoned > 0

    def _produce(self, out: OutputMessage) -> None:
        producer = self.txn.producer
        while True:
            try:
                producer.produce(out.topic, value=out.value, key=out.key, headers=out.headers)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)  # serve delivery reports: abort and commit need an empty queue

    def _abort(self, why: str) -> None:
        """Abort the open transaction (retrying while librdkafka still drains its queue) and
        rewind; when it cannot be aborted in time, or the call hangs, :meth:`recover`."""
        log.warning("aborting the window's transaction: %s", why)
        deadline = time.monotonic() + self.cfg.transaction_timeout_ms / 1000
        try:
            # let what is in flight be delivered (into the transaction being aborted): a purge
            # of in-flight messages leaves sequence gaps that fail the next transaction again
            self.txn.call("flush", lambda p: p.flush(10.0), 10.0)
            while True:
                self.txn.poll(0.1)  # delivery reports of the purged messages
                try:
                    self.txn.call("abort_transaction", lambda p: p.abort_transaction(5.0), 5.0)
                    break
                except KafkaException as exc:
                    if _fenced(exc) and not self._self_fenced():
                        raise TransactionFatal(f"could not abort, fenced: {exc}") from exc
                    conflict = _code(exc) == KafkaError._CONFLICT  # a timed-out call still on
                    if conflict or _is(exc, "fatal") or _fenced(exc) or time.monotonic() > deadline:
                        raise ProducerStuck(f"could not abort: {exc}") from exc
                    log.info("abort_transaction not done yet: %s", exc)
        except ProducerStuck as exc:
            self.recover(str(exc))
            return
        self._rewind()

    def recover(self, why: str) -> None:
        """A new transactional producer with the same ``transactional.id`` (the old one is
        fenced, its open transaction aborted by the broker) and the consumer rewound to the
        committed offsets, retried with backoff (1 s doubling to 30 s) while the broker is
        away. Raises :class:`TransactionFatal` when that keeps failing for
        ``recovery_seconds``, or too many abandoned producers are still stuck."""
        log.warning("recovering the transactional stream: %s", why)
        started = time.monotonic()
        self.recovering = True

        def attempt() -> None:
            self.txn.renew(why)
            try:
                self._rewind()
            except KafkaException as exc:
                # fatal (a static member fenced by its own rejoin), or the committed offsets
                # not readable (its session expired in the outage: this consumer may never
                # read them again, a breaking run saw 10 minutes of _TIMED_OUT while the
                # broker was back): a new consumer starts from the group's committed
                # offsets by itself
                self.renew_consumer(f"the consumer cannot rewind: {exc}")

        try:
            for tried in Retrying(
                retry=retry_if_exception(_recoverable),
                wait=wait_exponential(multiplier=1, max=30),
                stop=stop_after_delay(self.cfg.recovery_seconds),
                before_sleep=_log_retry,
                reraise=True,
            ):
                with tried:
                    attempt()
        except (KafkaException, ProducerStuck, TransactionFatal) as exc:
            raise TransactionFatal(
                f"recovery failed for {time.monotonic() - started:.0f} s: {exc}"
            ) from exc
        finally:
            self.recovering = False
        log.warning("transactional stream recovered after %.1f s (producer renewals: %d)",
                    time.monotonic() - started, self.txn.renewals)  # fmt: skip

    def _rewind(self) -> None:
        """Seek every assigned partition back to its committed offset (the start of the
        aborted window), so its records are consumed again. Raises ``KafkaException`` when
        the committed offsets cannot be read (going on from the current position would skip
        the aborted window's records)."""
        assigned = [TopicPartition(t, p) for t, p in sorted(self.assigned)]
        if not assigned:
            return
        for tp in self.consumer.committed(assigned, timeout=30):
            offset = tp.offset
            if offset < 0:  # nothing committed yet: from the start of the partition
                offset, _ = self.consumer.get_watermark_offsets(tp, timeout=30)
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    def close(self) -> None:
        """Leave the group and release the producer (an open transaction is aborted by the
        broker after its timeout, or at once when the same transactional id starts again)."""
        try:
            self.consumer.close()
        finally:
            try:
                self.txn.flush(5)
            except KafkaException as exc:  # fenced or fatal: nothing left to deliver
                log.info("producer not flushed on close: %s", exc)


def _recoverable(exc: BaseException) -> bool:
    return isinstance(exc, KafkaException) or (isinstance(exc, ProducerStuck) and not exc.fatal)


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome is not None else None
    log.warning("recovery attempt %d failed (%s); next in %.0f s", state.attempt_number, exc,
                state.next_action.sleep if state.next_action else 0.0)  # fmt: skip
