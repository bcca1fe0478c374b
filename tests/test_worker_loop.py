"""The worker's pipeline loop (a long-lived event loop in its own thread) and its window
descriptions, without a broker: the Kafka side is covered by tests/test_worker.py."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from processors.adapters import DecodeOptions, SourceRecord
from refusal_audit.audit.batch import build_pipeline
from refusal_audit.audit.pipeline import InputSource
from refusal_audit.audit.settings import PolicyBundlePaths
from refusal_audit.config import Settings
from refusal_audit.streaming.worker import (
    describe_window,
    window_partitions,
    window_topic,
)
from refusal_audit.streaming.worker_loop import PipelineLoop
from schemas.audit import BatchRecord, StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent, StoredIdentity

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"


@pytest.fixture
def pipeline_loop() -> Any:
    loop = PipelineLoop()
    yield loop
    loop.close()


async def ticking(work: Any) -> tuple[Any, int]:
    """Await ``work`` while counting 20 ms ticks of the calling loop: (result, ticks)."""
    ticks = 0
    done = False

    async def tick() -> None:
        nonlocal ticks
        while not done:
            await asyncio.sleep(0.02)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        result = await work
    finally:
        done = True
        await ticker
    return result, ticks


def test_coroutines_run_on_one_long_lived_loop_in_its_own_thread(
    pipeline_loop: PipelineLoop,
) -> None:
    async def where() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
        return asyncio.get_running_loop(), threading.current_thread()

    async def caller() -> list[tuple[asyncio.AbstractEventLoop, threading.Thread]]:
        return [await pipeline_loop.run(where()) for _ in range(3)]

    first = asyncio.run(caller())
    second = asyncio.run(caller())  # another calling loop: still the same pipeline loop
    assert {loop for loop, _ in first + second} == {pipeline_loop.loop}
    assert {thread for _, thread in first + second} == {pipeline_loop.thread}
    assert pipeline_loop.thread is not threading.current_thread()


def test_blocking_work_does_not_stall_the_calling_loop(pipeline_loop: PipelineLoop) -> None:
    async def cpu_bound() -> str:
        end = time.monotonic() + 1.0
        while time.monotonic() < end:  # holds the GIL like intake or the local engine
            pass
        return "done"

    result, ticks = asyncio.run(ticking(pipeline_loop.run(cpu_bound())))
    assert result == "done"
    assert ticks >= 10  # ~50 expected; 0 if the work had run on the calling loop


def test_exceptions_propagate_and_cancellation_reaches_the_coroutine(
    pipeline_loop: PipelineLoop,
) -> None:
    async def fails() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        asyncio.run(pipeline_loop.run(fails()))

    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def caller() -> None:
        task = asyncio.create_task(pipeline_loop.run(forever()))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(caller())
    assert cancelled.wait(5)


def test_close_runs_the_finalizer_on_the_loop_and_stops_it() -> None:
    loop = PipelineLoop()
    ran_on: list[asyncio.AbstractEventLoop] = []

    async def finalizer() -> None:
        ran_on.append(asyncio.get_running_loop())

    loop.close(finalizer)
    assert ran_on == [loop.loop]
    assert not loop.thread.is_alive() and loop.loop.is_closed()
    loop.close()  # a no-op

    async def anything() -> None:
        return None

    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(loop.run(anything()))


class ThreadRecordingSink:
    """A sink that counts rows and records the thread of every call."""

    def __init__(self) -> None:
        self.threads: set[threading.Thread] = set()
        self.rows: dict[str, int] = {}

    def _record(self, table: str, items: Sequence[Any]) -> None:
        self.threads.add(threading.current_thread())
        self.rows[table] = self.rows.get(table, 0) + len(items)

    def insert_events(self, events: Sequence[StoredEvent]) -> None:
        self._record("events", events)

    def insert_assessments(self, items: Sequence[StoredAssessment]) -> None:
        self._record("assessments", items)

    def insert_batches(self, batches: Sequence[BatchRecord]) -> None:
        self._record("batches", batches)

    def insert_dead_letters(self, items: Sequence[DeadLetter]) -> None:
        self._record("dead_letters", items)

    def stored_identities(self, keys: Sequence[tuple[str, str]]) -> dict[str, StoredIdentity]:
        self.threads.add(threading.current_thread())
        return {}


def test_the_pipeline_runs_on_the_loop_with_its_sink_calls_in_worker_threads(
    pipeline_loop: PipelineLoop,
) -> None:
    policies = REPO / "refusal_audit" / "example_policies"
    bundle = PolicyBundlePaths(
        allowed_use=policies / "allowed_use_policy.md",
        product_safety=policies / "product_safety_policy.md",
        taxonomy=policies / "refusal_taxonomy.md",
    )
    sink = ThreadRecordingSink()
    pipeline = build_pipeline(Settings(policy_bundles={"default": bundle}), sink, "local")
    lines = [line for line in EXAMPLE_LOG.read_bytes().splitlines() if line.strip()]
    records = [SourceRecord("t", f"partition 0 offset {i}", line) for i, line in enumerate(lines)]
    source = InputSource(records, "jsonl", DecodeOptions())

    async def caller() -> Any:
        return await pipeline_loop.run(pipeline.run([source]))

    report = asyncio.run(caller())
    assert report.records == report.events == len(lines) and not report.failures
    assert sink.rows["events"] == len(lines)
    assert sink.rows["assessments"] == len(report.assessments) == report.refusals > 0
    assert sink.rows["batches"] == report.batches
    assert sink.threads and pipeline_loop.thread not in sink.threads
    assert threading.current_thread() not in sink.threads


def event(topic: str, partition: int, offset: int) -> SimpleNamespace:
    return SimpleNamespace(message=SimpleNamespace(topic=topic, partition=partition, offset=offset))


def test_window_partitions_names_every_partition() -> None:
    events = [event("in", 2, 7), event("in", 0, 5), event("in", 2, 8), event("in", 0, 6)]
    events += [event("in", 1, 40), event("in", 0, 7)]
    partitions = window_partitions(events)
    assert partitions == [
        {"partition": 0, "first_offset": 5, "last_offset": 7, "records": 3},
        {"partition": 1, "first_offset": 40, "last_offset": 40, "records": 1},
        {"partition": 2, "first_offset": 7, "last_offset": 8, "records": 2},
    ]
    assert window_topic(events) == "in"
    assert describe_window("in", partitions) == (
        "in [partition 0 offsets 5-7 (3 records), partition 1 offsets 40-40 (1 records), "
        "partition 2 offsets 7-8 (2 records)]"
    )
    assert window_partitions([]) == [] and window_topic([]) == ""
