"""Does the warehouse sink slow down as the store grows? Its rate per block, block after block,
into one embedded chDB store (issue 27, first target).

The sink's per-block work is what may grow with the store: the duplicate-log-id rule's
lookups of the block's log ids, the inserts with their deduplication tokens, the parts and
merges behind them. Reading the result topics from Kafka costs the same per block whatever
is stored, so this script leaves the broker out and hands the sink's own code
(``WarehouseSink.store_block``: decode, judge, insert table by table) blocks of the messages
a transactional worker writes:

1. the example log (``examples/refusal_log.jsonl``, 200 events) is audited once by the real
   pipeline (local engine) into ``TopicOutputs``, the worker's output collector: the
   stored-events, assessments and audit-batches messages with their headers;
2. each block repeats those messages with fresh log ids and batch ids (the key and every
   occurrence of the old id in the value are replaced) until it holds ``--block-rows``
   messages (the sink's ``max_rows`` default: 50,000), with growing offsets;
3. each block is stored; its rows/s (rows / wall seconds of ``store_block``; building the
   block is not timed) and the rows stored before it are printed, and at the end the rate
   over the first and the last ``--window`` rows (default 1,000,000) and their ratio, in
   wall time and in CPU time (``time.process_time`` per block, the curve's 4th column);
4. the reference, in the same run: a bare decode loop (``orjson.loads`` of every message
   value of the block, nothing else; no broker, so it is faster than scaleout.py's bare
   consume + decode loop) timed over each block, and the sink's rate as a share of it
   (issue 27's sink target: >= 0.15 x the bare loop, >= 100,000 rows/s);
5. where the time goes, per stage and over all blocks (wall seconds of the sink's own calls,
   timed by wrapping them, so the path is ``store_block``'s): decode (validate each message,
   build its row: ``WarehouseSink._rows``), the duplicate rule's lookup
   (``Warehouse.first_fingerprints``), the rest of the rule, and each table's insert
   (``Warehouse.insert_built``: Arrow table built and inserted), and ``store_block``'s CPU
   seconds per row (``time.process_time``: less sensitive to a shared machine's load).

Target (issue 27): loading 10,000,000 rows into one store, the rate over the last million
within 20% of the rate over the first (``--rows 10000000``; about 20 minutes at 10k rows/s).

Run: ``python benchmarks/sink_growth.py [--rows N] [--block-rows N] [--window N]
[--json PATH]`` (the store goes to a temporary directory unless ``--store DIR``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import TIMESTAMP_CREATE_TIME

from processors.adapters import DecodeOptions, SourceRecord
from refusal_audit.audit.batch import build_pipeline
from refusal_audit.audit.pipeline import InputSource
from refusal_audit.config import Settings
from refusal_audit.streaming.warehouse_sink import WarehouseSink
from refusal_audit.streaming.window_outputs import TopicOutputs
from streams.blocks import Block
from streams.topics import Topics
from warehouse.connect import connect
from warehouse.migrate import migrate
from warehouse.store import Warehouse

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"


@dataclass
class FakeMessage:
    """What the sink reads of a Kafka message (``topic()``, ``value()``, ...), for blocks built
    without a broker."""

    _topic: str
    _partition: int
    _offset: int
    _value: bytes
    _key: bytes | None
    _headers: list[tuple[str, bytes]] | None
    _timestamp: int

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return TIMESTAMP_CREATE_TIME, self._timestamp


def worker_messages(cfg: Settings, topics: Topics) -> list[Any]:
    """The output messages of one worker window over the example log (local engine), on the
    topics the sink reads."""
    outputs = TopicOutputs(topics)
    pipeline = build_pipeline(cfg, outputs)
    records = [
        SourceRecord(topics.input, f"partition 0 offset {i}", line)
        for i, line in enumerate(EXAMPLE_LOG.read_bytes().splitlines())
        if line.strip()
    ]
    options = DecodeOptions(
        max_record_bytes=cfg.max_record_bytes, max_text_chars=cfg.max_text_chars
    )
    asyncio.run(pipeline.run([InputSource(records, "jsonl", options)], sink=outputs))
    read = {topics.stored_events, topics.assessments, topics.audit_batches}
    return [m for m in outputs.take() if m.topic in read]


def make_block(templates: list[Any], rows: int, offsets: dict[str, int]) -> Block:
    """A block of about ``rows`` messages: ``templates`` repeated with fresh ids (the
    message key, and the old key inside the value), offsets continuing from ``offsets``."""
    block = Block()
    now_ms = int(time.time() * 1000)
    while block.rows < rows:
        run = uuid.uuid4().hex[:12]
        for m in templates:
            old = m.key or b""
            new = old + b"-" + run.encode()
            offset = offsets.get(m.topic, 0)
            offsets[m.topic] = offset + 1
            value = m.value.replace(old, new) if old else m.value
            block.add(FakeMessage(m.topic, 0, offset, value, new, m.headers, now_ms))  # type: ignore[arg-type]
    return block


class Stages:
    """Wall seconds spent in named calls: :meth:`wrap` replaces an object's method with a
    timed one (calls nested in another timed call count in both)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, owner: Any, name: str, label: Callable[..., str] | None = None) -> None:
        """Time ``owner.name`` under ``label(*args)`` (default: ``name``); nothing when
        ``owner`` has no such method (an older version of the sink)."""
        real = getattr(owner, name, None)
        if real is None:
            return

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                key = label(*args) if label else name
                self.seconds[key] += time.perf_counter() - start

        setattr(owner, name, timed)


