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

The consumer side (subscribing, the assignment and its generation, the bounded poll, the
rewind to the committed offsets, the lag) is the one consumer core's
(``streams.group_consumer.GroupConsumer``); what is this module's is the commit strategy: the
offsets inside the producer's transaction, and the recovery of that producer.

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
    consumer_config,
    transactional_producer_config,
)
from streams.group_consumer import BatchBounds, GroupConsumer, as_partitions, next_offsets
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
        return as_partitions(self.offsets)


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


WORKER_PREFETCH_KBYTES = 16_384
"""librdkafka's ``queued.max.messages.kbytes`` for the worker's consumer: input fetched
ahead of the windows, at most 16 MB (librdkafka's default, 64 MB, is RSS a worker never
reads ahead into: at ~4,000 events/s of ~1 kB, 16 MB is about 4 s of work; issue 27's RSS
target, benchmarks/scaleout.py part b)."""


class TransactionalStream:
    """Windows in, one transaction per window out (module docstring), on the one consumer
    core (``streams.group_consumer.GroupConsumer``); its commit strategy: the window's
    offsets go inside the producer's transaction (:meth:`commit`).

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
        self._on_assignment = on_assignment
        consumer_conf = consumer_config(
            cfg.bootstrap_servers, cfg.group_id, **STREAM_READER,
            **{"partition.assignment.strategy": "range",
               "session.timeout.ms": STREAM_SESSION_TIMEOUT_MS,
               "queued.max.messages.kbytes": WORKER_PREFETCH_KBYTES},
        )  # fmt: skip
        if cfg.group_instance_id:
            consumer_conf["group.instance.id"] = cfg.group_instance_id
        consumer_conf.update(cfg.consumer_extra)
        producer_conf = transactional_producer_config(
            cfg.bootstrap_servers, cfg.transactional_id, cfg.transaction_timeout_ms,
            **cfg.producer_extra,
        )  # fmt: skip
        # aborts whatever a predecessor with this transactional id left open (fencing it)
        # a broker still starting is waited for as long as a restart is ridden through
        self.txn = TxnProducer(producer_conf, cfg.transaction_timeout_ms / 1000,
                               start_within=cfg.recovery_seconds)  # fmt: skip
        self._txn_began = 0.0  # monotonic time the open transaction began
        self.recovering = False  # inside recover(): read by /health from another thread
        self.group = GroupConsumer(consumer_conf, cfg.topics, log, on_assign=self._assigned,
                                   on_revoke=self._revoked)  # fmt: skip

    # -- the consumer core's state, as this stream's callers name it ----------------------------
    @property
    def consumer(self) -> Consumer:
        """The current consumer (renewed by :meth:`renew_consumer`)."""
        return self.group.consumer

    @consumer.setter
    def consumer(self, consumer: Consumer) -> None:
        self.group.consumer = consumer

    @property
    def generation(self) -> int:
        """The assignment generation (bumped on every assignment, revocation, loss or
        renewal; 0: it never joined)."""
        return self.group.generation

    @property
    def assigned(self) -> set[tuple[str, int]]:
        """The (topic, partition) s assigned to this stream."""
        return self.group.assigned

    @property
    def offsets_unreadable(self) -> tuple[tuple[str, int], ...]:
        """Assigned partitions whose committed offset the group would not give (:meth:`lag`)."""
        return self.group.offsets_unreadable

    @property
    def offsets_unreadable_since(self) -> float | None:
        """Since when (``time.monotonic()``) some committed offsets have been unreadable."""
        return self.group.offsets_unreadable_since

    @property
    def consumer_renewals(self) -> int:
        """How many times the consumer was renewed."""
        return self.group.renewals

    def renew_consumer(self, why: str) -> None:
        """Replace a consumer that failed fatally by a new one with the same configuration
        (``GroupConsumer.renew``: librdkafka #3437); windows read before are no longer owned
        (:meth:`still_owned`)."""
        self.group.renew(why)

    # -- rebalance callbacks (run inside consume) ---------------------------------------------
    def _assigned(self, partitions: list[TopicPartition]) -> None:
        log.info("assigned %d partitions (generation %d)", len(partitions), self.generation)
        if self._on_assignment is not None:
            self._on_assignment(len(partitions))

    def _revoked(self, partitions: list[TopicPartition]) -> None:
        log.info("revoked %d partitions (generation %d)", len(partitions), self.generation)

    # -- windows -------------------------------------------------------------------------------
    def next_window(
        self, stop: threading.Event | None = None, until: Callable[[], bool] | None = None
    ) -> Window | None:
        """Read up to ``take_max`` records within ``take_within`` seconds of the call
        (returning None when none came, or ``stop`` is set). ``until()`` true ends the
        window early with what it holds (checked between polls, every 0.25 s at most: a
        pipelined caller whose previous window is ready to commit). Raises
        ``KafkaException`` for a consumer error other than a partition EOF, and
        :class:`WindowAborted` after renewing a consumer that failed fatally
        (:meth:`renew_consumer`): drop the windows in hand, they are consumed again."""
        bounds = BatchBounds(self.cfg.take_max, self.cfg.take_within, poll_slice=0.25)
        polled = self.group.poll_batch(bounds, stop, until, on_error=self._poll_error)
        if not polled.messages:
            return None
        return Window(polled.messages, next_offsets(polled.messages), polled.generation)

    def _poll_error(self, err: KafkaError) -> None:
        if err.fatal() or err.code() == KafkaError._FATAL:
            self.renew_consumer(f"fatal consumer error: {err}")
            raise WindowAborted(f"the consumer failed ({err}) and was renewed")
        raise KafkaException(err)

    def lag(self, timeout: float = 2.0) -> dict[tuple[str, int], int]:
        """Per assigned (topic, partition) the records not yet committed
        (``GroupConsumer.lag``: the high watermark minus the group's committed offset, as
        ``kafka-consumer-groups`` reports them); partitions whose offsets cannot be read are
        left out and named in :attr:`offsets_unreadable`. Call it from the polling thread."""
        return self.group.lag(timeout)

    def reachable(self, timeout: float = 2.0) -> bool:
        """Whether the broker answers a metadata request for the input topics within
        ``timeout`` seconds (polling thread only)."""
        return self.group.reachable(timeout)

    def still_owned(self, window: Window) -> bool:
        """True when every partition of ``window`` is still assigned to this consumer and no
        rebalance happened since it was read."""
        return self.group.owns(window.generation, window.offsets)

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
            self.group.note_committed(window.offsets)
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
        aborted window), so its records are consumed again
        (``GroupConsumer.rewind_to_committed``). Raises ``KafkaException`` when the committed
        offsets cannot be read (going on from the current position would skip the aborted
        window's records)."""
        self.group.rewind_to_committed()

    def close(self) -> None:
        """Leave the group and release the producer (an open transaction is aborted by the
        broker after its timeout, or at once when the same transactional id starts again)."""
        try:
            self.group.close()
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
