"""Benchmark of the offline pipeline on the real labelled logs in ../shared/data.

Prints, for the refusal pre-filter and the ``local`` engine:
- refusal detection precision / recall / F1 against XSTest's human labels (both models);
- over-refusal (false-positive) detection on XSTest's human-labelled refusals: precision,
  recall at the engine's threshold and ROC AUC of its score, against the prompt types
  (``contrast_*`` = unsafe, so refusing is correct; all other types are safe prompts);
- top-level category agreement on CoCoNot (its categories mapped onto our taxonomy);
- throughput in events per second (intake + engine, no storage).

Run: ``make bench`` (or ``python benchmarks/local_engine.py [--shared-data DIR] [--json]``).
Wilson 95% intervals accompany every rate.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from sklearn.metrics import roc_auc_score

from processors.adapters import (
    DecodeFailure,
    DecodeOptions,
    FieldMapping,
    InputFormat,
    SourceRecord,
    decode_record,
)
from processors.batching import make_batches
from processors.engines.local import LocalEngine
from processors.evaluation import COCONOT_CATEGORY_MAP, REFUSAL_LABELS, rate
from processors.intake import IntakeSettings, prepare
from processors.redaction import Redactor
from refusal_audit.bundles import load_bundle
from refusal_audit.config import load_settings
from refusal_audit.readers import read_records
from schemas.events import RefusalEvent, StoredEvent

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# the same label rules and mapping as `refusal-audit eval`
COCONOT_TO_TAXONOMY = COCONOT_CATEGORY_MAP


def load(path: Path, fmt: InputFormat, options: DecodeOptions) -> list[RefusalEvent]:
    """Decode every record of a file; records that do not decode are reported and skipped."""
    events: list[RefusalEvent] = []
    for record in read_records(path, fmt, options.max_record_bytes):
        decoded = decode_record(record, fmt, options)
        if isinstance(decoded, DecodeFailure):
            print(f"skipped {path.name} {record.location}: {decoded.reason}", file=sys.stderr)
            continue
        events.append(decoded)
    return events


def prepared(events: Sequence[RefusalEvent], intake: IntakeSettings) -> list[StoredEvent]:
    """Run intake (redaction + pre-filter) on already-decoded events."""
    out: list[StoredEvent] = []
    for e in events:
        rec = SourceRecord("bench", e.log_id, e.model_dump_json().encode())
        result = prepare(rec, "jsonl", intake, T0)
        if not isinstance(result, StoredEvent):
            raise SystemExit(f"intake rejected {e.log_id}: {result.reason}")
        out.append(result)
    return out


def audit_all(engine: LocalEngine, events: Sequence[RefusalEvent], bundle: Any,
              max_events: int, budget: int) -> tuple[dict[str, Any], dict[str, float]]:
    """Audit events in pipeline-sized batches; return assessments and FP scores by log_id."""
    assessments: dict[str, Any] = {}
    scores: dict[str, float] = {}
    for batch in make_batches(events, max_events, budget):
        output = asyncio.run(engine.audit(batch.events, bundle))
        assessments.update({a.log_id: a for a in output.result.individual_assessments})
        scores.update(output.false_positive_scores)
    return assessments, scores


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark and print its figures; return them as a dict."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared-data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    data: Path = args.shared_data
    settings = load_settings(None)
    bundle = load_bundle("default", settings.policy_bundles["default"])
    engine = LocalEngine(settings.local_false_positive_threshold)
    intake = IntakeSettings(decode=DecodeOptions(), known_bundles={"default"},
                            redactor=Redactor(settings.redaction_kinds))
    figures: dict[str, Any] = {"engine": f"{engine.name}/{engine.model}/{engine.version}"}

    # --- XSTest: refusal detection and over-refusal detection
    xs_events: list[RefusalEvent] = []
    for name in ("gpt4", "llama2orig"):
        path = data / "xstest" / f"xstest_v2_completions_{name}.csv"
        xs_events += load(path, "xstest-csv", DecodeOptions(default_event_time=T0))
    started = time.perf_counter()
    stored = prepared(xs_events, intake)
    truth = [e.attributes["final_label"] in REFUSAL_LABELS for e in xs_events]
    pred = [s.is_refusal for s in stored]
    tp = sum(t and p for t, p in zip(truth, pred, strict=True))
    fp = sum(p and not t for t, p in zip(truth, pred, strict=True))
    fn = sum(t and not p for t, p in zip(truth, pred, strict=True))
    precision, recall = rate(tp, tp + fp), rate(tp, tp + fn)
    f1 = 2 * precision["value"] * recall["value"] / (precision["value"] + recall["value"])
    figures["refusal_detection"] = {"precision": precision, "recall": recall, "f1": f1}

    refusals = [s.event for s, t in zip(stored, truth, strict=True) if t]
    assessments, scores = audit_all(engine, refusals, bundle, settings.batch_max_events,
                                    settings.batch_token_budget)
    elapsed_xs = time.perf_counter() - started
    over = {e.log_id: not e.attributes["type"].startswith("contrast_") for e in refusals}
    y_true = [over[e.log_id] for e in refusals]
    y_score = [scores[e.log_id] for e in refusals]
    flagged = [assessments[e.log_id].is_estimated_false_positive for e in refusals]
    tp2 = sum(t and f for t, f in zip(y_true, flagged, strict=True))
    figures["over_refusal_detection"] = {
        "refusals": len(refusals),
        "safe_prompt_refusals": sum(y_true),
        "precision": rate(tp2, sum(flagged)),
        "recall": rate(tp2, sum(y_true)),
        "roc_auc": float(roc_auc_score(y_true, y_score)),
    }

    # --- CoCoNot: category agreement (top level)
    co_path = data / "coconot" / "coconot_refusals.jsonl"
    mapping = FieldMapping.parse("request=prompt,response=response,log_id=id")
    co_events = load(co_path, "mapped-jsonl",
                     DecodeOptions(mapping=mapping, default_event_time=T0, default_model="coconot"))
    started = time.perf_counter()
    co_stored = prepared(co_events, intake)
    co_assess, _ = audit_all(engine, [s.event for s in co_stored], bundle,
                             settings.batch_max_events, settings.batch_token_budget)
    elapsed_co = time.perf_counter() - started
    confusion: Counter[tuple[str, str]] = Counter()
    for e in co_events:
        expected = COCONOT_TO_TAXONOMY[e.attributes["category"]]
        got = bundle.top_level(co_assess[e.log_id].category)
        confusion[(expected, got)] += 1
    agree = sum(n for (exp, got), n in confusion.items() if exp == got)
    figures["coconot_category_agreement"] = {
        "agreement": rate(agree, len(co_events)),
        "confusion": {f"{exp} -> {got}": n for (exp, got), n in sorted(confusion.items())},
    }
    n_events = len(xs_events) + len(co_events)
    figures["throughput_events_per_second"] = n_events / (elapsed_xs + elapsed_co)
    figures["events"] = n_events

    if args.json:
        print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
    else:
        print_text(figures)
    return figures


def _fmt(r: dict[str, float]) -> str:
    return f"{r['value']:.3f} [{r['low']:.3f}, {r['high']:.3f}] ({r['k']}/{r['n']})"


def print_text(f: dict[str, Any]) -> None:
    """Print the figures for people."""
    rd, od = f["refusal_detection"], f["over_refusal_detection"]
    cc = f["coconot_category_agreement"]
    print(f"engine: {f['engine']}")
    print("XSTest refusal detection (pre-filter vs human labels, 900 completions):")
    print(f"  precision {_fmt(rd['precision'])}\n  recall    {_fmt(rd['recall'])}\n"
          f"  F1        {rd['f1']:.3f}")
    print(f"XSTest over-refusal detection ({od['refusals']} human-labelled refusals, "
          f"{od['safe_prompt_refusals']} on safe prompts):")
    print(f"  precision {_fmt(od['precision'])}\n  recall    {_fmt(od['recall'])}\n"
          f"  ROC AUC   {od['roc_auc']:.3f}")
    print(f"CoCoNot top-level category agreement: {_fmt(cc['agreement'])}")
    for cell, n in cc["confusion"].items():
        print(f"    {cell}: {n}")
    print(f"throughput: {f['throughput_events_per_second']:.0f} events/s "
          f"(intake + local engine, {f['events']} events, no storage)")


if __name__ == "__main__":
    main(sys.argv[1:])
