"""The transactional worker against the real broker (issue 14): windows in, every output and
the window's offsets in one transaction, exactly once for ``read_committed`` readers."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from refusal_audit.config import Settings
from refusal_audit.streaming.transactional_worker import TransactionalWorker
from streams.dead_letters import dead_letter_from_message
from streams.topics import Topics, admin_client, create_topics, topic_specs
from streams.transactional import Window

pytestmark = pytest.mark.kafka

EXAMPLE_LOG = Path(__file__).resolve().parents[1] / "examples" / "refusal_log.jsonl"


def _events(copies: int) -> list[dict[str, Any]]:
    lines = [orjson.loads(x) for x in EXAMPLE_LOG.read_bytes().splitlines() if x.strip()]
    return [{**e, "log_id": f"{e['log_id']}-{c}"} for c in range(copies) for e in lines]


def _settings(bootstrap: str, prefix: str, tmp: Path, name: str) -> Settings:
    return Settings(
        kafka_bootstrap_servers=bootstrap, kafka_topic_prefix=prefix,
        kafka_consumer_group=f"{prefix}workers", kafka_group_instance_id=name,
        worker_take_max=100, worker_take_within_seconds=0.5, data_dir=tmp / name,
        engine="local",
    )  # fmt: skip


def _produce(bootstrap: str, topic: str, values: list[bytes | None]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=str(i).encode())
    assert producer.flush(30) == 0


def _read(bootstrap: str, topic: str, isolation: str, idle: float = 3.0) -> list[Any]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"r-{time.monotonic_ns()}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "isolation.level": isolation,
    })  # fmt: skip
    consumer.subscribe([topic])
    out: list[Any] = []
    last = start = time.monotonic()
    try:
        while time.monotonic() - last < idle and time.monotonic() - start < 120:
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(str(err))
                if err is None:
                    out.append(msg)
                    last = time.monotonic()
            if not consumer.assignment():
                last = time.monotonic()
    finally:
        consumer.close()
    return out


@pytest.fixture
def deployment(kafka_bootstrap: str, unique_topic_prefix: str) -> Topics:
    admin = admin_client(kafka_bootstrap)
    create_topics(admin, topic_specs(unique_topic_prefix, 3, 1))
    return Topics.from_prefix(unique_topic_prefix)


def _drain(workers: list[TransactionalWorker], until: Any, timeout: float = 180.0) -> None:
    stop = threading.Event()
    threads = [threading.Thread(target=w.run, args=(stop,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(60)


def test_an_aborted_window_is_invisible_and_redone(
    kafka_bootstrap: str, unique_topic_prefix: str, deployment: Topics, tmp_path: Path
) -> None:
    events = _events(3)  # 600 events
    bad = [b"{not json", None, b'{"log_id": "x"}']
    _produce(kafka_bootstrap, deployment.input,
             [orjson.dumps(e) for e in events] + bad)  # fmt: skip
    worker = TransactionalWorker.start(
        _settings(kafka_bootstrap, unique_topic_prefix, tmp_path, "w1")
    )
    faults = {"left": 2}

    def fault(window: Window) -> None:  # the 2nd and 3rd windows fail just before commit
        if worker.stats.windows >= 1 and faults["left"] > 0:
            faults["left"] -= 1
            raise RuntimeError("injected before commit")

    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop, fault), daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while worker.stats.records < len(events) + len(bad) and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    thread.join(60)
    worker.close()
    assert worker.stats.records == len(events) + len(bad)
    assert worker.stats.aborted >= 2  # the two injected faults (librdkafka may add one)

    committed = _read(kafka_bootstrap, deployment.stored_events, "read_committed")
    everything = _read(kafka_bootstrap, deployment.stored_events, "read_uncommitted")
    ids = Counter(m.key() for m in committed)
    assert len(ids) == len(events) and set(ids.values()) == {1}  # each event exactly once
    assert len(everything) > len(committed)  # the aborted windows' copies exist, invisible
    assessed = _read(kafka_bootstrap, deployment.assessments, "read_committed")
    assessments = Counter(m.key() for m in assessed)
    refusals = {orjson.loads(m.value())["event"]["log_id"].encode() for m in committed
                if orjson.loads(m.value())["is_refusal"]}  # fmt: skip
    assert set(assessments) == refusals and set(assessments.values()) == {1}
    dead = _read(kafka_bootstrap, deployment.dead_letters, "read_committed")
    letters = [dead_letter_from_message(m.value(), m.headers()) for m in dead]
    assert sorted(d.reason_code for d in letters) == sorted(["not_json", "tombstone",
                                                              "missing_field"])  # fmt: skip
    batches = _read(kafka_bootstrap, deployment.audit_batches, "read_committed")
    assert sum(len(orjson.loads(m.value())["log_ids"]) for m in batches) == len(refusals)


def test_workers_in_one_group_share_the_input_exactly_once(
    kafka_bootstrap: str, unique_topic_prefix: str, deployment: Topics, tmp_path: Path
) -> None:
    events = _events(6)  # 1,200 events
    _produce(kafka_bootstrap, deployment.input, [orjson.dumps(e) for e in events])
    workers = [
        TransactionalWorker.start(_settings(kafka_bootstrap, unique_topic_prefix, tmp_path, n))
        for n in ("a", "b")
    ]
    stop = threading.Event()
    threads = [threading.Thread(target=w.run, args=(stop,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    time.sleep(3)  # a third worker joins mid-drain: a rebalance
    late = TransactionalWorker.start(_settings(kafka_bootstrap, unique_topic_prefix, tmp_path, "c"))
    workers.append(late)
    threads.append(threading.Thread(target=late.run, args=(stop,), daemon=True))
    threads[-1].start()
    deadline = time.monotonic() + 180
    while sum(w.stats.records for w in workers) < len(events) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(2)
    stop.set()
    for t in threads:
        t.join(60)
    for w in workers:
        w.close()
    stored = _read(kafka_bootstrap, deployment.stored_events, "read_committed")
    committed = Counter(m.key() for m in stored)
    assert len(committed) == len(events) and set(committed.values()) == {1}
    assert sum(w.stats.records for w in workers) >= len(events)


def _sink(bootstrap: str, topics: Topics, store: Any, group: str) -> Any:
    from refusal_audit.streaming.warehouse_sink import WarehouseSink
    from streams.blocks import BlockLimits, BlockReader

    names = [topics.stored_events, topics.assessments, topics.audit_batches, topics.dead_letters]
    reader = BlockReader(bootstrap, group, names, BlockLimits(max_rows=400, max_wait=1.0))
    return WarehouseSink(store, reader, topics)


def test_the_sink_loads_committed_results_once(
    kafka_bootstrap: str,
    unique_topic_prefix: str,
    deployment: Topics,
    tmp_path: Path,
    warehouse: Any,
) -> None:
    events = _events(2)
    bad = [b"{not json", None]
    _produce(kafka_bootstrap, deployment.input, [orjson.dumps(e) for e in events] + bad)
    worker = TransactionalWorker.start(
        _settings(kafka_bootstrap, unique_topic_prefix, tmp_path, "w")
    )
    _drain([worker], lambda: worker.stats.records >= len(events) + len(bad))
    worker.close()

    def loaded() -> tuple[int, int, int, int]:
        return (
            warehouse.count_events(), len(warehouse.current_assessments()),
            warehouse.count_batches(), len(warehouse.dead_letters(limit=1000)),
        )  # fmt: skip

    crashed = {"once": False}

    def crash_once(block: Any) -> None:  # stored but not committed: redelivered
        if not crashed["once"]:
            crashed["once"] = True
            raise RuntimeError("sink killed between insert and commit")

    sink = _sink(kafka_bootstrap, deployment, warehouse, f"{unique_topic_prefix}sink")
    with pytest.raises(RuntimeError, match="between insert and commit"):
        sink.run(threading.Event(), after_store=crash_once)
    sink.close()
    sink = _sink(kafka_bootstrap, deployment, warehouse, f"{unique_topic_prefix}sink")
    stop = threading.Event()
    thread = threading.Thread(target=sink.run, args=(stop,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 90
    while loaded()[0] < len(events) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3)
    stop.set()
    thread.join(30)
    sink.close()
    first = loaded()
    refusals = sum(1 for r in _read(kafka_bootstrap, deployment.assessments, "read_committed"))
    assert first[0] == len(events) and first[1] == refusals and first[3] == len(bad)
    assert first[2] > 0
    # a second sink group re-reads everything: the query results do not change
    again = _sink(kafka_bootstrap, deployment, warehouse, f"{unique_topic_prefix}sink-2")
    stop = threading.Event()
    thread = threading.Thread(target=again.run, args=(stop,), daemon=True)
    thread.start()
    time.sleep(8)
    stop.set()
    thread.join(30)
    again.close()
    assert again.stats.blocks > 0 and loaded() == first
    assert set(warehouse.assessment_counts_per_log_id().values()) == {1}
