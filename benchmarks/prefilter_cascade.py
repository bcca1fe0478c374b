"""The refusal cascade's trade-off curve: F1 per source and CPU per event against the band.

Issue 25, item 3. For every band of ``refusal_audit.training.refusal_cascade.CURVE_BANDS``
(``[0.5, 0.5)`` is the cascade off, the cue scorer alone) this prints:

- **quality, out of source**: refusal F1 per labelled source when the encoder head decides
  the rows whose cue score lies in the band, each source scored by a head fitted on the
  other sources (XSTest folds without any XSTest row), with the share of the source's rows
  that reached the encoder. Nothing here is in-sample.
- **cost**: on the example log (``examples/refusal_log.jsonl`` cycled with fresh log ids,
  redacted as intake does), the CPU µs per event of the pre-filter plus the cascade
  (``time.process_time``, best of ``--repeat``) and the share of events that reached the
  encoder. The whole intake's cost is this figure plus the other stages of
  ``benchmarks/intake_cost.py``.

Needs the shared data (``--shared-data``, default ``../shared/data``) and the fetched int8
MiniLM encoder (``make install``). Run: ``python benchmarks/prefilter_cascade.py [--events N]
[--repeat R] [--json]``. Encoding the labelled rows takes a few minutes on one core.
``--json > benchmarks/results/prefilter_cascade.json`` feeds the generated tables (the curve
in docs/evaluation.md, the cascade column of the README's detection table:
``python -m refusal_audit.training.tables``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from inference.model_files import load_head
from processors.prefilter import detect_refusals
from processors.redaction import Redactor, redact_event
from processors.refusal_cascade import Cascade, CascadeBand
from refusal_audit.audit.prefilter_cascade import HEAD_STEM
from refusal_audit.config import Settings
from refusal_audit.encoders.runtime import OnnxEncoder
from refusal_audit.training.labels import load_refusal_examples
from refusal_audit.training.refusal_cascade import (
    CURVE_BANDS,
    ENCODER,
    build_data,
    curve,
    out_of_source,
)
from refusal_audit.training.tables import cascade_curve
from schemas.events import RefusalEvent

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "refusal_log.jsonl"


def example_events(n: int) -> list[RefusalEvent]:
    """``n`` redacted events cycled from the example log, each with a fresh log id."""
    rows = [orjson.loads(x) for x in EXAMPLE.read_bytes().splitlines() if x.strip()]
    redactor = Redactor()
    return [
        redact_event(
            RefusalEvent.model_validate({**rows[i % len(rows)], "log_id": f"bench-{i:08d}"}),
            redactor,
        )[0]
        for i in range(n)
    ]


def cost(events: Sequence[RefusalEvent], cascade: Cascade, repeat: int) -> dict[str, float]:
    """CPU µs per event of pre-filter + cascade and the share of events reaching the head."""
    requests = [e.request for e in events]
    responses = [e.response for e in events]
    best, reached = float("inf"), 0
    for _ in range(repeat):
        start = time.process_time()
        decided = detect_refusals(events)
        _, reached = cascade.decide(decided, requests, responses)
        best = min(best, time.process_time() - start)
    return {"us_per_event": best / len(events) * 1e6, "reached": reached / len(events)}


def main(argv: Sequence[str] | None = None) -> int:
    """Print the curve (Markdown table, or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared-data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    encoder = OnnxEncoder.load(ENCODER, Settings())
    data = build_data(load_refusal_examples(args.shared_data), encoder)
    results: dict[str, Any] = {"curve": curve(data, out_of_source(data)), "cost": []}
    head = load_head(HEAD_STEM)
    events = example_events(args.events)
    for low, high in CURVE_BANDS:
        results["cost"].append(cost(events, Cascade(CascadeBand(low, high), head, encoder),
                                    args.repeat))  # fmt: skip
    if args.json:
        json.dump(results, sys.stdout, indent=2)
    else:
        print(cascade_curve(results), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
