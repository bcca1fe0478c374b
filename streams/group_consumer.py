"""The one consumer core of the Kafka side (issue 26): a member of a consumer group and
everything every reader of the project does with it.

:class:`GroupConsumer` is used by the three readers, which differ only in when and how they
commit (docs/architecture.md, "The Kafka side"):

- ``streams.consumer_loop.ConsumerLoop`` (the service consumers: clarification, calibration,
  A/B) commits the offsets synchronously after its handler stored the batch and the broker
  confirmed the batch's outputs;
- ``streams.blocks.BlockReader`` (the warehouse sink) commits synchronously after the block's
  deduplicated insert;
- ``streams.transactional.TransactionalStream`` (the transactional worker) sends the offsets
  inside the producer's transaction (KIP-447), so it keeps the assignment's generation to
  refuse a window whose partitions were revoked.

What they share, here once:

- the consumer, built by the one factory (``streams.clients.build_consumer``) from the
  librdkafka settings the reader gives, subscribed to its topics, and renewed from the same
  settings when it failed fatally (:meth:`GroupConsumer.renew`);
- the assignment: the partitions held and a generation bumped on every assignment,
  revocation or loss (a batch remembers the generation it was read in), and the callbacks
  each reader adds to them (its log lines);
- a bounded batch (:meth:`GroupConsumer.poll_batch`, :class:`BatchBounds`): at most so many
  messages and bytes within so many seconds; a rebalance while it fills drops what was read
  before it (the new assignment fetches from the committed offsets again); partition ends are
  passed over, other poll errors handed to the reader's ``on_error`` (logged and skipped by the
  service consumers; raised by the sink; the worker renews a consumer that failed fatally);
- the offsets: the next offsets after a batch (:func:`next_offsets`), a synchronous commit
  (:meth:`GroupConsumer.commit`), seeking back to the first unhandled messages
  (:meth:`GroupConsumer.rewind_to`) or to the group's committed offsets
  (:meth:`GroupConsumer.rewind_to_committed`);
- the lag per partition against the group's committed offsets, as ``kafka-consumer-groups``
  reports it (:meth:`GroupConsumer.lag`);
- stopping on SIGTERM/SIGINT (:func:`stop_on_signals`) and closing.

Not thread-safe: one thread polls, commits and closes (the assignment it records may be read
from another thread).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from streams.clients import build_consumer

Partition = tuple[str, int]
"""A (topic, partition)."""

OnPartitions = Callable[[list[TopicPartition]], None]
"""A reader's callback on an assignment or a revocation (called inside a poll, after the
assignment and generation were recorded)."""


@dataclass(frozen=True)
class BatchBounds:
    """When a batch closes: ``max_messages`` messages, ``max_bytes`` bytes of values (None: no
    bound) or ``max_wait`` seconds, whichever comes first (what one poll returns past the
    count or byte bound opens the next batch; a record larger than ``max_bytes`` is a batch
    of its own). ``wait_from_first``: the seconds
    count from the batch's first message (and from a rebalance that dropped the batch), so an
    idle poll waits ``max_wait`` for a first message and a batch closes ``max_wait`` after it
    (the sink's blocks); otherwise from the start of the poll (the worker's windows, the
    service consumers' batches). One poll waits at most ``poll_slice`` seconds (None:
    ``max_wait``; a stop request or the caller's ``until`` are checked between polls) and asks
    for at most ``per_poll`` messages (None: what the batch still takes)."""

    max_messages: int
    max_wait: float
    max_bytes: int | None = None
    wait_from_first: bool = False
    poll_slice: float | None = None
    per_poll: int | None = None


@dataclass
class Polled:
    """A bounded batch: the ``messages`` in consumption order, the assignment ``generation``
    they were read in, and their values' ``bytes``."""

    messages: list[Message]
    generation: int
    bytes: int = 0


def next_offsets(messages: Iterable[Message]) -> dict[Partition, int]:
    """The offsets to commit after ``messages``: per (topic, partition) the last offset + 1."""
    last: dict[Partition, int] = {}
    for msg in messages:
        key = (msg.topic() or "", msg.partition() or 0)
        last[key] = max(last.get(key, 0), (msg.offset() or 0) + 1)
    return last


def as_partitions(offsets: Mapping[Partition, int]) -> list[TopicPartition]:
    """``offsets`` as ``TopicPartition`` s, sorted by topic and partition."""
    return [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]


def require_eager(config: Mapping[str, Any]) -> None:
    """Refuse (``ValueError``) settings that make the group's rebalances incremental
    (a ``cooperative-sticky`` assignment strategy, or ``group.protocol=consumer``, KIP-848):
    the core relies on eager rebalances, where every partition is revoked and fetched again
    from the committed offsets, so that a batch dropped by a rebalance is read again; under
    an incremental one the partitions kept go on from their position (the dropped records
    would be skipped) and an assignment callback names only the partitions added."""
    strategy = str(config.get("partition.assignment.strategy", ""))
    protocol = str(config.get("group.protocol", "classic"))
    if "cooperative" in strategy or protocol.lower() == "consumer":
        raise ValueError(
            "the consumer core needs eager rebalances: partition.assignment.strategy "
            f"{strategy!r} / group.protocol {protocol!r} are incremental"
        )


def _raise(error: KafkaError) -> None:
    raise KafkaException(error)


class GroupConsumer:
    """A consumer in a group (module docstring). ``config`` is the librdkafka settings
    (``streams.clients.consumer_config``: group, commit rules, session); ``topics`` what it
    subscribes to (at once when ``subscribe``, else at :meth:`subscribe`); ``logger`` gets the
    lines of renewals and of offsets or lag not read; ``on_assign`` and ``on_revoke`` (also
    called when partitions are lost) are the reader's callbacks. Raises ``KafkaException`` on
    a setting librdkafka refuses, ``ValueError`` on settings of incremental rebalances
    (:func:`require_eager`)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        topics: Sequence[str],
        logger: logging.Logger,
        *,
        on_assign: OnPartitions | None = None,
        on_revoke: OnPartitions | None = None,
        subscribe: bool = True,
    ) -> None:
        self.config = dict(config)
        require_eager(self.config)
        self.topics = list(topics)
        self.log = logger
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.generation = 0
        self.assigned: set[Partition] = set()
        # next offsets per assigned partition: the group's when read, then this member's
        self.committed: dict[Partition, int] = {}
        self.group_unset: set[Partition] = set()  # assigned, the group committed nothing
        # assigned partitions whose committed offset the group would not give (lag()), and
        # since when (time.monotonic()) some have been: a pending transactional offset
        # commit (UNSTABLE_OFFSET_COMMIT) or a broker that does not answer
        self.offsets_unreadable: tuple[Partition, ...] = ()
        self.offsets_unreadable_since: float | None = None
        self.renewals = 0
        self._carry: list[Message] = []  # read past a batch's byte bound: the next batch's
        self._carry_generation = 0
        self.lock = threading.Lock()
        self.consumer = build_consumer(self.config)
        self._member: Consumer | None = None  # the consumer subscribed last (its callbacks count)
        if subscribe:
            self.subscribe()

    def subscribe(self) -> None:
        """Join the group on the topics (the join happens in the polls)."""
        self._member = self.consumer
        self.consumer.subscribe(self.topics, on_assign=self._assigned, on_revoke=self._revoked,
                                on_lost=self._revoked)  # fmt: skip

    def renew(self, why: str) -> None:
        """Replace a consumer that failed fatally by a new one with the same settings (and
        ``group.instance.id``): librdkafka fences a static member's own rejoin after its
        session expired in a broker outage ("Static consumer fenced by other consumer with
        same group.instance.id", librdkafka #3437). The old consumer is closed in a thread of
        its own (not waited for); nothing is assigned until the new one joins, and the
        generation moves on, so batches read before are no longer owned."""
        self.log.warning("renewing the consumer: %s", why)
        self._carry = []
        old = self.consumer
        threading.Thread(target=old.close, name="consumer-close", daemon=True).start()
        with self.lock:
            self.generation += 1
            self.assigned = set()
            self.committed.clear()
            self.group_unset.clear()
        self.consumer = build_consumer(self.config)
        self.subscribe()
        self.renewals += 1

    # -- the assignment (callbacks run inside a poll) --------------------------------------------
    def _stale(self, consumer: Consumer, what: str, partitions: list[TopicPartition]) -> bool:
        """Whether a callback comes from a consumer replaced by :meth:`renew`: its close, in a
        thread of its own, may serve its revocation or loss after the new consumer was
        assigned the same partitions, which must stay assigned (and the reader not told)."""
        if consumer is self._member:
            return False
        self.log.info("a renewed consumer's %s of %d partitions passed over", what,
                      len(partitions))  # fmt: skip
        return True

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._stale(consumer, "assignment", partitions):
            return
        with self.lock:
            self.generation += 1
            self.assigned = {(p.topic, p.partition) for p in partitions}
        if self.on_assign is not None:
            self.on_assign(partitions)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._stale(consumer, "revocation", partitions):
            return
        with self.lock:
            self.generation += 1
            self.assigned -= {(p.topic, p.partition) for p in partitions}
            for p in partitions:  # another member may commit there now
                self.committed.pop((p.topic, p.partition), None)
                self.group_unset.discard((p.topic, p.partition))
        if self.on_revoke is not None:
            self.on_revoke(partitions)

    def owns(self, generation: int, partitions: Iterable[Partition]) -> bool:
        """Whether no rebalance happened since ``generation`` and ``partitions`` are all still
        assigned here."""
        return generation == self.generation and set(partitions) <= self.assigned

    # -- batches ------------------------------------------------------------------------------
    def poll_batch(
        self,
        bounds: BatchBounds,
        stop: threading.Event | None = None,
        until: Callable[[], bool] | None = None,
        on_error: Callable[[KafkaError], None] = _raise,
    ) -> Polled:
        """A bounded batch (:class:`BatchBounds`), empty when nothing came in time or ``stop``
        was set first. ``until()`` true ends the batch early with what it holds (checked
        between polls). A poll error other than a partition end goes to ``on_error`` (by
        default raised as ``KafkaException``; what it raises comes out of here)."""
        messages: list[Message] = []
        size = 0
        generation = self.generation
        deadline = time.monotonic() + bounds.max_wait
        slice_ = bounds.max_wait if bounds.poll_slice is None else bounds.poll_slice
        # what the last batch's poll returned past its byte bound, unless a rebalance or a
        # seek came since (the fetch then starts again from the committed or sought offsets)
        carried = self._carry if self._carry_generation == generation else []
        self._carry = []
        if stop is not None and stop.is_set():
            self._carry = carried
            return Polled(messages, generation, size)
        while len(messages) < bounds.max_messages and (
            bounds.max_bytes is None or size < bounds.max_bytes
        ):
            if carried:
                batch, carried = carried, []
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (stop is not None and stop.is_set()):
                    break
                if until is not None and until():
                    break
                want = bounds.max_messages - len(messages)
                if bounds.per_poll is not None:
                    want = min(want, bounds.per_poll)
                batch = self.consumer.consume(num_messages=want, timeout=min(remaining, slice_))
                if self.generation != generation:
                    # a rebalance inside consume: what was read before it is dropped (the
                    # new assignment fetches from the committed offsets again); this poll's
                    # messages are already of the new assignment
                    messages, size, generation = [], 0, self.generation
                    if bounds.wait_from_first:
                        deadline = time.monotonic() + bounds.max_wait
            for i, msg in enumerate(batch):
                if len(messages) >= bounds.max_messages or (
                    bounds.max_bytes is not None and size >= bounds.max_bytes
                ):  # the rest opens the next batch (the position is past it)
                    self._carry, self._carry_generation = list(batch[i:]), generation
                    break
                error = msg.error()
                if error is None:
                    if not messages and bounds.wait_from_first:
                        deadline = time.monotonic() + bounds.max_wait
                    messages.append(msg)
                    size += len(msg.value() or b"")
                elif error.code() != KafkaError._PARTITION_EOF:
                    on_error(error)
        return Polled(messages, generation, size)

    # -- offsets ------------------------------------------------------------------------------
    def commit(self, offsets: Sequence[TopicPartition]) -> list[TopicPartition]:
        """Commit ``offsets`` synchronously; returns the per-partition results (a partition's
        own ``error`` set when it failed) and notes the committed ones for :meth:`lag`.
        Raises ``KafkaException`` (e.g. the partitions were reassigned)."""
        result = list(self.consumer.commit(offsets=list(offsets), asynchronous=False) or [])
        self.note_committed(
            {(tp.topic, tp.partition): tp.offset for tp in result if tp.error is None}
        )
        return result

    def note_committed(self, offsets: Mapping[Partition, int]) -> None:
        """Record the next offsets committed for the group (by :meth:`commit`, or inside a
        producer's transaction), which :meth:`lag` then counts from."""
        self.committed.update(offsets)
        self.group_unset.difference_update(offsets)

    def rewind_to(self, messages: Iterable[Message]) -> None:
        """Seek each partition of ``messages`` back to its first one, so the next polls hand
        them over again (the position is past them; a later commit would skip them). Raises
        ``KafkaException`` when a seek fails."""
        self._carry = []  # read past the batch: fetched again after the seek
        first: dict[Partition, int] = {}
        for msg in messages:
            key = (msg.topic() or "", msg.partition() or 0)
            first[key] = min(first.get(key, msg.offset() or 0), msg.offset() or 0)
        for (topic, partition), offset in sorted(first.items()):
            self.consumer.seek(TopicPartition(topic, partition, offset))

    def rewind_to_committed(self) -> None:
        """Seek every assigned partition back to the group's committed offset (the start of
        what was read and not committed; the partition's start when the group committed
        nothing). Raises ``KafkaException`` when the committed offsets cannot be read (going
        on from the current position would skip what was read)."""
        self._carry = []
        assigned = [TopicPartition(t, p) for t, p in sorted(self.assigned)]
        if not assigned:
            return
        for tp in self.consumer.committed(assigned, timeout=30):
            if tp.error is not None:  # its offset is not "nothing committed": do not restart
                raise KafkaException(tp.error)
            offset = tp.offset
            if offset < 0:  # nothing committed yet: from the start of the partition
                offset, _ = self.consumer.get_watermark_offsets(tp, timeout=30)
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    # -- lag ----------------------------------------------------------------------------------
    def lag(self, timeout: float = 2.0) -> dict[Partition, int]:
        """Per assigned (topic, partition): the high watermark minus the group's committed
        offset there (the low watermark when the group committed nothing): the records not
        yet committed (0 or more), as ``kafka-consumer-groups`` reports them. The committed
        offset is asked of the group once per assignment (a committed-offset request waits
        for open transactions to settle) and then followed by this member's own commits
        (:meth:`note_committed`); partitions whose offsets cannot be read within ``timeout``
        seconds are left out, and named in :attr:`offsets_unreadable` (with
        :attr:`offsets_unreadable_since`, the monotonic time since when some have been) so a
        caller can tell "no lag" from "lag unknown". Call it from the polling thread."""
        out: dict[Partition, int] = {}
        assigned = sorted(self.assigned)
        try:
            self._read_committed([tp for tp in assigned if tp not in self.committed], timeout)
        except KafkaException as exc:
            self.log.info("committed offsets not read: %s", exc)
        self._note_unreadable(
            [tp for tp in assigned if tp not in self.committed and tp not in self.group_unset]
        )
        for topic, partition in assigned:
            tp = TopicPartition(topic, partition)
            try:
                low, high = self.consumer.get_watermark_offsets(tp, timeout=timeout)
            except KafkaException as exc:
                self.log.info("consumer lag of %s[%d] not read: %s", topic, partition, exc)
                continue
            at = self.committed.get((topic, partition))
            if at is None and (topic, partition) not in self.group_unset:
                continue  # the group's offset is not known yet
            out[(topic, partition)] = max(0, high - max(at or 0, low))
        return out

    def _note_unreadable(self, partitions: list[Partition]) -> None:
        """Record which assigned partitions' committed offsets are unknown after a read, and
        since when some have been (kept while the set is not empty)."""
        self.offsets_unreadable = tuple(partitions)
        if not partitions:
            self.offsets_unreadable_since = None
        elif self.offsets_unreadable_since is None:
            self.offsets_unreadable_since = time.monotonic()

    def _read_committed(self, partitions: list[Partition], timeout: float) -> None:
        """The group's committed offsets of ``partitions`` into ``committed`` (a partition
        the group committed nothing for is noted in ``group_unset``)."""
        if not partitions:
            return
        found = self.consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout)
        with self.lock:
            for tp in found:
                key = (tp.topic, tp.partition)
                if key not in self.assigned or key in self.committed or tp.error is not None:
                    continue  # revoked meanwhile, committed by this member since, or not read
                if tp.offset >= 0:
                    self.committed[key] = tp.offset
                    self.group_unset.discard(key)
                else:
                    self.group_unset.add(key)

    def reachable(self, timeout: float = 2.0) -> bool:
        """Whether the broker answers a metadata request for the topics within ``timeout``
        seconds (polling thread only)."""
        try:
            for topic in self.topics:
                self.consumer.list_topics(topic, timeout=timeout)
        except KafkaException:
            return False
        return True

    def close(self) -> None:
        """Leave the group (nothing more is committed). Raises ``KafkaException``."""
        self.consumer.close()


def stop_on_signals(
    stop: Callable[[], None],
    name: str,
    logger: logging.Logger,
    what: str = "stopping after the message in hand",
) -> None:
    """Make SIGTERM and SIGINT call ``stop`` (a loop returns after the message in hand),
    logged as ``<name>: <SIGNAL> received, <what>``; a second signal ends the process at
    once, uncommitted. Call from the main thread. The service consumers' commands and the
    worker's and sink's (``what``: ``stopping``) use it."""

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        logger.info("%s: %s received, %s", name, signal.Signals(signum).name, what)
        stop()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


__all__ = [
    "BatchBounds",
    "GroupConsumer",
    "OnPartitions",
    "Partition",
    "Polled",
    "as_partitions",
    "next_offsets",
    "stop_on_signals",
]
