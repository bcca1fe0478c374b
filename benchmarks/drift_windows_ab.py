"""A/B CPU of ``warehouse.drift_windows.rows_sql`` (the working tree's) against another
revision's (default ``main``), alternating in one process on one generated chDB store.

    .venv/bin/python benchmarks/drift_windows_ab.py --rows 100000 [--ref main] [--runs 6]

Reads per run: 27 hourly windows up to now, 27 daily windows up to now and 27 hourly windows
100 days back (grace 300 s). Prints CPU (getrusage) and wall seconds per run and the counts
(rows, late rows) of each read, which must be equal. The store lives under
``/tmp/drift-ab-*`` and is deleted afterwards."""

from __future__ import annotations

import argparse
import importlib.util
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trend_data import generate

from warehouse import drift_windows
from warehouse.connect import connect
from warehouse.migrate import migrate


def _revision(ref: str, folder: Path) -> ModuleType:
    """``warehouse/drift_windows.py`` as of ``ref``, imported under another name."""
    text = subprocess.run(["git", "show", f"{ref}:warehouse/drift_windows.py"], check=True,
                          capture_output=True, text=True).stdout  # fmt: skip
    path = folder / "drift_windows_ref.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("drift_windows_ref", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    """Parse the arguments, build the store, print the A/B figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--ref", default="main")
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="drift-ab-"))
    try:
        other = _revision(args.ref, folder)
        client = connect(f"chdb://{folder / 'store'}", "ab")
        migrate(client, "ab")
        generate(client, "ab", args.rows, redelivered=0.05)
        now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        back = now - timedelta(days=100)
        cases = [(3600, now - timedelta(hours=27), now),
                 (86400, now - timedelta(days=27), now),
                 (3600, back - timedelta(hours=27), back)]  # fmt: skip
        sides: dict[str, Any] = {args.ref: other, "working tree": drift_windows}
        results: dict[str, list[tuple[float, float, list[Any]]]] = {k: [] for k in sides}
        for run in range(args.runs):
            order = list(sides) if run % 2 == 0 else list(reversed(sides))
            for name in order:
                module = sides[name]
                cpu, wall, counts = _cpu(), time.perf_counter(), []
                for w, start, end in cases:
                    counts.append(tuple(client.query(
                        f"SELECT count(), countIf(late) FROM {module.rows_sql(w, 300)}",
                        parameters=module.params("ab", w, start, end),
                        settings=module.READ_SETTINGS).result_rows[0]))  # fmt: skip
                results[name].append((_cpu() - cpu, time.perf_counter() - wall, counts))
        for name, runs in results.items():
            print(f"{name}: CPU s {[round(r[0], 3) for r in runs]}, "
                  f"wall s {[round(r[1], 3) for r in runs]}, counts {runs[0][2]}")  # fmt: skip
        client.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
