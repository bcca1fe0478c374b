"""What migration 0028's daily review aggregates (or 0029's ``gaps``) cost the writers, on a
trend store.

On a store built by ``benchmarks/trend_queries.py --keep`` (schema 0028), times:

- ``mark_verdict_days``: the verdict writer's extra work after each insert
  (``warehouse.review.insert_verdicts``), for 1 and 100 verdicts' log ids (primary-key
  lookups of their events, then one insert into ``dirty_days``); with ``--gaps`` (schema
  0029) ``mark_sighting_days`` instead, the sighting writer's work before and after each
  insert (``warehouse.gaps.insert_sightings``), for 1 and 100 stored sightings;
- the recompute of ``--days`` dirty days (``warehouse.daily.refresh``) with every aggregate
  ("on") and without 0028's two (``--gaps``: without 0029's ``gaps``; "off"), alternately,
  ``--pairs`` times.

Wall seconds and this process's CPU seconds (``time.process_time``; chDB runs in this
process). The days are marked dirty and recomputed: the store's results do not change.

Run: ``python benchmarks/review_daily_cost.py --store /tmp/trendD-1m [--days 5] [--pairs 3]
[--gaps]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from warehouse import daily
from warehouse.client import Client
from warehouse.connect import connect

DATABASE = "trend"
NEW = ("agreements", "reviews")  # migration 0028's aggregates
GAPS = ("gaps",)  # migration 0029's


def _timed(fn: object, *args: object) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args)  # type: ignore[operator]
    return time.perf_counter() - wall, time.process_time() - cpu


def mark_cost(client: Client, n: int, gaps: bool, repeat: int = 5) -> tuple[float, float]:
    """Median (wall s, CPU s) of ``mark_verdict_days`` for ``n`` verdicts' log ids (``gaps``:
    ``mark_sighting_days`` for ``n`` sightings' log ids and ``seen_at`` days)."""
    if gaps:
        rows = client.query(
            f"SELECT log_id, toDate(seen_at) FROM {DATABASE}.policy_gap_sightings "
            f"ORDER BY log_id LIMIT {n}"
        ).result_rows
        args: tuple[object, ...] = ([r[0] for r in rows], [r[1] for r in rows])
        mark: object = daily.mark_sighting_days
    else:
        args = ([r[0] for r in client.query(
            f"SELECT log_id FROM {DATABASE}.review_verdicts ORDER BY verdict_id LIMIT {n}"
        ).result_rows],)  # fmt: skip
        mark = daily.mark_verdict_days
    runs = [_timed(mark, client, DATABASE, *args) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def refresh_cost(client: Client, days: int, on: bool, gaps: bool) -> tuple[float, float]:
    """(wall s, CPU s) of recomputing the ``days`` newest days, with 0028's aggregates
    (``gaps``: 0029's) (``on``) or without."""
    every = dict(daily.AGGREGATES)
    if not on:
        for kind in GAPS if gaps else NEW:
            del daily.AGGREGATES[kind]
    try:
        newest = client.query(
            f"SELECT DISTINCT day FROM {DATABASE}.daily_versions ORDER BY day DESC LIMIT {days}"
        ).result_rows
        month = (newest[0][0].year, newest[0][0].month)  # refresh does one month at a time
        chosen = [r[0] for r in newest if (r[0].year, r[0].month) == month]
        daily.mark_days(client, DATABASE, chosen)
        return _timed(daily.refresh_all, client, DATABASE)
    finally:
        daily.AGGREGATES.clear()
        daily.AGGREGATES.update(every)


def main() -> None:
    """Print the marking cost and each recompute pair, then the medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--days", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--gaps", action="store_true", help="0029's aggregate and marks")
    args = parser.parse_args()
    client = connect(f"chdb://{args.store.resolve()}", DATABASE, via_owner=False)
    try:
        daily.refresh_all(client, DATABASE)
        name, which = ("mark_sighting_days", "0029") if args.gaps else ("mark_verdict_days", "0028")
        for n in (1, 100):
            wall, cpu = mark_cost(client, n, args.gaps)
            print(f"{name}, {n} log ids: {wall:.4f} s wall, {cpu:.4f} s CPU")
        daily.refresh_all(client, DATABASE)
        results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for _ in range(args.pairs):
            for on in (False, True):
                results[on].append(refresh_cost(client, args.days, on, args.gaps))
                wall, cpu = results[on][-1]
                print(f"refresh {args.days} days, {which} {'on ' if on else 'off'}: "
                      f"{wall:.3f} s wall, {cpu:.3f} s CPU")  # fmt: skip
        for on in (False, True):
            wall = statistics.median(r[0] for r in results[on])
            cpu = statistics.median(r[1] for r in results[on])
            print(f"median, {which} {'on ' if on else 'off'}: {wall:.3f} s wall, {cpu:.3f} s CPU")
    finally:
        client.close()


if __name__ == "__main__":
    main()
