"""The warehouse sink: its detector schedule; its backoff and retries when the warehouse
fails (a stub store, then the real broker and embedded warehouse with failures injected into
the store's calls). The loop itself: tests/test_transactional_worker.py; the duplicate-log-id
rule: tests/test_sink_duplicates.py and tests/test_sink_rules.py."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from test_sink_duplicates import (
    committed,
    deployment,
    drain_sink,
    drain_worker,
    ends,
    example_events,
    make_sink,
    produce,
    read,
    result_topics,
    worker_settings,
)

from refusal_audit.streaming.transactional_worker import TransactionalWorker
from refusal_audit.streaming.warehouse_sink import WarehouseSink
from streams.blocks import Block
from streams.topics import Topics
from warehouse.client import WarehouseError

__all__ = ["deployment"]  # the fixture, shared


def test_detector_passes_follow_the_interval_and_a_failure_is_not_fatal() -> None:
    calls: list[datetime] = []
    now = [0.0]

    def detectors(at: datetime) -> None:
        calls.append(at)
        if len(calls) == 3:
            raise RuntimeError("warehouse briefly unavailable")

    sink = WarehouseSink(cast(Any, None), cast(Any, None), cast(Any, None), detectors, 10.0)
    for t in (0.0, 5.0, 9.9, 10.0, 15.0, 20.5, 31.0):
        now[0] = t
        sink.maybe_detect(lambda: now[0])
    assert len(calls) == 4  # at 0, 10, 20.5 (fails) and 31
    assert sink.stats.detector_passes == 3 and sink.stats.detector_failures == 1
    idle = WarehouseSink(cast(Any, None), cast(Any, None), cast(Any, None))
    idle.maybe_detect()  # no detectors configured: nothing happens
    assert idle.stats.detector_passes == 0


# ---- a failing warehouse: backoff and retries ---------------------------------------------


class Failing:
    """A store whose events' insert fails ``failures`` times (transient: from a
    ``ConnectionError``), then succeeds; ``on_call(n)`` runs before the n-th call."""

    def __init__(
        self, failures: int, transient: bool = True, on_call: Callable[[int], None] | None = None
    ) -> None:
        self.failures, self.transient, self.on_call, self.calls = failures, transient, on_call, 0

    def insert_events(self, rows: Any, token: str | None = None) -> None:
        self.calls += 1
        if self.on_call is not None:
            self.on_call(self.calls)
        if self.calls <= self.failures:
            cause = ConnectionError("connection refused") if self.transient else ValueError("bad")
            raise WarehouseError(f"insert failed ({self.calls})") from cause

    def insert_built(self, table: str, rows: Any, token: str | None = None) -> None:
        """The sink's columnar inserts (``Warehouse.insert_built``): the events' fail."""
        if table == "refusal_events":
            self.insert_events(rows, token)

    def insert_dead_letters(self, rows: Any, token: str | None = None) -> None: ...


def _retrying_sink(store: Failing, give_up_after: float | None) -> WarehouseSink:
    topics = Topics.from_prefix("t.")
    return WarehouseSink(cast(Any, store), cast(Any, None), topics, retry_wait=0.001,
                         retry_wait_max=0.002, give_up_after=give_up_after)  # fmt: skip


def test_transient_failures_are_retried_without_a_give_up() -> None:
    store = Failing(failures=6)
    sink = _retrying_sink(store, give_up_after=0.0)  # bounds non-transient failures only
    assert sink.store_retrying(Block(), threading.Event())
    assert store.calls == 7 and sink.stats.retries == 6


def test_other_failures_are_retried_until_the_give_up() -> None:
    store = Failing(failures=3, transient=False)
    sink = _retrying_sink(store, give_up_after=None)  # None: no give-up
    assert sink.store_retrying(Block(), threading.Event())
    assert store.calls == 4 and sink.stats.retries == 3
    store = Failing(failures=3, transient=False)
    sink = _retrying_sink(store, give_up_after=0.0)
    with pytest.raises(WarehouseError, match=r"insert failed \(1\)"):
        sink.store_retrying(Block(), threading.Event())
    assert store.calls == 1


class OneBlock:
    """A reader with one block to give; records what is committed."""

    def __init__(self) -> None:
        self.blocks, self.committed = [Block()], list[Block]()

    def next_block(self, stop: threading.Event) -> Block | None:
        return self.blocks.pop() if self.blocks else None

    def commit(self, block: Block) -> None:
        self.committed.append(block)


def test_a_stop_ends_the_backoff_and_the_block_is_not_committed() -> None:
    stop = threading.Event()
    store = Failing(failures=1000, on_call=lambda n: stop.set() if n == 3 else None)
    reader = OneBlock()
    sink = WarehouseSink(cast(Any, store), cast(Any, reader), Topics.from_prefix("t."),
                         retry_wait=0.001, retry_wait_max=0.002)  # fmt: skip
    stats = sink.run(stop)
    assert store.calls == 3 and reader.committed == [] and stats.blocks == 0


@pytest.mark.kafka
def test_a_failing_warehouse_loses_and_duplicates_nothing(
    kafka_bootstrap: str, unique_topic_prefix: str, deployment: Topics, tmp_path: Path,
    warehouse: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    events = example_events()
    bad = [b"{not json", b'{"log_id": "x"}']
    produce(kafka_bootstrap, deployment.input, [orjson.dumps(e) for e in events] + bad)
    worker = TransactionalWorker.start(worker_settings(kafka_bootstrap, unique_topic_prefix,
                                                       tmp_path))  # fmt: skip
    drain_worker(worker, len(events) + len(bad))
    worker.close()
    last = ends(kafka_bootstrap, deployment)
    total = sum(len(read(kafka_bootstrap, t)) for t in result_topics(deployment))
    group = f"{unique_topic_prefix}sink"
    names = ("first_fingerprints", "insert_built", "insert_dead_letters")
    real = {name: getattr(warehouse, name) for name in names}
    # the sink inserts the events and the assessments with Warehouse.insert_built (one
    # columnar insert per table): their failures are injected there, per table
    tables = {"refusal_events": "insert_events", "assessments": "insert_assessments"}
    injected: dict[str, tuple[list[int], bool, bool]] = {}  # name -> [left], transient, after

    def call(method: str, *args: Any, **kwargs: Any) -> Any:
        name = tables.get(args[0], method) if method == "insert_built" else method
        left, transient, after = injected.get(name, ([0], True, False))
        if left[0] > 0 and after:  # the insert is done, its acknowledgement lost
            real[method](*args, **kwargs)
        if left[0] > 0:
            left[0] -= 1
            cause = ConnectionError("ClickHouse down") if transient else ValueError("bad")
            raise WarehouseError(f"injected {name} failure") from cause
        return real[method](*args, **kwargs)

    def failing(name: str, times: int, transient: bool = True, after: bool = False) -> None:
        injected[name] = ([times], transient, after)
        method = "insert_built" if name in tables.values() else name
        monkeypatch.setattr(warehouse, method, functools.partial(call, method))

    # 1. the assessments insert fails for good (not transient): the sink gives up, after
    # the events insert of the same block succeeded, and commits nothing (give_up_after
    # leaves room for a retry even when one attempt is slow on a loaded machine)
    failing("insert_assessments", 10**6, transient=False)
    sink = make_sink(kafka_bootstrap, deployment, warehouse, group, max_rows=150,
                     retry_wait=0.01, retry_wait_max=0.05, give_up_after=2.0)  # fmt: skip
    stop = threading.Event()
    timer = threading.Timer(120, stop.set)  # a sink that never gives up: DID NOT RAISE
    timer.daemon = True
    timer.start()
    with pytest.raises(WarehouseError, match="injected insert_assessments"):
        sink.run(stop)
    timer.cancel()
    sink.close()
    assert sink.stats.blocks == 0 and sink.stats.retries >= 1
    assert all(offset < 0 for offset in committed(kafka_bootstrap, group, list(last)).values())
    # 2. ClickHouse fails for a while, everywhere (lookups; inserts, before and after they
    # are done): every failure is retried, with no give-up for transient ones
    failing("first_fingerprints", 2)
    failing("insert_events", 2, after=True)
    failing("insert_assessments", 3)
    failing("insert_dead_letters", 2)
    sink = make_sink(kafka_bootstrap, deployment, warehouse, group, max_rows=150,
                     retry_wait=0.01, retry_wait_max=0.05, give_up_after=0.0)  # fmt: skip
    drain_sink(sink, total)
    assert sink.stats.retries == 9  # each injected failure, once
    assert committed(kafka_bootstrap, group, list(last)) == last

    def one(sql: str) -> tuple[Any, ...]:
        return tuple(warehouse.select(sql)[0].values())

    refusals = len(read(kafka_bootstrap, deployment.assessments))
    batches = len(read(kafka_bootstrap, deployment.audit_batches))
    db = "{db:Identifier}"
    assert one(f"SELECT count(), uniqExact(log_id) FROM {db}.refusal_events FINAL") == (
        len(events), len(events))  # fmt: skip
    assert one(f"SELECT count(), uniqExact(policy_bundle, log_id) FROM {db}.assessments "
               "FINAL") == (refusals, refusals)  # fmt: skip
    assert one(f"SELECT count() FROM {db}.current_assessments") == (refusals,)
    assert one(f"SELECT count(), uniqExact(batch_id) FROM {db}.audit_batches FINAL") == (
        batches, batches)  # fmt: skip
    assert one(f"SELECT count(), uniqExact(dead_letter_id) FROM {db}.dead_letters FINAL") == (
        len(bad), len(bad))  # fmt: skip
