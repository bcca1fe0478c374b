"""Migration 0029's policy-gap reads against 0027's, alternately, on one trend store.

On a store built by ``benchmarks/trend_queries.py --keep`` and migrated to 0029 (its
``--reuse`` does), runs each of ``top_gap_flags`` (every stored day, no filter, limit 10)
and the panels "New gaps", "Gap sightings" and "Open gaps with example log ids" (the last 90
days cut to whole UTC days, "All", a one-day interval) alternately in 0027's form (the
views ``policy_gap_dated``/``policy_gap_summary``/``policy_gap_current``, which 0029 keeps:
the SQL of a checkout of the code before 0029, ``--former``) and as it reads now (the daily
aggregate ``gaps``), one warm-up then ``--runs`` times each, every day clean; then the new
form with today (``--dirty-day``: that day) marked dirty (computed live). Prints medians
of wall seconds and of this process's CPU seconds (chDB runs in it); the store's results do
not change (the day is recomputed at the end).

Run: ``python benchmarks/gap_daily_ab.py --store /tmp/gapF-1m --former /tmp/gapF-main
[--runs 5]`` (``--former``: e.g. ``git archive main | tar -x -C DIR`` of the commit before).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from trend_queries import whole_days_panel_runner  # benchmarks/trend_queries.py

from refusal_audit.dashboards import audit_panels
from warehouse import daily
from warehouse import report_queries as rq
from warehouse.connect import connect

DATABASE = "trend"
PANELS = {"New gaps": "NEW_GAPS_SQL", "Gap sightings": "SIGHTINGS_SQL",
          "Open gaps with example log ids": "OPEN_GAPS_SQL"}  # fmt: skip


def _load(path: Path, name: str) -> ModuleType:
    """The module at ``path`` under ``name`` (its imports resolve in this checkout)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def pairs(client: Any, former: Path) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, 0027's form, the form now) of the four reads."""
    old_rq = _load(former / "warehouse" / "report_queries.py", "former_report_queries")
    old_panels = _load(former / "refusal_audit/dashboards/audit_panels.py", "former_panels")
    first, last = client.query(f"SELECT min(day), max(day) FROM {DATABASE}.daily_versions"
                               ).result_rows[0]  # fmt: skip
    f = rq.ReportFilter(first, last)
    out = [("report: top_gap_flags", lambda: old_rq.top_gap_flags(client, DATABASE, f),
            lambda: rq.top_gap_flags(client, DATABASE, f))]  # fmt: skip
    run = whole_days_panel_runner(client)
    for title, name in PANELS.items():
        out.append((f"grafana: {title}", run(getattr(old_panels, name)),
                    run(getattr(audit_panels, name))))  # fmt: skip
    return out


def _timed(call: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    """Print, per read: 0027's and 0029's median wall and CPU seconds, and 0029's with today
    dirty."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--former", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dirty-day", type=date.fromisoformat, default=None,
                        help="the day marked dirty (default: today, UTC)")  # fmt: skip
    args = parser.parse_args()
    client = connect(f"chdb://{args.store.resolve()}", DATABASE, via_owner=False)
    try:
        daily.refresh_all(client, DATABASE)
        reads = pairs(client, args.former)
        for name, before, after in reads:
            runs: dict[str, list[tuple[float, float]]] = {"0027": [], "0029": []}
            for turn in range(args.runs + 1):
                for key, call in (("0027", before), ("0029", after)):
                    timed = _timed(call)
                    if turn:
                        runs[key].append(timed)
            cells = [f"{k} {statistics.median(r[0] for r in v):7.3f} s wall "
                     f"{statistics.median(r[1] for r in v):7.3f} s CPU"
                     for k, v in runs.items()]  # fmt: skip
            print(f"{name:42} {'  '.join(cells)}", flush=True)
        dirty_day = args.dirty_day or datetime.now(UTC).date()
        daily.mark_days(client, DATABASE, [dirty_day])
        for name, _, after in reads:
            after()
            dirty = [_timed(after) for _ in range(args.runs)]
            print(f"{name:42} 0029, {dirty_day} dirty: "
                  f"{statistics.median(r[0] for r in dirty):7.3f} s wall "
                  f"{statistics.median(r[1] for r in dirty):7.3f} s CPU", flush=True)  # fmt: skip
        daily.refresh_all(client, DATABASE)
    finally:
        client.close()


if __name__ == "__main__":
    main()
