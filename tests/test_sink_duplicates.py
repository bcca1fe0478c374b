"""The warehouse sink's duplicate-log-id rule against the real broker and embedded warehouse
(issue 14): real transactional workers audit two windows carrying the same log ids with other
content; the sink stores the first copy only, with its assessment, and a ``duplicate_log_id``
dead letter for each later copy, whether the copies reach it in one block or in blocks far
apart; a block redelivered after a crash, or everything re-read by a new sink group, changes
no query result. Also the broker helpers tests/test_sink.py shares."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from test_transactional_worker import _read

from refusal_audit.config import Settings
from refusal_audit.streaming.sink_rules import duplicate_reason, ms
from refusal_audit.streaming.transactional_worker import TransactionalWorker
from refusal_audit.streaming.warehouse_sink import WarehouseSink
from streams.blocks import Block, BlockLimits, BlockReader
from streams.dead_letters import kafka_location
from streams.topics import Topics, admin_client, create_topics, topic_specs

pytestmark = pytest.mark.kafka

EXAMPLE_LOG = Path(__file__).resolve().parents[1] / "examples" / "refusal_log.jsonl"


def example_events() -> list[dict[str, Any]]:
    """The example log's 200 events (decoded JSON)."""
    return [orjson.loads(x) for x in EXAMPLE_LOG.read_bytes().splitlines() if x.strip()]


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Produce ``values`` to ``topic`` and wait for them."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=str(i).encode())
    assert producer.flush(30) == 0


def read(bootstrap: str, topic: str, idle: float = 3.0) -> list[Message]:
    """Every committed message of ``topic`` (read until nothing came for ``idle`` s)."""
    return list(_read(bootstrap, topic, "read_committed", idle))


def result_topics(topics: Topics) -> list[str]:
    """The topics a sink reads."""
    return [topics.stored_events, topics.assessments, topics.audit_batches, topics.dead_letters]


def ends(bootstrap: str, topics: Topics) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the offset after its last committed message, over the topics a
    sink reads (the offsets a sink that stored everything has committed)."""
    out: dict[tuple[str, int], int] = {}
    for topic in result_topics(topics):
        for msg in read(bootstrap, topic):
            key = (topic, msg.partition() or 0)
            out[key] = max(out.get(key, 0), (msg.offset() or 0) + 1)
    return out


def committed(bootstrap: str, group: str, partitions: list[tuple[str, int]]) -> dict[Any, int]:
    """(topic, partition) -> the offset ``group`` committed (negative: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        done = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=30)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in done}


def worker_settings(bootstrap: str, prefix: str, tmp: Path) -> Settings:
    """A transactional worker's settings (local engine, windows of up to 100 records)."""
    return Settings(
        kafka_bootstrap_servers=bootstrap, kafka_topic_prefix=prefix,
        kafka_consumer_group=f"{prefix}workers", kafka_group_instance_id="w",
        worker_take_max=100, worker_take_within_seconds=0.5, data_dir=tmp / "w",
        engine="local",
    )  # fmt: skip


def drain_worker(worker: TransactionalWorker, records: int, timeout: float = 180.0) -> None:
    """Run ``worker`` until it committed ``records`` input records in all."""
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while worker.stats.records < records and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    thread.join(60)
    assert worker.stats.records == records


def make_sink(
    bootstrap: str, topics: Topics, store: Any, group: str, max_rows: int = 100_000, **kw: Any
) -> WarehouseSink:
    """A sink in consumer group ``group`` (``kw``: the sink's retry settings)."""
    reader = BlockReader(bootstrap, group, result_topics(topics),
                         BlockLimits(max_rows=max_rows, max_wait=1.0))  # fmt: skip
    return WarehouseSink(store, reader, topics, **kw)


