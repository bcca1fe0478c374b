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
   over the first and the last ``--window`` rows (default 1,000,000) and their ratio.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def main() -> None:
    """Print one line per block, then the first and last window's rates."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--block-rows", type=int, default=50_000)
    parser.add_argument("--window", type=int, default=1_000_000)
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="Write the curve here.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sink-growth-") as tmp:
        root = (args.store or Path(tmp)).resolve()
        cfg = Settings(engine="local", data_dir=root / "data", warehouse_database="bench")
        topics = Topics.from_prefix("bench.")
        templates = worker_messages(cfg, topics)
        client = connect(f"chdb://{root / 'store'}", "bench")
        migrate(client, "bench")
        sink = WarehouseSink(Warehouse(client, "bench"), None, topics)  # type: ignore[arg-type]
        print(f"{len(templates)} messages per copy of the example log; blocks of "
              f"{args.block_rows:,} rows into {root / 'store'} (embedded chDB)")  # fmt: skip
        curve: list[tuple[int, int, float]] = []  # rows stored before, block rows, seconds
        stored, offsets = 0, dict[str, int]()
        while stored < args.rows:
            block = make_block(templates, args.block_rows, offsets)
            start = time.perf_counter()
            sink.store_block(block)
            seconds = time.perf_counter() - start
            curve.append((stored, block.rows, seconds))
            print(f"  {stored:>12,} stored  block {block.rows:,} rows  {seconds:6.2f} s  "
                  f"{block.rows / seconds:>9,.0f} rows/s", flush=True)  # fmt: skip
            stored += block.rows
        first = [c for c in curve if c[0] < args.window]
        last = [c for c in curve if c[0] >= stored - args.window]

        def rate(part: list[tuple[int, int, float]]) -> float:
            return sum(c[1] for c in part) / sum(c[2] for c in part)

        r_first, r_last = rate(first), rate(last)
        print(f"rate over the first {args.window:,} rows: {r_first:,.0f} rows/s; over the last "
              f"{args.window:,} (of {stored:,}): {r_last:,.0f} rows/s; last / first = "
              f"{r_last / r_first:.2f} (target >= 0.80)")  # fmt: skip
        if args.json:
            args.json.write_text(json.dumps({
                "rows": stored, "block_rows": args.block_rows, "window": args.window,
                "first_rate": r_first, "last_rate": r_last, "ratio": r_last / r_first,
                "curve": curve,
            }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
