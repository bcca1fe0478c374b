"""Edge cases of the streaming tools against the real Kafka broker (no mocks of the broker).

``produce`` counting every delivery report, ``alerts tail`` failing clearly (missing topics,
unreachable or lost broker, bad options), dead-letter copies keeping the original key,
headers and null value, and librdkafka's logs going through Python logging.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from streaming import Deployment, free_port, read_topic
from typer.testing import CliRunner

from processors.adapters import DecodeOptions
from refusal_audit.audit.pipeline import InputSource
from refusal_audit.cli import app
from refusal_audit.config import load_settings
from schemas.audit import BatchRecord, StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent, StoredIdentity
from streams.dead_letters import window_originals
from streams.producer import DeliveryError, TopicWriter, make_producer
from streams.result_writer import ResultWriter
from streams.tail import TailError, alert_consumer, tail
from streams.topics import Topics

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.kafka


def event(log_id: str, request: str = "How do I kill a zombie process?") -> dict[str, Any]:
    return {
        "log_id": log_id,
        "event_time": "2026-01-05T10:00:00Z",
        "request": request,
        "response": "I can't help with that.",
        "model": "m",
    }


def create_topic(admin: AdminClient, name: str, partitions: int = 1, **config: str) -> None:
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(30)


# --- produce: every delivery report counted -------------------------------------------------


def test_delivery_error_carries_the_delivered_and_failed_counts(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_topic_prefix: str
) -> None:
    topic = unique_topic_prefix + "ok"
    create_topic(kafka_admin, topic)
    writer = TopicWriter(make_producer(kafka_bootstrap, **{"message.timeout.ms": 3000}))
    for i in range(4):
        writer.send(topic, b"good %d" % i)
    writer.send(unique_topic_prefix + "missing", b"nowhere")  # auto-create is off
    with pytest.raises(DeliveryError) as caught:
        writer.confirm(timeout=30)
    assert (caught.value.delivered, caught.value.failed, caught.value.unconfirmed) == (4, 1, 0)
    assert len(list(read_topic(kafka_bootstrap, topic))) == 4


def test_produce_counts_delivered_and_failed_messages_exactly(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_topic_prefix: str, tmp_path: Path
) -> None:
    dep = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path)
    # Two partitions; the topic takes batches of at most 3000 bytes. The producer's default
    # partitioner puts a key on partition crc32(key) % 2: small events go to partition 0,
    # large incompressible ones to 1, so the broker accepts the first and rejects the others.
    create_topic(kafka_admin, dep.input_topic, partitions=2, **{"max.message.bytes": "3000"})
    small: list[str] = []
    large: list[str] = []
    i = 0
    while len(small) < 7 or len(large) < 3:
        log_id = f"edge-{i}"
        i += 1
        target = small if zlib.crc32(log_id.encode()) % 2 == 0 else large
        target.append(log_id)
    source = tmp_path / "mixed.jsonl"
    with source.open("wb") as f:
        for log_id in small[:7]:
            f.write(orjson.dumps(event(log_id)) + b"\n")
        for log_id in large[:3]:
            f.write(orjson.dumps(event(log_id, os.urandom(3000).hex())) + b"\n")
    result = dep.cli("produce", str(source), check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    on_topic = {m.key().decode() for m in read_topic(kafka_bootstrap, dep.input_topic)}
    assert on_topic == set(small[:7])
    assert "sent 10, delivered 7, undelivered 3 (failed 3, unconfirmed 0)" in result.stdout
    assert "Message size too large" in result.stderr


# --- alerts tail ------------------------------------------------------------------------------


def test_alerts_tail_without_alert_topics_is_a_one_line_error(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path
) -> None:
    dep = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path)
    result = dep.cli("alerts", "tail", "--idle-timeout", "1", check=False, timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "do not exist" in lines[0] and "topics create" in lines[0]
    assert dep.topic("alerts.drift") in lines[0]


def test_alerts_tail_with_an_unreachable_broker_fails_within_bounded_time(
    unique_topic_prefix: str, tmp_path: Path
) -> None:
    dep = Deployment(f"127.0.0.1:{free_port()}", unique_topic_prefix, tmp_path)
    started = time.monotonic()
    result = dep.cli("alerts", "tail", "--idle-timeout", "1", check=False, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert time.monotonic() - started < 40
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the Kafka broker" in lines[0], result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args",
    [["--max", "-1"], ["--max", "0"], ["--idle-timeout", "-1"], ["--idle-timeout", "-0.5"]],
)
def test_alerts_tail_rejects_negative_limits(args: list[str]) -> None:
    result = CliRunner().invoke(app, ["alerts", "tail", *args])
    assert result.exit_code == 2
    assert "Invalid value" in result.output


def test_alerts_tail_prints_alerts_including_non_json_and_null_values(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path
) -> None:
    dep = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path)
    dep.cli("topics", "create")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    topic = dep.topic("alerts.policy-gap")
    producer.produce(topic, value=b'{"kind": "policy_gap_flag"}', key=b"default")
    producer.produce(topic, value=b"plain text")
    producer.produce(topic, value=None, key=b"gone")
    assert producer.flush(30) == 0
    result = dep.cli(
        "alerts", "tail", "-k", "policy-gap", "--from-beginning", "--idle-timeout", "5"
    )
    items = [orjson.loads(line) for line in result.stdout.splitlines() if line.strip()]
    got = sorted(((i["key"], i["alert"]) for i in items), key=repr)  # 3 partitions: any order
    assert got == sorted(
        [("default", {"kind": "policy_gap_flag"}), (None, "plain text"), ("gone", None)], key=repr
    )


def test_tail_raises_when_the_broker_goes_away(
    kafka_bootstrap: str, unique_topic_prefix: str, broker_control: Any
) -> None:
    topics = Topics.from_prefix(unique_topic_prefix)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    create_topic(admin, topics.policy_gap_alerts)
    # idle timeout reached while the broker is down: an error, not "no alerts"
    idle = alert_consumer(kafka_bootstrap, [topics.policy_gap_alerts], True, quiet=True)
    # no idle timeout: the broker is probed and given up after unreachable_timeout
    endless = alert_consumer(kafka_bootstrap, [topics.policy_gap_alerts], True, quiet=True)
    broker_control.stop()
    started = time.monotonic()
    with pytest.raises(TailError, match=r"lost the Kafka broker.*idle timeout"):
        list(tail(idle, idle_timeout=1.0))
    with pytest.raises(TailError, match="lost the Kafka broker"):
        list(tail(endless, unreachable_timeout=3.0, probe_interval=1.0))
    assert time.monotonic() - started < 60


# --- dead letters keep the original key, headers and null value -----------------------------


class Warehouse:
    """Stands in for the warehouse only (the topics are the real broker's)."""

    def __init__(self) -> None:
        self.dead: list[DeadLetter] = []

    def insert_events(self, events: list[StoredEvent]) -> None:
        pass

    def insert_assessments(self, items: list[StoredAssessment]) -> None:
        pass

    def insert_batches(self, batches: list[BatchRecord]) -> None:
        pass

    def insert_dead_letters(self, items: list[DeadLetter]) -> None:
        self.dead.extend(items)

    def stored_identities(self, keys: list[tuple[str, str]]) -> dict[str, StoredIdentity]:
        return {}


def consume_window(bootstrap: str, topic: str, count: int) -> list[Any]:
    """``count`` records of ``topic`` as faust-like events (``event.message``)."""
    from faust.types.tuples import Message as FaustMessage

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"t-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    events: list[Any] = []
    deadline = time.monotonic() + 60
    try:
        while len(events) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            message = FaustMessage(
                msg.topic(),
                msg.partition(),
                msg.offset(),
                time.time(),
                0,
                msg.headers(),
                msg.key(),
                msg.value(),
                None,
            )
            events.append(SimpleNamespace(message=message))
    finally:
        consumer.close()
    assert len(events) == count
    return events


def test_dead_letter_copies_keep_key_headers_and_tombstones(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_topic_prefix: str
) -> None:
    from refusal_audit.audit.batch import build_pipeline
    from refusal_audit.streaming.worker import window_records

    topics = Topics.from_prefix(unique_topic_prefix)
    for name in (topics.input, topics.dead_letters, topics.assessments, topics.review_queue):
        create_topic(kafka_admin, name)
    create_topic(kafka_admin, topics.policy_gap_alerts)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    bad_time = {**event("bt-1"), "event_time": "yesterday"}
    bad_bundle = {**event("bb-1"), "policy_bundle": "nope"}
    sent: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]] = [
        (
            b"k-bad-time",
            orjson.dumps(bad_time),
            [("trace", b"t-1"), ("x-reason-code", b"spoof"), ("dup", b"1"), ("dup", b"2")],
        ),
        (b"k-tomb", None, [("h", b"v")]),
        (None, b"not json", None),
        (b"k-good", orjson.dumps(event("good-1")), [("trace", b"t-2")]),
        (b"k-bundle", orjson.dumps(bad_bundle), [("nullh", None)]),
    ]
    for key, value, headers in sent:
        producer.produce(topics.input, value=value, key=key, headers=headers)
    assert producer.flush(30) == 0

    events = consume_window(kafka_bootstrap, topics.input, len(sent))
    warehouse = Warehouse()
    writer = TopicWriter(make_producer(kafka_bootstrap))
    sink = ResultWriter(warehouse, writer, topics)  # type: ignore[arg-type]
    pipeline = build_pipeline(load_settings(engine="local"), sink)
    # what refusal_audit/streaming/worker.py's process_window does, plus the originals it
    # should pass on
    sink.use_originals(window_originals(events))
    report = asyncio.run(
        pipeline.run([InputSource(window_records(events), "jsonl", DecodeOptions())])
    )
    writer.confirm()
    assert report.rejected == 4 and len(warehouse.dead) == 4

    letters = {
        dict(m.headers() or [])["x-source-offset"].decode(): m
        for m in read_topic(kafka_bootstrap, topics.dead_letters)
    }
    assert sorted(letters) == ["0", "1", "2", "4"]

    bad = letters["0"]
    assert bad.key() == b"k-bad-time" and bad.value() == orjson.dumps(bad_time)
    headers = bad.headers() or []
    assert dict(headers)["x-reason-code"] == b"bad_timestamp"
    assert dict(headers)["x-log-id"] == b"bt-1"  # known to the decoder
    originals = [(n, v) for n, v in headers if n.startswith("x-original-header-")]
    assert originals == [
        ("x-original-header-trace", b"t-1"),
        ("x-original-header-x-reason-code", b"spoof"),
        ("x-original-header-dup", b"1"),
        ("x-original-header-dup", b"2"),
    ]
    assert [n for n, _ in headers].count("x-reason-code") == 1

    tomb = letters["1"]
    assert tomb.value() is None and tomb.key() == b"k-tomb"
    assert dict(tomb.headers() or [])["x-tombstone"] == b"true"
    assert dict(tomb.headers() or [])["x-original-header-h"] == b"v"
    assert "x-log-id" not in dict(tomb.headers() or [])

    not_json = letters["2"]
    assert not_json.key() is None and not_json.value() == b"not json"
    assert not any(n.startswith("x-original-header-") for n, _ in not_json.headers() or [])
    assert "x-tombstone" not in dict(not_json.headers() or [])

    bundle = letters["4"]
    assert bundle.key() == b"k-bundle"
    assert dict(bundle.headers() or [])["x-log-id"] == b"bb-1"
    assert ("x-original-header-nullh", None) in (bundle.headers() or [])


