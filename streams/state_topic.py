"""Reading a compacted state topic from its beginning to its end (the clarification
service's ``clarify.state``, issue 12): a group-less read of every partition up to the high
watermark it had when the read began, through a consumer of ``streams.clients``."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, KafkaError, Message, TopicPartition

from streams import clients
from streams.clients import READ_COMMITTED, Brokers
from streams.topics import TopicError


def read_to_end(
    brokers: Brokers, topic: str, group: str, apply: Callable[[Message], None], timeout: float
) -> int:
    """Call ``apply`` on every message of ``topic`` (committed ones only), oldest first per
    partition, up to each partition's end when the read began; return how many were read.
    ``group`` names the consumer (nothing is committed). Raises ``TopicError`` when the topic
    is missing, a read fails, or the end is not reached within ``timeout`` seconds."""
    consumer = clients.consumer(
        brokers, group, **{"enable.partition.eof": True, "isolation.level": READ_COMMITTED}
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise TopicError(
                f"topic {topic!r} does not exist; create the topics with "
                "`refusal-audit topics create`"
            )
        pending: dict[int, int] = {}
        assign = []
        for partition in found.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high > low:
                pending[partition] = high
                assign.append(TopicPartition(topic, partition, OFFSET_BEGINNING))
        consumer.assign(assign)
        deadline = time.monotonic() + timeout
        read = 0
        while pending:
            if time.monotonic() > deadline:
                raise TopicError(f"could not read {topic!r} within {timeout} s")
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.pop(msg.partition() or 0, None)
                    continue
                raise TopicError(f"reading {topic!r}: {error}")
            read += 1
            apply(msg)
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if offset + 1 >= pending.get(partition, 0):
                pending.pop(partition, None)
        return read
    finally:
        consumer.close()


__all__ = ["read_to_end"]
