"""CPU cost per event of every intake stage, the local engine, and ``audit`` end to end.

Issue 11, item 7 ("Cost budget"): intake (decode + validation, redaction, pre-filter) plus the
local engine should cost <= 50 µs of CPU per event on one core, and ``refusal-audit audit``
into embedded chDB <= 100 µs per event beyond start-up. This script prints, for N events:

- ``decode+validate``: ``processors.adapters.decode_record`` on the raw JSONL bytes;
- ``fingerprint``: ``processors.intake.content_fingerprint`` (part of intake);
- ``redaction``: ``processors.redaction.redact_event`` with every kind enabled;
- ``pre-filter``: ``processors.prefilter.detect_refusals`` (the cue scorer and the
  request-aware stage, batch path);
- ``cascade``: with ``--cascade-band LOW HIGH`` (default 0.3 0.7, the narrowest band of the
  trade-off curve that reaches part of the example log; ``--no-cascade`` skips it),
  ``processors.refusal_cascade.Cascade.decide`` over the pre-filter's decisions with the
  shipped head and its int8 MiniLM encoder (``refusal_audit.audit.prefilter_cascade.build_cascade``;
  loading them is not timed), and ``cascade reached``, the share of events the encoder ran on;
- ``tokens``: ``processors.batching.event_tokens`` (o200k_base, the batcher's cost with an
  LLM engine; the local engine's batches count none);
- ``local engine``: ``LocalEngine.audit_sync`` over the batches ``make_batches`` forms from
  the refusals by ``batch_max_events`` alone, as the pipeline does for it (figure per event
  fed in, so stages add up);
- ``trend lines``: ``processors.trends.trend_lines`` once per batch, against a baseline;
- ``end to end``: ``refusal_audit.audit.batch.run_batch`` with the local engine into an embedded
  chDB store in a fresh temporary directory (start-up, i.e. opening the store and loading
  bundles, is timed separately by a 1-event run and subtracted); split into the calling
  thread's CPU (``time.thread_time``: the pipeline's event loop, i.e. intake, engine and
  building the rows) and the other threads' (the warehouse's inserts and lookups, which the
  pipeline runs with ``asyncio.to_thread``, and chDB's own threads: parsing, parts, merges).

Figures are CPU time (``time.process_time``, all threads of this process) divided by N; the
per-stage figures are the best of ``--repeat`` passes. Events are ``examples/refusal_log.jsonl``
cycled with fresh log ids, or, with ``--data FILE ...``, the ``prompt``/``response``
(``completion``) fields of JSONL or CSV files such as ``../shared/data/xstest/*.csv``.

``intake + local engine`` adds decode, fingerprint, redaction, pre-filter and the local engine;
``intake + local engine, cascade on`` adds the cascade to it (issue 25's budget: 1.5 x the
figure without the cascade).

Run: ``python benchmarks/intake_cost.py [--events N] [--data FILE ...] [--repeat R]
[--cascade-band LOW HIGH | --no-cascade] [--profile STAGE] [--no-end-to-end] [--json]``.
``--profile`` prints the cProfile top 15 of one stage (``decode``, ``redaction``,
``prefilter``, ``engine``, ``tokens``, ``end-to-end``).
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import pstats
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from processors.adapters import DecodeOptions, SourceRecord, decode_record
from processors.batching import event_tokens, make_batches
from processors.drift_detection import WindowCounts
from processors.engines.local import LocalEngine
from processors.intake import content_fingerprint
from processors.prefilter import RefusalDecision, detect_refusals
from processors.redaction import Redactor, redact_event
from processors.trends import trend_lines
from refusal_audit.audit.batch import BatchOptions, run_batch
from refusal_audit.audit.prefilter_cascade import build_cascade
from refusal_audit.bundles import load_bundles
from refusal_audit.config import load_settings
from schemas.events import RefusalEvent

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "refusal_log.jsonl"
T0 = "2026-01-01T00:00:00Z"


def _example_rows() -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in EXAMPLE.read_bytes().splitlines() if line.strip()]


def _data_rows(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """RefusalEvent wire rows from the prompt/response (or completion) fields of the files."""
    template = _example_rows()[1]
    rows: list[dict[str, Any]] = []
    for path in paths:
        if path.suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as fh:
                items: list[dict[str, Any]] = list(csv.DictReader(fh))
        else:
            items = [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]
        for item in items:
            request = str(item.get("prompt") or "").strip()
            response = str(item.get("response") or item.get("completion") or "").strip()
            if request and response:
                rows.append({**template, "request": request, "response": response})
    return rows


def build_records(n: int, data: Sequence[Path]) -> list[SourceRecord]:
    """``n`` JSONL records cycled from the example log (or ``data``), each with a new log id."""
    rows = _data_rows(data) if data else _example_rows()
    out: list[SourceRecord] = []
    for i in range(n):
        row = {**rows[i % len(rows)], "log_id": f"bench-{i:08d}"}
        out.append(SourceRecord("bench.jsonl", f"line {i + 1}", orjson.dumps(row)))
    return out


def _cpu(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Best CPU seconds of ``repeat`` calls of ``fn`` and its last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        result = fn()
        best = min(best, time.process_time() - start)
    return best, result


def measure_stages(
    records: Sequence[SourceRecord], repeat: int, band: tuple[float, float] | None = None
) -> dict[str, float]:
    """CPU µs per event of each stage (see the module docstring), keyed by stage name; with
    ``band``, also the cascade's CPU and ``cascade reached`` (a share, not µs)."""
    n = len(records)
    options = DecodeOptions()
    redactor = Redactor()
    cfg = load_settings(None)
    bundles = load_bundles(cfg.policy_bundles)
    engine = LocalEngine(cfg.local_false_positive_threshold)

    def decode() -> list[RefusalEvent]:
        out = [decode_record(r, "jsonl", options) for r in records]
        return [e for e in out if isinstance(e, RefusalEvent)]

    sec: dict[str, float] = {}
    sec["decode+validate"], decoded = _cpu(decode, repeat)
    events: list[RefusalEvent] = decoded  # type: ignore[assignment]
    sec["fingerprint"], _ = _cpu(lambda: [content_fingerprint(e) for e in events], repeat)
    sec["redaction"], red = _cpu(lambda: [redact_event(e, redactor)[0] for e in events], repeat)
    redacted: list[RefusalEvent] = red  # type: ignore[assignment]
    sec["pre-filter"], dec = _cpu(lambda: detect_refusals(redacted), repeat)
    refusals = [e for e, d in zip(redacted, dec, strict=True) if d.is_refusal]  # type: ignore[call-overload]
    reached = _cascade_stage(band, redacted, dec, repeat, sec) if band else None  # type: ignore[arg-type]
    sec["tokens"], _ = _cpu(lambda: [event_tokens(e) for e in refusals], repeat)
    batches = make_batches(refusals, cfg.batch_max_events, None)

    def audit() -> list[Any]:
        return [engine.audit_sync(b.events, bundles[b.policy_bundle]) for b in batches]

    engine.audit_sync(batches[0].events, bundles[batches[0].policy_bundle])  # build the index
    sec["local engine"], outputs = _cpu(audit, repeat)
    baseline = WindowCounts(refusals=1200, false_positives=96, review_flags=150, categories={})
    assessed = [o.result.individual_assessments for o in outputs]  # type: ignore[attr-defined]
    sec["trend lines"], _ = _cpu(lambda: [trend_lines(a, baseline) for a in assessed], repeat)
    out = {k: v / n * 1e6 for k, v in sec.items()}
    if reached is not None:
        out["cascade reached"] = reached / n
    return out


