"""The test Kafka broker itself (tests/kafka_fixture.py, deploy/kafka/): a real single-node
KRaft broker that creates topics, takes idempotent acks=all writes with headers, serves
them to a consumer group whose committed offsets stick, and keeps all of it over a restart.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_fixture import BrokerControl, BrokerControlError

pytestmark = pytest.mark.kafka

PARTITIONS = 3


def create_topic(admin: AdminClient, name: str, partitions: int = PARTITIONS) -> None:
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1)], operation_timeout=30
    )
    futures[name].result(timeout=60)
    # Wait until the broker's metadata serves every partition with a leader.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topic = admin.list_topics(topic=name, timeout=10).topics.get(name)
        if (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise AssertionError(f"topic {name} has no leaders after 30 s")


def produce(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes, list[tuple[str, bytes]]]]
) -> list[Message]:
    """Write ``(key, value, headers)`` records with an idempotent acks=all producer; return
    the delivery reports (each checked for errors)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
        }
    )
    delivered: list[Message] = []
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append(msg)

    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery)
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} records not delivered within 30 s"
    assert not errors, errors
    assert len(delivered) == len(records)
    return delivered


def consume(consumer: Consumer, count: int, timeout_s: float = 60.0) -> list[Message]:
    messages: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(messages) < count and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=count - len(messages), timeout=1.0):
            if msg.error() is not None:
                raise KafkaException(msg.error())
            messages.append(msg)
    assert len(messages) == count, f"consumed {len(messages)} of {count} in {timeout_s:.0f} s"
    return messages


def make_consumer(bootstrap: str, group: str, topic: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    return consumer


def records_for(n: int, run: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [
        (
            f"key-{i % 5}".encode(),
            f'{{"i": {i}, "run": "{run}"}}'.encode(),
            [("event-type", b"refusal"), ("seq", str(i).encode()), ("run", run.encode())],
        )
        for i in range(n)
    ]


@pytest.fixture
def topic(kafka_admin: AdminClient, unique_topic_prefix: str) -> Iterator[str]:
    name = f"{unique_topic_prefix}events"
    create_topic(kafka_admin, name)
    yield name
    kafka_admin.delete_topics([name], operation_timeout=30)[name].result(timeout=60)


def test_create_topic(kafka_admin: AdminClient, topic: str) -> None:
    metadata = kafka_admin.list_topics(timeout=10)
    assert topic in metadata.topics
    assert len(metadata.topics[topic].partitions) == PARTITIONS
    assert list(metadata.brokers) == [1]  # one combined broker + controller, node.id=1


def test_topics_are_not_auto_created(kafka_bootstrap: str, unique_topic_prefix: str) -> None:
    """auto.create.topics.enable=false: a producer's metadata request for an unknown topic
    (which asks for auto-creation) leaves it unknown."""
    name = f"{unique_topic_prefix}missing"
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    topic = producer.list_topics(topic=name, timeout=10).topics[name]
    assert topic.error is not None
    assert topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert name not in producer.list_topics(timeout=10).topics


def test_idempotent_produce_headers_consume_commit(kafka_bootstrap: str, topic: str) -> None:
    run = uuid.uuid4().hex
    records = records_for(30, run)
    delivered = produce(kafka_bootstrap, topic, records)

    # Same key, same partition; offsets within a partition are dense from 0.
    by_partition: dict[int, list[int]] = {}
    for msg in delivered:
        by_partition.setdefault(msg.partition(), []).append(msg.offset())
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))

    group = f"g-{topic}"
    consumer = make_consumer(kafka_bootstrap, group, topic)
    try:
        messages = consume(consumer, len(records))
        seen = {
            (msg.key(), msg.value(), tuple(msg.headers() or ())): msg.partition()
            for msg in messages
        }
        assert set(seen) == {(k, v, tuple(h)) for k, v, h in records}
        for key in {k for k, _, _ in records}:
            assert len({p for (k, _, _), p in seen.items() if k == key}) == 1

        committed_now = consumer.commit(asynchronous=False)
        assert committed_now is not None
        assert all(tp.error is None for tp in committed_now)
        committed = consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
        )
        expected = {p: len(offsets) for p, offsets in by_partition.items()}
        assert {tp.partition: tp.offset for tp in committed if tp.offset >= 0} == expected
        for tp in committed:
            _, high = consumer.get_watermark_offsets(tp, timeout=10)
            assert tp.offset == high or (tp.offset < 0 and high == 0)
    finally:
        consumer.close()

    # A new member of the same group resumes after the commit: only new records arrive.
    extra = records_for(3, f"{run}-extra")
    produce(kafka_bootstrap, topic, extra)
    consumer = make_consumer(kafka_bootstrap, group, topic)
    try:
        resumed = consume(consumer, len(extra))
        assert sorted(m.value() for m in resumed) == sorted(v for _, v, _ in extra)
        assert consumer.consume(num_messages=10, timeout=2.0) == []
    finally:
        consumer.close()


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_restart_keeps_messages_and_offsets(
    kafka_bootstrap: str, topic: str, broker_control: BrokerControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = records_for(20, uuid.uuid4().hex)
    produce(kafka_bootstrap, topic, records)
    group = f"g-{topic}"
    consumer = make_consumer(kafka_bootstrap, group, topic)
    try:
        consume(consumer, 8)
        consumer.commit(asynchronous=False)
        before = consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
        )
    finally:
        consumer.close()

    # A terminal width in the environment must not hide the broker from the scripts (ps
    # truncated its command line to COLUMNS: kafka-down said "not running" and left it up).
    monkeypatch.setenv("COLUMNS", "80")
    broker_control.stop()
    assert broker_control.port is not None and not _port_open(broker_control.port)
    assert not broker_control.alive()
    broker_control.start()

    # Every message is still there for a fresh group...
    fresh = make_consumer(kafka_bootstrap, f"g-fresh-{topic}", topic)
    try:
        after_restart = consume(fresh, len(records))
    finally:
        fresh.close()
    assert sorted(m.value() for m in after_restart) == sorted(v for _, v, _ in records)
    assert all(dict(m.headers() or ())["event-type"] == b"refusal" for m in after_restart)

    # ...and the group's committed offsets survived too.
    consumer = make_consumer(kafka_bootstrap, group, topic)
    try:
        after = consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30
        )
        assert [(tp.partition, tp.offset) for tp in after] == [
            (tp.partition, tp.offset) for tp in before
        ]
        consumed_before = sum(max(tp.offset, 0) for tp in before)
        rest = consume(consumer, len(records) - consumed_before)
        assert len(rest) == len(records) - consumed_before
    finally:
        consumer.close()


def test_broker_control_refuses_an_external_broker() -> None:
    control = BrokerControl("kafka.example:9092", unmanageable="it is an external broker")
    for action in (control.stop, control.start, control.restart):
        with pytest.raises(BrokerControlError, match=r"cannot stop or start .*external broker"):
            action()
