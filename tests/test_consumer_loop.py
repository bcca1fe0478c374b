"""The one service consumer loop (``streams.consumer_loop``, issue 26) on a real broker: an
offset is committed only after the handler's batch is handled and its outputs and dead
letters are confirmed; a batch whose handler fails commits nothing and comes again; a stop
mid-batch commits the handled prefix only."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from streaming import read_topic

from streams.consumer_loop import (
    ConsumeError,
    ConsumerLoop,
    Handled,
    LoopConfig,
    Rejected,
    dead_letter,
)
from streams.topics import TopicSpec, create_topics

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

log = logging.getLogger("test.consumer_loop")


def committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})  # fmt: skip
    try:
        return consumer.committed([TopicPartition(topic, 0)], timeout=20)[0].offset
    finally:
        consumer.close()


class Recorder:
    """Outputs each message's value on ``out`` (a value ``bad`` is dead-lettered); raises on
    ``fail_on``; asks the loop to stop after ``stop_after`` messages. Records, at each batch,
    the group's committed offset (what the loop had committed before handling it)."""

    def __init__(self, bootstrap: str, group: str, topics: dict[str, str]) -> None:
        self.bootstrap, self.group, self.topics = bootstrap, group, topics
        self.seen: list[bytes] = []
        self.committed_at_handle: list[int] = []
        self.stop_after: int | None = None
        self.fail_on: bytes | None = b"boom"
        self.firsts: list[int] = []  # the first offset of each batch handed over
        self.loop: ConsumerLoop | None = None

    def handle(self, batch: Sequence[Message]) -> Handled:
        self.committed_at_handle.append(committed(self.bootstrap, self.group, self.topics["in"]))
        self.firsts.append(batch[0].offset() or 0)
        outputs: list[tuple[str, bytes, bytes]] = []
        letters: list[Any] = []
        for i, msg in enumerate(batch):
            value = msg.value() or b""
            if value == self.fail_on:
                raise ConsumeError("the handler failed")
            if self.stop_after is not None and len(self.seen) >= self.stop_after:
                assert self.loop is not None
                self.loop.stop()
                return Handled(outputs, letters, i)
            self.seen.append(value)
            if value == b"bad":
                letters.append(dead_letter(msg, Rejected("invalid", "a bad message"),
                                           datetime.now(UTC), name="test", logger=log,
                                           redactor=None, max_raw_bytes=1024))  # fmt: skip
            else:
                outputs.append((self.topics["out"], b"k", value.upper()))
        return Handled(outputs, letters, len(batch))


@pytest.fixture
def topics(kafka_admin: AdminClient, unique_topic_prefix: str) -> dict[str, str]:
    names = {role: f"{unique_topic_prefix}{role}" for role in ("in", "out", "dead")}
    create_topics(kafka_admin, [TopicSpec(r, n, 1, 1) for r, n in names.items()])
    return names


def send(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def loop_for(bootstrap: str, group: str, topics: dict[str, str], handler: Recorder,
             batch_size: int) -> ConsumerLoop:  # fmt: skip
    config = LoopConfig(name=group, group=group, topics=(topics["in"],),
                        dead_letter_topic=topics["dead"], batch_size=batch_size, batch_wait=0.3,
                        idle_timeout=2.0)  # fmt: skip
    loop = ConsumerLoop(bootstrap, config, handler, log)
    handler.loop = loop
    return loop


def test_offsets_are_committed_only_after_the_batch_is_handled_and_confirmed(
    kafka_bootstrap: str, topics: dict[str, str], unique_topic_prefix: str
) -> None:
    group = f"{unique_topic_prefix}group"
    send(kafka_bootstrap, topics["in"], [b"a", b"b", b"bad", b"boom", b"c"])
    handler = Recorder(kafka_bootstrap, group, topics)
    with pytest.raises(ConsumeError, match="the handler failed"):
        loop_for(kafka_bootstrap, group, topics, handler, batch_size=2).run()
    # each batch was handed over after the one before it was committed, never before
    assert handler.committed_at_handle == [-1001, *handler.firsts[1:]]
    # the failing batch (the one holding "boom", offset 3) committed nothing
    failed_at = handler.firsts[-1]
    assert failed_at in (2, 3)
    assert committed(kafka_bootstrap, group, topics["in"]) == failed_at
    outs = [m.value() for m in read_topic(kafka_bootstrap, topics["out"], idle=1.0)]
    assert outs == [b"A", b"B"]
    dead = list(read_topic(kafka_bootstrap, topics["dead"], idle=1.0))
    assert len(dead) == (1 if failed_at == 3 else 0)  # "bad" went out with its batch only

    # the failed batch comes again; this handler takes "boom" like any value
    send(kafka_bootstrap, topics["in"], [b"d"])
    again = Recorder(kafka_bootstrap, group, topics)
    again.fail_on = None
    stats = loop_for(kafka_bootstrap, group, topics, again, batch_size=2).run()
    assert again.seen == [b"bad", b"boom", b"c", b"d"][failed_at - 2 :]
    assert stats.messages == 6 - failed_at
    assert committed(kafka_bootstrap, group, topics["in"]) == 6
    dead = list(read_topic(kafka_bootstrap, topics["dead"], idle=1.0))
    assert len(dead) == 1 and dead[0].value() == b"bad"
    assert ("x-reason", b"a bad message") in (dead[0].headers() or [])
    outs = [m.value() for m in read_topic(kafka_bootstrap, topics["out"], idle=1.0)]
    assert outs == [b"A", b"B", b"BOOM", b"C", b"D"]


def test_a_stop_mid_batch_commits_the_handled_prefix_only(
    kafka_bootstrap: str, topics: dict[str, str], unique_topic_prefix: str
) -> None:
    group = f"{unique_topic_prefix}group"
    send(kafka_bootstrap, topics["in"], [b"a", b"b", b"c", b"d"])
    handler = Recorder(kafka_bootstrap, group, topics)
    handler.stop_after = 3
    stats = loop_for(kafka_bootstrap, group, topics, handler, batch_size=2).run()
    assert stats.messages == 3
    assert committed(kafka_bootstrap, group, topics["in"]) == 3
    outs = [m.value() for m in read_topic(kafka_bootstrap, topics["out"], idle=1.0)]
    assert outs == [b"A", b"B", b"C"]


class ShortBatch(Recorder):
    """Hands back only the first message of its first batch (``Handled.done`` 1) without
    asking the loop to stop."""

    def __init__(self, bootstrap: str, group: str, topics: dict[str, str]) -> None:
        super().__init__(bootstrap, group, topics)
        self.shortened = False

    def handle(self, batch: Sequence[Message]) -> Handled:
        if self.shortened or len(batch) < 2:
            return super().handle(batch)
        self.shortened = True
        return super().handle(batch[:1])


def test_a_handled_prefix_without_a_stop_leaves_the_rest_to_come_again(
    kafka_bootstrap: str, topics: dict[str, str], unique_topic_prefix: str
) -> None:
    """A handler that handles a prefix of its batch and goes on (``Handled.done`` below the
    batch's length, no stop): the rest of the batch is handed over again, never skipped."""
    group = f"{unique_topic_prefix}group"
    send(kafka_bootstrap, topics["in"], [b"a", b"b", b"c", b"d"])
    handler = ShortBatch(kafka_bootstrap, group, topics)
    stats = loop_for(kafka_bootstrap, group, topics, handler, batch_size=2).run()
    assert handler.shortened
    assert handler.seen == [b"a", b"b", b"c", b"d"]
    assert stats.messages == 4
    assert committed(kafka_bootstrap, group, topics["in"]) == 4