def _cascade_stage(
    band: tuple[float, float],
    events: Sequence[RefusalEvent],
    decisions: Sequence[RefusalDecision],
    repeat: int,
    sec: dict[str, float],
) -> int:
    """Time the cascade over ``decisions`` into ``sec["cascade"]`` (CPU s); return how many
    events reached the encoder. Raises ``ConfigError`` when the head or encoder is missing."""
    cascade = build_cascade(load_settings(None, prefilter_cascade_band=list(band)))
    if cascade is None:
        raise SystemExit(f"--cascade-band {band}: an empty band turns the cascade off")
    requests = [e.request for e in events]
    responses = [e.response for e in events]
    cascade.decide(decisions[:8], requests[:8], responses[:8])  # warm the ONNX session
    sec["cascade"], result = _cpu(lambda: cascade.decide(decisions, requests, responses), repeat)
    return int(result[1])  # type: ignore[index]


def _write_input(records: Sequence[SourceRecord], path: Path) -> None:
    path.write_bytes(b"\n".join(r.raw for r in records) + b"\n")


def _run_once(records: Sequence[SourceRecord], root: Path, tag: str) -> tuple[float, float]:
    """CPU seconds of one ``run_batch`` of ``records`` into a fresh chDB store under root:
    the whole process's, and the calling thread's alone (the pipeline's loop: intake, engine,
    the rows; the warehouse's inserts and lookups run in a worker thread, chDB's merges in
    its own)."""
    store = root / f"store-{tag}"
    cfg = load_settings(None, warehouse_dsn=f"chdb://{store.resolve()}", data_dir=store)
    path = root / f"{tag}.jsonl"
    _write_input(records, path)
    options = BatchOptions.build("jsonl", None, datetime(2026, 1, 1, tzinfo=UTC), None, None)
    start, start_thread = time.process_time(), time.thread_time()
    report = run_batch(cfg, [path], options, engine_name="local")
    spent, thread = time.process_time() - start, time.thread_time() - start_thread
    if report.events != len(records):
        raise SystemExit(f"end to end stored {report.events} of {len(records)} events")
    return spent, thread