def bare_decode(block: Block) -> float:
    """Seconds of a bare decode loop over ``block``: ``orjson.loads`` of every value."""
    start = time.perf_counter()
    for messages in block.records.values():
        for m in messages:
            orjson.loads(m.value() or b"")
    return time.perf_counter() - start


def main() -> None:
    """Print one line per block, then the first and last window's rates."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--block-rows", type=int, default=50_000)
    parser.add_argument("--window", type=int, default=1_000_000)
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="Write the curve here.")
    args = parser.parse_args()
    # chDB may still be writing the store's parts when the run ends: the client is closed
    # first (below), and a part it left is no reason to fail after the figures are out
    with tempfile.TemporaryDirectory(prefix="sink-growth-", ignore_cleanup_errors=True) as tmp:
        root = (args.store or Path(tmp)).resolve()
        cfg = Settings(engine="local", data_dir=root / "data", warehouse_database="bench")
        topics = Topics.from_prefix("bench.")
        templates = worker_messages(cfg, topics)
        client = connect(f"chdb://{root / 'store'}", "bench")
        migrate(client, "bench")
        store = Warehouse(client, "bench")
        sink = WarehouseSink(store, None, topics)  # type: ignore[arg-type]
        stages = Stages()
        stages.wrap(sink, "_rows", lambda *_: "decode + validate + rows")
        stages.wrap(store, "first_fingerprints", lambda *_: "rule: lookup")
        stages.wrap(store, "insert_built", lambda table, *_: f"insert {table}")
        stages.wrap(store, "insert_dead_letters", lambda *_: "insert dead_letters")
        for method, table in (("insert_events", "refusal_events"), ("insert_assessments",
                              "assessments"), ("insert_batches", "audit_batches")):  # fmt: skip
            stages.wrap(store, method, lambda *_, t=table: f"insert {t}")  # the older sink's
        print(f"{len(templates)} messages per copy of the example log; blocks of "
              f"{args.block_rows:,} rows into {root / 'store'} (embedded chDB)")  # fmt: skip
        # rows stored before, block rows, wall seconds, CPU seconds (this process)
        curve: list[tuple[int, int, float, float]] = []
        stored, offsets, bare, total, cpu = 0, dict[str, int](), 0.0, 0.0, 0.0
        while stored < args.rows:
            block = make_block(templates, args.block_rows, offsets)
            bare += bare_decode(block)
            start, start_cpu = time.perf_counter(), time.process_time()
            sink.store_block(block)
            seconds = time.perf_counter() - start
            block_cpu = time.process_time() - start_cpu
            cpu += block_cpu
            total += seconds
            curve.append((stored, block.rows, seconds, block_cpu))
            print(f"  {stored:>12,} stored  block {block.rows:,} rows  {seconds:6.2f} s  "
                  f"{block.rows / seconds:>9,.0f} rows/s", flush=True)  # fmt: skip
            stored += block.rows
        # what no wrapped call covers: the rule's own loop, the block's tokens, the stats
        rest = total - sum(stages.seconds.values())
        stages.seconds["the rest (rule's loop, tokens, stats)"] = rest
        print("where the time goes (all blocks, wall seconds, share of store_block):")
        for name, sec in sorted(stages.seconds.items(), key=lambda kv: -kv[1]):
            print(f"  {name:<40} {sec:8.2f} s  {sec / total:6.1%}  "
                  f"{sec / stored * 1e6:7.2f} us/row")  # fmt: skip
        sink_rate, bare_rate = stored / total, stored / bare
        print(f"store_block: {cpu / stored * 1e6:.2f} us of CPU per row (time.process_time: "
              "this process, chDB's threads included)")  # fmt: skip
        print(f"sink {sink_rate:,.0f} rows/s; bare decode loop (orjson.loads only, same "
              f"messages) {bare_rate:,.0f} rows/s; sink / bare = {sink_rate / bare_rate:.3f} "
              "(target >= 0.15, and >= 100,000 rows/s)")  # fmt: skip
        first = [c for c in curve if c[0] < args.window]
        last = [c for c in curve if c[0] >= stored - args.window]

        def rate(part: list[tuple[int, int, float, float]], at: int = 2) -> float:
            return sum(c[1] for c in part) / sum(c[at] for c in part)

        r_first, r_last = rate(first), rate(last)
        print(f"rate over the first {args.window:,} rows: {r_first:,.0f} rows/s; over the last "
              f"{args.window:,} (of {stored:,}): {r_last:,.0f} rows/s; last / first = "
              f"{r_last / r_first:.2f} (target >= 0.80)")  # fmt: skip
        c_first, c_last = 1e6 / rate(first, 3), 1e6 / rate(last, 3)
        print(f"CPU per row over the first window {c_first:.2f} us, over the last {c_last:.2f} "
              f"us; first / last = {c_first / c_last:.2f} (the same ratio in CPU time, less "
              "sensitive to other jobs on the machine)")  # fmt: skip
        if args.json:
            args.json.write_text(json.dumps({
                "rows": stored, "block_rows": args.block_rows, "window": args.window,
                "first_rate": r_first, "last_rate": r_last, "ratio": r_last / r_first,
                "sink_rate": sink_rate, "bare_decode_rate": bare_rate,
                "sink_over_bare": sink_rate / bare_rate, "stages": dict(stages.seconds),
                "cpu_us_per_row": cpu / stored * 1e6, "cpu_us_first": c_first,
                "cpu_us_last": c_last,
                "curve": curve,
            }, indent=1))  # fmt: skip
        client.close()


if __name__ == "__main__":
    main()
