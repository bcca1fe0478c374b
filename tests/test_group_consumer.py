"""The one consumer core's bounded batch (``streams.group_consumer``, issue 26) against a
scripted consumer: the bounds by count, bytes and time, a rebalance inside a poll dropping
what was read before it, partition ends passed over and other errors handed to the reader.
The real-broker behaviour of its readers is in tests/test_consumer_loop.py,
tests/test_sink_duplicates.py and tests/test_stream_recovery.py."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams import group_consumer
from streams.group_consumer import BatchBounds, GroupConsumer, next_offsets


def message(
    offset: int, value: bytes = b"v", error: KafkaError | None = None, partition: int = 0
) -> Any:
    """What the core reads of a message."""
    return SimpleNamespace(
        topic=lambda: "t", partition=lambda: partition, offset=lambda: offset,
        value=lambda: value, error=lambda: error,
    )  # fmt: skip


class FakeConsumer:
    """Each ``consume`` returns the next scripted step's messages (running its action
    first: a rebalance callback), then nothing after ``idle`` seconds."""

    def __init__(self, steps: list[tuple[Callable[[], None] | None, list[Any]]]) -> None:
        self.steps = steps
        self.asked: list[tuple[int, float]] = []
        self.callbacks: dict[str, Any] = {}

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.callbacks = callbacks

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        self.asked.append((num_messages, timeout))
        if not self.steps:
            time.sleep(timeout)
            return []
        action, messages = self.steps.pop(0)
        if action is not None:
            action()
        return messages


def core(monkeypatch: pytest.MonkeyPatch, fake: FakeConsumer) -> GroupConsumer:
    monkeypatch.setattr(group_consumer, "build_consumer", lambda config: fake)
    return GroupConsumer({}, ["t"], logging.getLogger("test.group_consumer"))


def test_a_batch_closes_on_count_then_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeConsumer([(None, [message(i) for i in range(3)]),
                         (None, [message(i) for i in range(3, 6)])])  # fmt: skip
    reader = core(monkeypatch, fake)
    polled = reader.poll_batch(BatchBounds(max_messages=4, max_wait=5.0))
    assert [m.offset() for m in polled.messages] == [0, 1, 2, 3]
    assert fake.asked[0][0] == 4 and fake.asked[1][0] == 1  # asks for what the batch takes
    # (a poll returning more than asked: the rest opens the next batch)
    polled = reader.poll_batch(BatchBounds(max_messages=4, max_wait=0.1))
    assert [m.offset() for m in polled.messages] == [4, 5]
    fake = FakeConsumer([(None, [message(0, b"x" * 10)]), (None, [message(1, b"y")])])
    polled = core(monkeypatch, fake).poll_batch(BatchBounds(100, 5.0, max_bytes=10))
    assert [m.offset() for m in polled.messages] == [0] and polled.bytes == 10


def test_a_batch_closes_on_time_from_the_start_or_from_its_first_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def slow() -> None:
        time.sleep(0.3)

    fake = FakeConsumer([(slow, []), (None, [message(0)])])
    polled = core(monkeypatch, fake).poll_batch(BatchBounds(10, 0.2, poll_slice=0.05))
    assert polled.messages == []  # 0.2 s from the start have passed
    fake = FakeConsumer([(lambda: time.sleep(0.2), []), (None, [message(0)])])
    started = time.monotonic()
    polled = core(monkeypatch, fake).poll_batch(
        BatchBounds(10, 0.5, wait_from_first=True, poll_slice=0.05)
    )
    assert [m.offset() for m in polled.messages] == [0]
    assert time.monotonic() - started >= 0.2 + 0.5  # it waited max_wait after the message


def test_a_rebalance_inside_a_poll_drops_what_was_read_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeConsumer([])
    reader = core(monkeypatch, fake)

    def rebalance() -> None:
        fake.callbacks["on_revoke"](fake, [TopicPartition("t", 0)])
        fake.callbacks["on_assign"](fake, [TopicPartition("t", 0), TopicPartition("t", 1)])

    fake.steps = [(None, [message(0), message(1)]), (rebalance, [message(0)])]
    before = reader.generation
    polled = reader.poll_batch(BatchBounds(3, 0.3, poll_slice=0.05))
    assert [m.offset() for m in polled.messages] == [0]
    assert polled.generation == before + 2 == reader.generation
    assert reader.assigned == {("t", 0), ("t", 1)}
    assert reader.owns(polled.generation, next_offsets(polled.messages))
    assert not reader.owns(before, next_offsets(polled.messages))


def test_partition_ends_are_passed_over_and_other_errors_go_to_the_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    eof = message(9, error=KafkaError(KafkaError._PARTITION_EOF))
    broken = message(9, error=KafkaError(KafkaError._TRANSPORT))
    fake = FakeConsumer([(None, [eof, message(0), broken, message(1)])])
    seen: list[int] = []
    polled = core(monkeypatch, fake).poll_batch(
        BatchBounds(2, 1.0), on_error=lambda error: seen.append(error.code())
    )
    assert [m.offset() for m in polled.messages] == [0, 1]
    assert seen == [KafkaError._TRANSPORT]
    fake = FakeConsumer([(None, [broken])])
    with pytest.raises(KafkaException):  # by default a poll error is raised
        core(monkeypatch, fake).poll_batch(BatchBounds(2, 1.0))


def test_next_offsets_are_the_last_plus_one_per_partition() -> None:
    messages = [message(5), message(3, partition=1), message(7),
                message(4, partition=1)]  # fmt: skip
    assert next_offsets(messages) == {("t", 0): 8, ("t", 1): 5}


def test_a_renewed_consumers_late_revocation_leaves_the_new_assignment_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``renew`` closes the old consumer in a thread it does not wait for; that close may
    serve the old consumer's revocation (or loss) only after the new consumer joined (a
    close held up by a broker outage, a fenced static member's close). The old consumer's
    callbacks must not take the new consumer's partitions out of the assignment (every
    window would then be refused as not owned, and the lag would show nothing)."""
    old, new = FakeConsumer([]), FakeConsumer([])
    closing = threading.Event()
    old.close = closing.wait  # type: ignore[attr-defined]  # held up until set
    built = iter([old, new])
    monkeypatch.setattr(group_consumer, "build_consumer", lambda config: next(built))
    revoked: list[list[TopicPartition]] = []
    reader = GroupConsumer({}, ["t"], logging.getLogger("test.group_consumer"),
                           on_revoke=revoked.append)  # fmt: skip
    old.callbacks["on_assign"](old, [TopicPartition("t", 0)])
    reader.renew("test: failed fatally")
    new.callbacks["on_assign"](new, [TopicPartition("t", 0)])
    generation = reader.generation
    old.callbacks["on_lost"](old, [TopicPartition("t", 0)])  # served by the late close
    closing.set()
    assert reader.assigned == {("t", 0)}
    assert reader.owns(generation, [("t", 0)])
    assert revoked == []  # the reader's callback is not told of the old consumer's partitions


