"""The transactional stream's producer recovery and consumer lag (issue 23 A, C), against the
real broker: a transaction call past its allowance abandons its producer and a renewed one
fences it; the lag is the high watermark minus the group's committed offset (as
``kafka-consumer-groups`` reports it), whatever this process has read but not committed."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from scaleout_harness import committed_offsets, open_offset_commit

from streams import txn_producer
from streams.transactional import OutputMessage, StreamConfig, TransactionalStream
from streams.txn_producer import ProducerStuck, TxnProducer

pytestmark = pytest.mark.kafka


def _topics(bootstrap: str, *names: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        future.result(30)


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=b"v%d" % i)
    assert producer.flush(30) == 0


def test_a_stuck_call_abandons_the_producer_and_the_renewed_one_fences_it(
    kafka_bootstrap: str, unique_topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = f"{unique_topic_prefix}out"
    _topics(kafka_bootstrap, out)
    monkeypatch.setattr(txn_producer, "STUCK_GRACE_SECONDS", 0.2)
    conf = {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{unique_topic_prefix}t"}
    txn = TxnProducer(conf, 30.0)
    old = txn.producer
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(ProducerStuck):  # stands for send_offsets_to_transaction hanging
        txn.call("send_offsets_to_transaction", lambda p: release.wait(30), 0.1)
    assert time.monotonic() - started < 5 and txn.stuck() == 1
    txn.renew("test")
    assert txn.producer is not old and txn.renewals == 1
    release.set()
    old.begin_transaction()
    old.produce(out, value=b"zombie")
    with pytest.raises(KafkaException):  # fenced by the new producer's epoch
        old.commit_transaction(10)
    txn.producer.begin_transaction()
    txn.producer.produce(out, value=b"live")
    txn.producer.commit_transaction(10)


def test_lag_is_measured_against_the_groups_committed_offsets(
    kafka_bootstrap: str, unique_topic_prefix: str
) -> None:
    source, out = f"{unique_topic_prefix}in", f"{unique_topic_prefix}out"
    _topics(kafka_bootstrap, source, out)
    _produce(kafka_bootstrap, source, 40)
    group = f"{unique_topic_prefix}g"
    parts = [(source, 0), (source, 1)]

    def stream(name: str) -> TransactionalStream:
        # a dynamic member: it leaves the group on close, the next one is assigned at once
        cfg = StreamConfig(kafka_bootstrap, group, [source], f"{group}.{name}", take_max=15,
                           take_within=5.0)  # fmt: skip
        return TransactionalStream(cfg)

    def group_lag(s: TransactionalStream) -> dict[tuple[str, int], int]:
        committed = committed_offsets(kafka_bootstrap, group, parts)
        ends = {tp: s.consumer.get_watermark_offsets(TopicPartition(*tp), 10) for tp in parts}
        return {tp: ends[tp][1] - max(committed[tp], ends[tp][0]) for tp in parts}

    first = stream("a")
    try:
        window = first.next_window()
        while window is None:
            window = first.next_window()
        assert len(window) == 15  # read, not committed: still lag
        assert first.lag() == group_lag(first) and sum(first.lag().values()) == 40
        first.commit(window, [OutputMessage(out, b"o")])
        assert first.lag() == group_lag(first) and sum(first.lag().values()) == 25
    finally:
        first.close()
    # a restart (a new member; what it read so far is not committed): the group's offsets
    second = stream("b")
    try:
        deadline = time.monotonic() + 60
        while len(second.assigned) < 2 and time.monotonic() < deadline:
            second.next_window(until=lambda: len(second.assigned) == 2)
        assert second.lag() == group_lag(second) and sum(second.lag().values()) == 25
    finally:
        second.close()


class _CommittedTimesOut:
    """A consumer whose committed-offset reads time out (as after a session expired in a
    broker outage); everything else is the real consumer's."""

    def __init__(self, consumer: object) -> None:
        self._consumer = consumer

    def committed(self, *args: object, **kwargs: object) -> None:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get committed offsets"))

    def __getattr__(self, name: str) -> object:
        return getattr(self._consumer, name)


def test_a_consumer_that_cannot_rewind_is_renewed_and_reads_from_the_commits(
    kafka_bootstrap: str, unique_topic_prefix: str
) -> None:
    source, out = f"{unique_topic_prefix}in", f"{unique_topic_prefix}out"
    _topics(kafka_bootstrap, source, out, partitions=1)
    _produce(kafka_bootstrap, source, 20)
    group = f"{unique_topic_prefix}g"
    cfg = StreamConfig(kafka_bootstrap, group, [source], f"{group}.a", take_max=5,
                       take_within=5.0, recovery_seconds=20.0)  # fmt: skip
    stream = TransactionalStream(cfg)
    try:
        first = stream.next_window()
        while first is None:
            first = stream.next_window()
        stream.commit(first, [OutputMessage(out, b"o")])
        second = stream.next_window()  # read, then its transaction fails
        while second is None:
            second = stream.next_window()
        stream.consumer = _CommittedTimesOut(stream.consumer)  # type: ignore[assignment]
        started = time.monotonic()
        stream.recover("test: the committed offsets cannot be read")
        assert time.monotonic() - started < 15  # no retries until recovery_seconds
        assert stream.consumer_renewals == 1
        again = stream.next_window()
        deadline = time.monotonic() + 60
        while again is None and time.monotonic() < deadline:
            again = stream.next_window()
        assert again is not None
        # the renewed consumer starts at the group's commit: the failed window again
        assert [r.offset() for r in again.records] == [r.offset() for r in second.records]
    finally:
        stream.close()


def test_a_pending_transactional_offset_commit_makes_the_lag_unknown_not_zero(
    kafka_bootstrap: str, unique_topic_prefix: str
) -> None:
    """A transactional offset commit left open on the group (another producer's transaction,
    not committed and not aborted: what a producer abandoned mid-call leaves behind) makes
    the broker refuse the group's committed offsets (UNSTABLE_OFFSET_COMMIT). The stream
    reports those partitions as unreadable, with since when, instead of leaving them out of
    a lag that then reads as nothing behind; once the transaction is aborted they are read
    again and the mark clears."""
    source = f"{unique_topic_prefix}in"
    _topics(kafka_bootstrap, source, partitions=1)
    _produce(kafka_bootstrap, source, 10)
    group = f"{unique_topic_prefix}g"
    zombie = open_offset_commit(kafka_bootstrap, group, source, 0, 5, f"{group}.zombie")
    cfg = StreamConfig(kafka_bootstrap, group, [source], f"{group}.a", take_max=5,
                       take_within=2.0)  # fmt: skip
    stream = TransactionalStream(cfg)
    try:
        deadline = time.monotonic() + 60
        while not stream.assigned and time.monotonic() < deadline:
            stream.next_window(until=lambda: bool(stream.assigned))
        assert stream.assigned == {(source, 0)}
        assert stream.lag(timeout=3.0) == {}  # the group's offset cannot be read ...
        assert stream.offsets_unreadable == ((source, 0),)  # ... and the stream says so
        since = stream.offsets_unreadable_since
        assert since is not None
        stream.lag(timeout=1.0)
        assert stream.offsets_unreadable_since == since  # still the first time it was seen
        zombie.abort_transaction(30)
        deadline = time.monotonic() + 60
        lag = stream.lag(timeout=3.0)
        while not lag and time.monotonic() < deadline:
            lag = stream.lag(timeout=3.0)
        assert lag == {(source, 0): 10}  # the aborted commit never counted: nothing committed
        assert stream.offsets_unreadable == () and stream.offsets_unreadable_since is None
    finally:
        stream.close()