def measure_end_to_end(records: Sequence[SourceRecord]) -> dict[str, float]:
    """``run_batch`` into embedded chDB: CPU µs per event beyond start-up (all threads, the
    pipeline's thread, the others: warehouse calls and chDB's threads), and events/s."""
    with tempfile.TemporaryDirectory(prefix="intake-cost-") as tmp:
        root = Path(tmp)
        startup, startup_thread = _run_once(records[:1], root, "startup")
        wall = time.perf_counter()
        total, thread = _run_once(records, root, "full")
        wall = time.perf_counter() - wall
    n = len(records)
    beyond, beyond_thread = max(0.0, total - startup), max(0.0, thread - startup_thread)
    return {
        "start-up CPU s": startup,
        "end to end µs/event": beyond / n * 1e6,
        "end to end, pipeline thread µs/event": beyond_thread / n * 1e6,
        "end to end, other threads µs/event": max(0.0, beyond - beyond_thread) / n * 1e6,
        "end to end events/s (wall)": n / wall,
    }


def profile(stage: str, records: Sequence[SourceRecord]) -> None:
    """Print the cProfile top 15 (cumulative and own time) of one stage."""
    options, redactor = DecodeOptions(), Redactor()
    events = [
        e for r in records if isinstance(e := decode_record(r, "jsonl", options), RefusalEvent)
    ]
    cfg = load_settings(None)
    bundles = load_bundles(cfg.policy_bundles)
    engine = LocalEngine(cfg.local_false_positive_threshold)
    refusals = [e for e, d in zip(events, detect_refusals(events), strict=True) if d.is_refusal]
    batches = make_batches(refusals, cfg.batch_max_events, None)
    work: dict[str, Callable[[], object]] = {
        "decode": lambda: [decode_record(r, "jsonl", options) for r in records],
        "redaction": lambda: [redact_event(e, redactor) for e in events],
        "prefilter": lambda: detect_refusals(events),
        "tokens": lambda: [event_tokens(e) for e in refusals],
        "engine": lambda: [engine.audit_sync(b.events, bundles[b.policy_bundle]) for b in batches],
        "end-to-end": lambda: measure_end_to_end(records),
    }
    prof = cProfile.Profile()
    prof.runcall(work[stage])
    stats = pstats.Stats(prof, stream=sys.stdout)
    stats.sort_stats("tottime").print_stats(15)
    stats.sort_stats("cumulative").print_stats(15)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, measure, print the table (or JSON)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--data", type=Path, nargs="*", default=[])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-end-to-end", action="store_true")
    p.add_argument("--cascade-band", type=float, nargs=2, default=[0.3, 0.7],
                   metavar=("LOW", "HIGH"))  # fmt: skip
    p.add_argument("--no-cascade", action="store_true")
    p.add_argument("--profile", choices=["decode", "redaction", "prefilter", "tokens", "engine",
                                         "end-to-end"])  # fmt: skip
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    records = build_records(args.events, args.data)
    if args.profile:
        profile(args.profile, records)
        return 0
    band = None if args.no_cascade else (args.cascade_band[0], args.cascade_band[1])
    figures: dict[str, float] = measure_stages(records, args.repeat, band)
    figures["intake + local engine"] = sum(
        figures[k] for k in ("decode+validate", "fingerprint", "redaction", "pre-filter",
                             "local engine")
    )  # fmt: skip
    if band is not None:
        figures["intake + local engine, cascade on"] = (
            figures["intake + local engine"] + figures["cascade"]
        )
    if not args.no_end_to_end:
        figures.update(measure_end_to_end(records))
    if args.json:
        extra = {"cascade band": list(band)} if band is not None else {}
        print(orjson.dumps({"events": len(records), **extra, **figures}).decode())
        return 0
    print(
        f"{len(records)} events; CPU µs per event (time.process_time, best of {args.repeat})"
        + (f"; cascade band [{band[0]:g}, {band[1]:g})" if band is not None else "")
    )
    for name, value in figures.items():
        digits = 3 if name == "cascade reached" else 1
        print(f"  {name:<36} {value:>10.{digits}f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
