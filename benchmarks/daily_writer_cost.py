"""What migration 0024's daily aggregates cost the writers: ``refusal-audit audit`` end to end.

Runs ``benchmarks/intake_cost.py``'s end-to-end measurement (``run_batch`` with the local
engine into a fresh embedded chDB store, CPU µs per event beyond start-up, split into the
pipeline's thread and the others: warehouse calls and chDB's threads) alternately "off"
(migration 0024 not applied, no marks, no recompute: the writers as before it) and "on" (as
shipped: the materialized views mark days in every insert, ``Warehouse.insert_built`` marks
again, the pipeline recomputes after a flush at most every 10 s), ``--pairs`` times.

``--since 0025``: "off" is the schema and aggregates before migration 0025 instead (0024's
four aggregates recomputed; 0025 adds two more to every recompute and no materialized view).
``--without KIND`` (e.g. ``disagreements``, migration 0026) compares "on" without the
aggregate ``KIND`` ("off") with "on" as shipped instead: what one aggregate adds (its
table is still created; only the recompute's work differs).

Run: ``python benchmarks/daily_writer_cost.py [--events 20000] [--pairs 3] [--since 0025 |
--without KIND]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import intake_cost

import warehouse.migrate  # noqa: F401
from warehouse import daily
from warehouse.store import Warehouse

_MIGRATE: Any = sys.modules["warehouse.migrate"]  # the package exports a function of that name
_REAL = (_MIGRATE.load_migrations, daily.mark_days, Warehouse.refresh_daily)
_AGGREGATES = dict(daily.AGGREGATES)
_SINCE_0025 = ("configurations", "batch_scopes")  # the aggregates migration 0025 added


def switch(on: bool, since: str = "0024", without: str | None = None) -> None:
    """The daily aggregates on (as shipped) or off (0024 not applied, no marks, no refresh;
    ``since`` "0025": 0025 not applied and its aggregates not recomputed; with ``without``,
    off means on without that aggregate)."""
    daily.AGGREGATES.clear()
    daily.AGGREGATES.update(_AGGREGATES)
    if without is not None:
        if not on:
            del daily.AGGREGATES[without]
        on = True
    load, mark, refresh = _REAL
    if since == "0025":
        _MIGRATE.load_migrations = (
            load if on else (lambda: [m for m in load() if m.version < since])
        )
        daily.AGGREGATES.clear()
        daily.AGGREGATES.update(
            {k: v for k, v in _AGGREGATES.items() if on or k not in _SINCE_0025}
        )
        return
    _MIGRATE.load_migrations = load if on else (lambda: [m for m in load() if m.version < "0024"])
    daily.mark_days = mark if on else (lambda *a, **k: None)
    Warehouse.refresh_daily = refresh if on else (lambda *a, **k: [])  # type: ignore[method-assign]


def main() -> None:
    """Time the pairs and print every run and the medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--since", choices=("0024", "0025"), default="0024")
    parser.add_argument("--without", default=None, choices=sorted(daily.AGGREGATES))
    args = parser.parse_args()
    records = intake_cost.build_records(args.events, [])
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for turn in range(args.pairs):
        for name in runs:
            switch(name == "on", args.since, args.without)
            runs[name].append(intake_cost.measure_end_to_end(records))
            print(turn, name, {k: round(v, 1) for k, v in runs[name][-1].items()}, flush=True)
    switch(True)
    for key in runs["on"][0]:
        off = statistics.median(r[key] for r in runs["off"])
        on = statistics.median(r[key] for r in runs["on"])
        print(f"{key:40} off {off:9.1f}  on {on:9.1f}  ({on - off:+.1f})")


if __name__ == "__main__":
    main()
