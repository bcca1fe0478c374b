"""How long the warehouse sink's duplicate-rule lookup takes, by ids per query and stored rows.

Issue 27: the sink slowed down as the store grew. Each block's duplicate rule asks
``refusal_events`` for the first fingerprint of every log id in the block
(``warehouse.store.FIRST_FINGERPRINTS``: ``WHERE log_id IN {ids}``). This script fills an
embedded chDB store with ``--rows`` synthetic events (random hex log ids, 1 KB of text each),
then times, for fresh ids (none stored: the common case), one query per list size of
``--sizes`` and the same 33,000 ids in chunks (``--chunks``), wall seconds with
``time.perf_counter``. It is what ``warehouse.store.LOOKUP_CHUNK`` was chosen on.

Then the way the sink runs it now (``warehouse.store.FIRST_FINGERPRINTS_JSON``: the ids bound
as one JSON text, ``warehouse.key_sets``): each size of ``--json-sizes`` (half fresh ids,
half stored ones) in one query, wall seconds and the process's CPU seconds
(``time.process_time``: the Python side plus chDB's threads), beside the array parameter in
chunks of ``LOOKUP_CHUNK`` over the same ids; both answers must be equal.

Run: ``python benchmarks/sink_lookup.py [--rows N] [--sizes 10000 25000 ...] [--chunks ...]
[--json-sizes ...]`` (the store goes to a temporary directory; about a minute per slow
query; ``--sizes`` with no value skips the slow ones).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from warehouse import connect, migrate
from warehouse.key_sets import KEYS_PARAMETER, json_keys, key_set_settings
from warehouse.store import FIRST_FINGERPRINTS, FIRST_FINGERPRINTS_JSON, LOOKUP_CHUNK

COLUMNS = ["log_id", "content_fingerprint", "ingested_at", "event_time", "is_refusal",
           "request", "response"]  # fmt: skip


def fill(client: object, database: str, rows: int, block: int = 50_000) -> None:
    """Insert ``rows`` synthetic events in blocks of ``block``."""
    now = datetime.now(UTC)
    for start in range(0, rows, block):
        data = [[uuid.uuid4().hex, "fp", now, now, True, "q" * 300, "r" * 700]
                for _ in range(min(block, rows - start))]  # fmt: skip
        client.insert("refusal_events", data, column_names=COLUMNS, database=database)  # type: ignore[attr-defined]


def timed(client: object, sql: str, ids: list[str], chunk: int) -> float:
    """Wall seconds of looking ``ids`` up ``chunk`` at a time."""
    start = time.perf_counter()
    for i in range(0, len(ids), chunk):
        client.query(sql, parameters={"ids": ids[i : i + chunk]})  # type: ignore[attr-defined]
    return time.perf_counter() - start


def by_json(client: object, sql: str, ids: list[str]) -> tuple[float, float, set[Any]]:
    """Wall and CPU seconds of looking ``ids`` up in one query bound as JSON, and the rows."""
    wall, cpu = time.perf_counter(), time.process_time()
    payload = json_keys(ids) or b"[]"
    rows = client.query(sql, parameters={KEYS_PARAMETER: payload},  # type: ignore[attr-defined]
                        settings=key_set_settings(payload)).result_rows  # fmt: skip
    return time.perf_counter() - wall, time.process_time() - cpu, {tuple(r) for r in rows}


def by_array(client: object, sql: str, ids: list[str]) -> tuple[float, float, set[Any]]:
    """The same with the array parameter, ``LOOKUP_CHUNK`` ids per query."""
    wall, cpu = time.perf_counter(), time.process_time()
    rows: set[Any] = set()
    for i in range(0, len(ids), LOOKUP_CHUNK):
        chunk = ids[i : i + LOOKUP_CHUNK]
        result = client.query(sql, parameters={"ids": chunk})  # type: ignore[attr-defined]
        rows |= {tuple(r) for r in result.result_rows}
    return time.perf_counter() - wall, time.process_time() - cpu, rows


def compare(client: object, sizes: list[int]) -> None:
    """Print the JSON-bound lookup beside the chunked array parameter, per size."""
    limit = max(sizes, default=0)
    result = client.query(f"SELECT log_id FROM bench.refusal_events LIMIT {limit}")  # type: ignore[attr-defined]
    stored = [str(r[0]) for r in result.result_rows]
    json_sql = FIRST_FINGERPRINTS_JSON.replace("{db:Identifier}", "bench")
    array_sql = FIRST_FINGERPRINTS.replace("{db:Identifier}", "bench")
    for size in sizes:
        ids = stored[: size // 2] + [uuid.uuid4().hex for _ in range(size - size // 2)]
        by_json(client, json_sql, ids[:100])  # warm
        j_wall, j_cpu, j_rows = by_json(client, json_sql, ids)
        a_wall, a_cpu, a_rows = by_array(client, array_sql, ids)
        assert j_rows == a_rows, "the two lookups disagree"
        print(
            f"  {size:>7,} ids (half stored): JSON one query {j_wall:6.3f} s wall "
            f"{j_cpu:6.3f} s CPU; array parameter in chunks of {LOOKUP_CHUNK:,} "
            f"{a_wall:6.3f} s wall {a_cpu:6.3f} s CPU; {len(j_rows):,} found",
            flush=True,
        )


def main() -> None:
    """Print one line per measurement."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=330_000)
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 25_000, 27_000, 33_000])
    parser.add_argument("--chunks", type=int, nargs="*", default=[2_000, 5_000, 10_000])
    parser.add_argument("--json-sizes", type=int, nargs="*", default=[10_000, 33_000, 100_000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sink-lookup-") as tmp:
        client = connect(f"chdb://{Path(tmp).resolve() / 'store'}", "bench")
        migrate(client, "bench")
        fill(client, "bench", args.rows)
        client.command("OPTIMIZE TABLE bench.refusal_events FINAL")
        sql = FIRST_FINGERPRINTS.replace("{db:Identifier}", "bench")
        print(f"refusal_events: {args.rows:,} rows (embedded chDB)")
        for size in args.sizes:
            ids = [uuid.uuid4().hex for _ in range(size)]
            seconds = timed(client, sql, ids, size)
            print(f"  {size:>7,} ids in one query: {seconds:7.2f} s", flush=True)
        ids = [uuid.uuid4().hex for _ in range(33_000)]
        for chunk in args.chunks:
            print(f"   33,000 ids in chunks of {chunk:,}: {timed(client, sql, ids, chunk):7.2f} s",
                  flush=True)  # fmt: skip
        compare(client, args.json_sizes)


if __name__ == "__main__":
    main()
