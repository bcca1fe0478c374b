"""The disagreement listing, former vs now, and where the time goes (issue 27, item 4;
docs/warehouse.md "Migration 0029").

On a store kept by ``benchmarks/trend_queries.py --keep`` (database ``trend``), times
alternately, ``--runs`` times each after one warm-up: the full listing
(``run_named(..., full=True)``: the former ``refusal_disagreement_events``, every row) and
the newest ``LISTED`` (``warehouse.disagreement_listing.newest_disagreements``), then each
stage of the latter on its own: the per-day counts (the ``disagreements`` daily aggregate),
the newest stored versions inside the bound (no FINAL), and the rows of their log ids
(FINAL, first pass only). Prints the
median wall and CPU seconds (``time.process_time``: chDB runs in this process, so its
threads count) per stage, and the rows each read.

Run: ``python benchmarks/disagreement_listing.py --store /tmp/trend-10m [--runs 5]
[--until 2026-11-30]`` (``--until``: the last day read, e.g. a month's last, so that the
newest partition read is a whole month, as late in a month).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from datetime import time as midnight
from pathlib import Path
from typing import Any

from warehouse import daily
from warehouse import disagreement_listing as listing
from warehouse.connect import connect
from warehouse.queries import listing_params, run_named

DATABASE = "trend"
_NAME = "refusal_disagreement_events"


def _timed(call: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    """Parse the options, time the stages alternately, print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="the chDB data directory")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--until", type=date.fromisoformat, default=None, help="last day (the newest month full)"
    )
    args = parser.parse_args()
    client = connect(f"chdb://{args.store.resolve()}", DATABASE, via_owner=False)
    params = listing_params(DATABASE, until=args.until) | {"direction": "", "limit": listing.LISTED}
    sql, sources = daily.with_source(
        client, DATABASE, listing._PER_DAY, params["since"], params["until"]
    )
    raw = client.query(sql, parameters=params | sources, settings=daily.READ_SETTINGS)
    per_day = [(r[0], int(r[1])) for r in raw.result_rows]
    bound, inside = listing._bound(per_day, listing.LISTED)
    params["bound"] = datetime.combine(bound, midnight(), UTC)
    found = listing._rows(client, listing._CANDIDATES, params | {"k": listing.LISTED})
    newest = params | {"ids": sorted({r[0] for r in found}), "newest_from": found[-1][1]}
    candidates = client.query(
        f"SELECT count() FROM {DATABASE}.refusal_events WHERE event_time >= "
        "{bound:DateTime64(3, 'UTC')} AND refusal_disagreement != 'none'",
        parameters=params,
    ).result_rows[0][0]
    print(f"bound {bound} ({inside} rows counted from it on), {candidates} stored versions "
          "inside it", flush=True)  # fmt: skip
    stages: dict[str, Callable[[], Any]] = {
        "former: full listing": lambda: run_named(client, DATABASE, _NAME, until=args.until,
                                                  full=True),
        "now: newest 500 (all stages)": lambda: run_named(client, DATABASE, _NAME,
                                                          until=args.until),
        "stage 1: per-day counts": lambda: client.query(sql, parameters=params | sources,
                                                        settings=daily.READ_SETTINGS),
        "stage 3: newest versions": lambda: listing._rows(client, listing._CANDIDATES,
                                                          params | {"k": listing.LISTED}),
        "stage 4: their rows (FINAL)": lambda: listing._rows(client, listing._NEWEST, newest),
    }  # fmt: skip
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in stages}
    for call in stages.values():
        call()  # warm-up
    for _ in range(args.runs):
        for name, call in stages.items():
            wall, cpu, _result = _timed(call)
            times[name].append((wall, cpu))
    for name, runs in times.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"  {name:32} wall {wall:7.3f} s  cpu {cpu:7.3f} s", flush=True)


if __name__ == "__main__":
    main()