def drain_sink(
    sink: WarehouseSink,
    rows: int,
    after_store: Callable[[Block], None] | None = None,
    timeout: float = 180.0,
) -> None:
    """Run ``sink`` until it stored and committed blocks of ``rows`` records in all."""
    seen = [0]

    def counted(block: Block) -> None:
        if after_store is not None:
            after_store(block)
        seen[0] += block.rows

    stop = threading.Event()
    thread = threading.Thread(target=sink.run, args=(stop, counted), daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while seen[0] < rows and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    thread.join(60)
    sink.close()
    assert seen[0] == rows


@pytest.fixture
def deployment(kafka_bootstrap: str, unique_topic_prefix: str) -> Topics:
    admin = admin_client(kafka_bootstrap)
    create_topics(admin, topic_specs(unique_topic_prefix, 3, 1))
    return Topics.from_prefix(unique_topic_prefix)


class TwoWindows:
    """Window 1: the example log. Window 2, audited after it: a copy of ``edited`` with
    another response, a copy of ``moved`` with another model (both refusals, both audited
    again), an identical copy of ``resent``, and 5 new events."""

    def __init__(self, bootstrap: str, prefix: str, topics: Topics, tmp: Path) -> None:
        self.bootstrap, self.topics = bootstrap, topics
        self.first = example_events()
        self.worker = TransactionalWorker.start(worker_settings(bootstrap, prefix, tmp))

    def window_one(self) -> None:
        produce(self.bootstrap, self.topics.input, [orjson.dumps(e) for e in self.first])
        drain_worker(self.worker, len(self.first))
        assessed = {orjson.loads(m.value())["log_id"]
                    for m in read(self.bootstrap, self.topics.assessments)}  # fmt: skip
        self.refusals = sorted(assessed)
        self.edited, self.moved, self.resent = self.refusals[:3]
        by_id = {e["log_id"]: e for e in self.first}
        self.originals = {i: by_id[i] for i in (self.edited, self.moved)}

    def window_two(self) -> None:
        by_id = {e["log_id"]: e for e in self.first}
        edited = by_id[self.edited]
        second = [
            {**edited, "response": edited["response"] + " I won't help with this."},
            {**by_id[self.moved], "model": "acme-chat-small-2025-06"},
            by_id[self.resent],
            *({**e, "log_id": f"{e['log_id']}-new"} for e in self.first[:5]),
        ]
        # the refused copies' input values: their dead letters describe these records
        self.refused = {self.edited: orjson.dumps(second[0]), self.moved: orjson.dumps(second[1])}
        produce(self.bootstrap, self.topics.input, [orjson.dumps(e) for e in second])
        drain_worker(self.worker, len(self.first) + len(second))
        self.worker.close()
        assessed: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for msg in read(self.bootstrap, self.topics.assessments):  # a log id: one partition
            item = orjson.loads(msg.value())
            assessed[item["log_id"]].append(item)
        # both windows audited every copy: the topics carry both copies' assessments
        assert all(len(assessed[i]) == 2 for i in (self.edited, self.moved, self.resent))
        self.first_assessment = {i: assessed[i][0] for i in (self.edited, self.moved)}
        self.events = len({e["log_id"] for e in [*self.first, *second]})

    def messages(self) -> int:
        """Committed messages on the topics a sink reads."""
        return sum(len(read(self.bootstrap, t)) for t in result_topics(self.topics))

    def check(self, wh: Any) -> dict[str, Any]:
        """Assert the rule's outcome; return the warehouse's state (what queries see)."""
        state = snapshot(wh)
        assert len(state["events"]) == self.events
        events = {r["log_id"]: r for r in state["events"]}
        assert events[self.edited]["response"] == self.originals[self.edited]["response"]
        assert events[self.moved]["model"] == self.originals[self.moved]["model"]
        duplicates = [d for d in state["dead_letters"] if d["reason_code"] == "duplicate_log_id"]
        assert sorted(d["log_id"] for d in duplicates) == sorted([self.edited, self.moved])
        assert all(d["reason"] == duplicate_reason(d["log_id"]) and d["stage"] == "validate"
                   for d in duplicates)  # fmt: skip
        # each letter describes the refused copy's input record, as the dead-letter docs say:
        # the input topic, where the record is, its whole value's length and SHA-256
        where = {m.value(): kafka_location(m.partition() or 0, m.offset() or 0)
                 for m in read(self.bootstrap, self.topics.input)}  # fmt: skip
        for d in duplicates:
            value = self.refused[d["log_id"]]
            assert (d["source"], d["location"]) == (self.topics.input, where[value])
            assert d["raw_length"] == len(value)
            assert d["raw_sha256"] == hashlib.sha256(value).hexdigest()
        current = {r["log_id"]: r for r in state["current"]}
        assert len(current) == len(state["current"])  # one current assessment per log id
        for log_id, first in self.first_assessment.items():  # the first copy's, only
            audited = datetime.fromisoformat(first["audited_at"].replace("Z", "+00:00"))
            assert ms(current[log_id]["audited_at"]) == ms(audited)
            assert current[log_id]["model"] == self.originals[log_id]["model"]
        return state


def snapshot(wh: Any) -> dict[str, Any]:
    """What queries see: current events, current assessments and dead letters."""
    return {
        "events": wh.select("SELECT log_id, response, model, content_fingerprint FROM "
                            "{db:Identifier}.refusal_events FINAL ORDER BY log_id"),
        "current": wh.select("SELECT log_id, audited_at, category, model FROM "
                             "{db:Identifier}.current_assessments ORDER BY log_id"),
        "dead_letters": wh.select("SELECT dead_letter_id, stage, reason_code, reason, source, "
                                  "location, raw_length, raw_sha256, log_id, created_at FROM "
                                  "{db:Identifier}.dead_letters FINAL ORDER BY dead_letter_id"),
    }  # fmt: skip


def test_a_later_windows_copy_is_refused_against_the_warehouse(
    kafka_bootstrap: str, unique_topic_prefix: str, deployment: Topics, tmp_path: Path,
    warehouse: Any,
) -> None:  # fmt: skip
    run = TwoWindows(kafka_bootstrap, unique_topic_prefix, deployment, tmp_path)
    group = f"{unique_topic_prefix}sink"
    run.window_one()
    stored = run.messages()
    drain_sink(make_sink(kafka_bootstrap, deployment, warehouse, group), stored)
    run.window_two()
    sink = make_sink(kafka_bootstrap, deployment, warehouse, group)
    drain_sink(sink, run.messages() - stored)  # window 2 in blocks of its own
    assert (sink.stats.duplicates, sink.stats.dropped_assessments) == (2, 2)
    state = run.check(warehouse)
    # a new sink group re-reads everything, both copies in a block: no query result changes
    again = make_sink(kafka_bootstrap, deployment, warehouse, f"{group}-2")
    drain_sink(again, run.messages())
    assert again.stats.duplicates == 2 and again.stats.dropped_assessments == 2
    assert snapshot(warehouse) == state


def test_copies_in_one_block_and_a_redelivery_after_a_crash(
    kafka_bootstrap: str, unique_topic_prefix: str, deployment: Topics, tmp_path: Path,
    warehouse: Any,
) -> None:  # fmt: skip
    run = TwoWindows(kafka_bootstrap, unique_topic_prefix, deployment, tmp_path)
    run.window_one()
    run.window_two()
    group, total = f"{unique_topic_prefix}sink", run.messages()
    stored: list[int] = []

    def crash_at_the_end(block: Block) -> None:  # every insert done, the offsets not committed
        stored.append(block.rows)
        if sum(stored) == total:
            raise RuntimeError("sink killed between insert and commit")

    sink = make_sink(kafka_bootstrap, deployment, warehouse, group)
    stop = threading.Event()
    timer = threading.Timer(180, stop.set)  # a sink that never gets there: DID NOT RAISE
    timer.daemon = True
    timer.start()
    with pytest.raises(RuntimeError, match="between insert and commit"):
        sink.run(stop, after_store=crash_at_the_end)
    timer.cancel()
    sink.close()
    assert sink.stats.duplicates == 2 and sink.stats.dropped_assessments == 2
    first = run.check(warehouse)
    # the last block is redelivered: its first copies are "already stored" with their own
    # content, which makes them no dead letters; later copies are refused again, the same rows
    again = make_sink(kafka_bootstrap, deployment, warehouse, group)
    drain_sink(again, stored[-1])
    assert snapshot(warehouse) == first
    last = ends(kafka_bootstrap, deployment)
    assert committed(kafka_bootstrap, group, list(last)) == last
