"""How long the warehouse sink's duplicate-rule lookup takes, by ids per query and stored rows.

Issue 27: the sink slowed down as the store grew. Each block's duplicate rule asks
``refusal_events`` for the first fingerprint of every log id in the block
(``warehouse.store.FIRST_FINGERPRINTS``: ``WHERE log_id IN {ids}``). This script fills an
embedded chDB store with ``--rows`` synthetic events (random hex log ids, 1 KB of text each),
then times, for fresh ids (none stored: the common case), one query per list size of
``--sizes`` and the same 33,000 ids in chunks (``--chunks``), wall seconds with
``time.perf_counter``. It is what ``warehouse.store.LOOKUP_CHUNK`` was chosen on.

Run: ``python benchmarks/sink_lookup.py [--rows N] [--sizes 10000 25000 ...] [--chunks ...]``
(the store goes to a temporary directory; about a minute per slow query).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from warehouse import connect, migrate
from warehouse.store import FIRST_FINGERPRINTS

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


def main() -> None:
    """Print one line per measurement."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=330_000)
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 25_000, 27_000, 33_000])
    parser.add_argument("--chunks", type=int, nargs="*", default=[2_000, 5_000, 10_000])
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


if __name__ == "__main__":
    main()