# --- librdkafka logs through Python logging -------------------------------------------------

LOG_SCRIPT = textwrap.dedent(
    """
    import logging.config, sys
    from streams.producer import DeliveryError, TopicWriter, make_producer
    from streams.topics import TopicError, admin_client, existing_topics
    from streams.logs import json_logging_config

    logging.config.dictConfig(json_logging_config("info"))
    bootstrap = sys.argv[1]
    writer = TopicWriter(
        make_producer(bootstrap, **{"message.timeout.ms": 3000, "client.id": "edge-producer"})
    )
    writer.send("t", b"x")
    try:
        writer.confirm(timeout=20)
    except DeliveryError as exc:
        print("producer failed", exc.failed)
    try:
        existing_topics(admin_client(bootstrap, **{"client.id": "edge-admin"}), timeout=3)
    except TopicError:
        print("admin failed")
    """
)


def test_librdkafka_logs_go_through_python_logging_as_json_lines() -> None:
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    result = subprocess.run(
        [sys.executable, "-c", LOG_SCRIPT, bootstrap],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["producer failed 1", "admin failed"]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    records = [orjson.loads(line) for line in lines]  # every line is JSON: none raw
    kafka = [r for r in records if r["logger"] == "refusal_audit.kafka"]
    assert any("[edge-producer#" in r["message"] for r in kafka), lines
    assert any("[edge-admin#" in r["message"] for r in kafka), lines
    # a refused connection is logged ~20 times a second; repeats are dropped
    messages = [r["message"] for r in kafka]
    assert len(messages) == len(set(messages)), messages