@pytest.mark.parametrize(
    "setting",
    [{"partition.assignment.strategy": "cooperative-sticky"}, {"group.protocol": "consumer"}],
)
def test_settings_of_incremental_rebalances_are_refused(
    monkeypatch: pytest.MonkeyPatch, setting: dict[str, str]
) -> None:
    """A batch dropped by a rebalance is read again only because eager rebalances fetch every
    partition again from the committed offsets. Under an incremental one (a run against a
    Kafka 4 broker: 400 records over 4 partitions read, a second member joins, the batch is
    dropped) the 2 partitions kept were never fetched again (200 records skipped) and the
    core's assignment read as empty while librdkafka held those 2."""
    monkeypatch.setattr(group_consumer, "build_consumer", lambda config: FakeConsumer([]))
    with pytest.raises(ValueError, match="eager"):
        GroupConsumer(setting, ["t"], logging.getLogger("test.group_consumer"))
    GroupConsumer({"partition.assignment.strategy": "range"}, ["t"],
                  logging.getLogger("test.group_consumer"))  # fmt: skip


def test_a_partitions_committed_offset_error_is_not_taken_for_nothing_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Consumer.committed`` reports a partition it could not read with the partition's own
    ``error`` set and an invalid offset (-1001), the same offset as "the group committed
    nothing". Taken for that, the rewind after an aborted window sought the partition's
    start (the worker would audit and publish everything again) and the lag counted from
    the low watermark; the rewind raises instead, the lag names the partition unreadable."""
    fake = FakeConsumer([])
    error = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    fake.committed = lambda partitions, timeout=None: [  # type: ignore[attr-defined]
        SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=-1001, error=error)
        for tp in partitions
    ]
    fake.get_watermark_offsets = lambda tp, timeout=None: (0, 10)  # type: ignore[attr-defined]
    sought: list[TopicPartition] = []
    fake.seek = sought.append  # type: ignore[attr-defined]
    reader = core(monkeypatch, fake)
    fake.callbacks["on_assign"](fake, [TopicPartition("t", 0)])
    with pytest.raises(KafkaException):
        reader.rewind_to_committed()
    assert sought == []
    assert reader.lag() == {}
    assert reader.offsets_unreadable == (("t", 0),)


def test_a_poll_past_the_byte_bound_opens_the_next_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The byte bound was checked only between polls, so one poll could take a batch far past
    it (a real-broker sink with a 100,000-byte bound took one block of 3,500,000 bytes: a
    1.5 MB record and 2,000 of 1 KB, all in one poll). What a poll returns past the bound is
    kept for the next batch (a record larger than the bound is a batch of its own), unless a
    rebalance or a seek came since."""
    big, small = b"x" * 25, b"y" * 10
    fake = FakeConsumer([(None, [message(0, big)] + [message(i, small) for i in range(1, 6)])])
    reader = core(monkeypatch, fake)
    bounds = BatchBounds(100, 0.2, max_bytes=20)
    batches = [[m.offset() for m in reader.poll_batch(bounds).messages] for _ in range(4)]
    assert batches == [[0], [1, 2], [3, 4], [5]]
    assert len(fake.asked) == 2  # the carried records were not asked for again

    fake = FakeConsumer([(None, [message(i, small) for i in range(4)]),
                         (None, [message(9, small)])])  # fmt: skip
    reader = core(monkeypatch, fake)
    assert [m.offset() for m in reader.poll_batch(bounds).messages] == [0, 1]
    fake.callbacks["on_revoke"](fake, [TopicPartition("t", 0)])  # between two batches
    assert [m.offset() for m in reader.poll_batch(bounds).messages] == [9]  # carry dropped

    fake = FakeConsumer([(None, [message(i, small) for i in range(4)])])
    fake.seek = lambda tp: None  # type: ignore[attr-defined]
    reader = core(monkeypatch, fake)
    first = reader.poll_batch(bounds).messages
    reader.rewind_to(first)  # the fetch starts again at 0: nothing carried
    assert reader.poll_batch(BatchBounds(100, 0.1, max_bytes=20)).messages == []
