"""Large blocks of committed records for a warehouse sink (issue 14).

A :class:`BlockReader` consumes topics in a consumer group with ``read_committed`` (so it
sees only the outputs of committed worker transactions) and hands out :class:`Block` s bounded
by rows, bytes and time, whichever comes first (a bounded batch of the one consumer core,
``streams.group_consumer``). The caller inserts a block and then calls
:meth:`BlockReader.commit`; offsets are committed synchronously, only then, so a crash
between the insert and the commit redelivers the block (at least once), and the insert's
deduplication token (:meth:`Block.dedup_token`, from topic, partition and offset range, the
way ClickHouse's own Kafka ingestion names its blocks) makes the repeated insert harmless.

Pure Kafka: the decoding of records into rows is the caller's.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaException, Message, TopicPartition

from streams import clients
from streams.clients import STREAM_READER, Brokers
from streams.group_consumer import BatchBounds, GroupConsumer

log = logging.getLogger("refusal_audit.blocks")


@dataclass(frozen=True)
class BlockLimits:
    """When a block closes: ``max_rows`` records, ``max_bytes`` of values, or ``max_wait``
    seconds after its first record, whichever comes first (under a backlog blocks fill to
    ``max_rows``; at a trickle they close on time)."""

    max_rows: int = 50_000
    max_bytes: int = 64 * 1024 * 1024
    max_wait: float = 2.0


@dataclass
class Block:
    """Records of one or more topic partitions read together: ``records`` per topic (in
    offset order per partition) and the offset range per (topic, partition)."""

    records: dict[str, list[Message]] = field(default_factory=lambda: defaultdict(list))
    ranges: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    rows: int = 0
    bytes: int = 0

    def add(self, msg: Message) -> None:
        """Add one record."""
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        self.records[topic].append(msg)
        first, _ = self.ranges.get((topic, partition), (offset, offset))
        self.ranges[(topic, partition)] = (min(first, offset), offset)
        self.rows += 1
        self.bytes += len(msg.value() or b"")

    def dedup_token(self, topic: str) -> str:
        """The insert deduplication token of this block's records of ``topic``: a hash of
        its ``topic:partition:first-last`` ranges. The same records read again after a
        crash form the same ranges when the block is re-read from the same committed
        offsets with the same limits; when they do not, the tables' ReplacingMergeTree
        keys still make the repeat harmless to queries."""
        ranges = sorted((p, r) for (t, p), r in self.ranges.items() if t == topic)
        text = ";".join(f"{topic}:{p}:{a}-{b}" for p, (a, b) in ranges)
        return hashlib.sha256(text.encode()).hexdigest()

    def offsets(self) -> list[TopicPartition]:
        """The offsets to commit after this block (last + 1 per partition)."""
        return [TopicPartition(t, p, last + 1) for (t, p), (_, last) in sorted(self.ranges.items())]


class BlockReader:
    """Blocks of committed records from ``topics`` in consumer group ``group_id``, on the
    one consumer core (``streams.group_consumer.GroupConsumer``); its commit strategy: the
    caller commits a block (:meth:`commit`, :meth:`commit_stored`) only after storing it.

    Not thread-safe: use from one thread. Raises ``KafkaException`` on consumer errors.
    """

    def __init__(
        self,
        bootstrap_servers: Brokers,
        group_id: str,
        topics: list[str],
        limits: BlockLimits,
        **extra: Any,
    ) -> None:
        self.limits = limits
        self.group = GroupConsumer(
            clients.consumer_config(
                bootstrap_servers, group_id, **STREAM_READER,
                **{"fetch.max.bytes": 64 * 1024 * 1024, **extra},
            ),
            topics,
            log,
        )  # fmt: skip

    @property
    def generation(self) -> int:
        """The assignment generation (0: never assigned nor revoked, it never joined)."""
        return self.group.generation

    def next_block(self, stop: threading.Event | None = None) -> Block | None:
        """The next block (module docstring), or None when nothing came within
        ``max_wait`` or ``stop`` was set. A rebalance while the block fills drops what was
        read before it (read again from the committed offsets, by whoever owns it now)."""
        limits = self.limits
        # until the first record: wait up to max_wait; after it: close max_wait later
        bounds = BatchBounds(
            max_messages=limits.max_rows, max_wait=limits.max_wait, max_bytes=limits.max_bytes,
            wait_from_first=True, poll_slice=0.5, per_poll=10_000,
        )  # fmt: skip
        block = Block()
        for msg in self.group.poll_batch(bounds, stop).messages:
            block.add(msg)
        return block if block.rows else None

    def commit(self, block: Block) -> None:
        """Commit the block's offsets (synchronously). Raises ``KafkaException`` (e.g. the
        partitions were revoked: the block is read again by their new owner, and the
        deduplicated insert makes that harmless)."""
        self.group.commit(block.offsets())

    def commit_stored(self, block: Block, logger: logging.Logger) -> None:
        """Commit the stored block's offsets. A failed commit that is not fatal (the group
        coordinator moved during a broker restart, a rebalance) is logged on ``logger`` and
        passed over: the block is stored, the next block's commit covers its offsets, and a
        block read again after a crash is deduplicated. Raises ``KafkaException`` when fatal
        (fenced)."""
        try:
            self.commit(block)
        except KafkaException as exc:
            error = clients.error_of(exc)
            if error is None or error.fatal():
                raise
            logger.warning("the block is stored but its offsets not committed (%s): the next "
                           "commit covers them", error)  # fmt: skip

    def close(self) -> None:
        """Leave the group."""
        self.group.close()


def written_at(msg: Message) -> int | None:
    """The message's timestamp (ms since the epoch), None when it has none."""
    kind, stamp = msg.timestamp()
    return stamp if kind != TIMESTAMP_NOT_AVAILABLE else None


def by_partition(block: Block, topic: str) -> Iterator[tuple[int, list[Message]]]:
    """The records of ``topic`` in ``block`` grouped by partition."""
    groups: dict[int, list[Message]] = defaultdict(list)
    for msg in block.records.get(topic, []):
        groups[msg.partition() or 0].append(msg)
    yield from sorted(groups.items())
