"""What the drift detectors see on a real model shift, with ground truth and with the local engine.

The XSTest refusals of Llama-2 (original system prompt) are replayed as one hourly window and
GPT-4's as the next (same model name "chat", so the detectors see one scope change models),
then the second window is evaluated against the first (``alerts_baseline_windows`` = 1,
``alerts_min_events`` = 150). Printed per detector: whether it fired, the effect size and
the BH-adjusted p-value, twice:

(a) ground truth: assessments whose false-positive flag comes from the XSTest prompt type
    (``contrast_*`` = unsafe, refusing is correct; any other type = over-refusal) and whose
    category is the prompt type: what a perfect audit would show the detectors;
(b) the whole pipeline with the offline ``local`` engine (pre-filter, redaction, audit into
    an embedded chDB store): what the shipped offline engine lets the detectors see.

The replay's events arrive long after their event time, so the run sets the grace period to
a week; a real backfill needs the same (``alerts_grace_seconds``), or its events count as
late in the window they arrive in.

Run: ``python benchmarks/drift_shift.py [--shared-data DIR]``.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from processors.drift_detection import DetectorSettings, Evaluation, WindowCounts, evaluate
from refusal_audit.alerts.drift import DriftConfig, evaluate_windows
from refusal_audit.audit.batch import BatchOptions, run_batch
from refusal_audit.config import load_settings
from schemas.alerts import Scope
from warehouse.store import Warehouse

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("llama2orig", "gpt4")


def ground_truth(path: Path) -> WindowCounts:
    """Counts of the file's human-labelled refusals (false positive from the prompt type)."""
    with path.open(newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["final_label"] != "1_full_compliance"]
    return WindowCounts(
        refusals=len(rows),
        false_positives=sum(not r["type"].startswith("contrast_") for r in rows),
        categories=dict(Counter(r["type"] for r in rows)),
    )


def show(title: str, evaluation: Evaluation, scope: Scope) -> None:
    """Print one line per detector for ``scope``."""
    print(f"\n{title}")
    print(f"  {'detector':28} {'fired':6} {'effect':>10} {'q':>9}  note")
    for f in evaluation.findings:
        if f.scope != scope:
            continue
        q = f"{f.q_value:.2g}" if f.q_value is not None else "-"
        note = f.note or ("; ".join(f.moved[:3]) if f.moved else "")
        print(
            f"  {f.kind:28} {('yes' if f.status == 'alert' else 'no'):6} "
            f"{f.effect:>10.3f} {q:>9}  {note}"
        )


def main(argv: list[str] | None = None) -> int:
    """Run both replays and print the detector table; 2 when the data is missing."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared-data", type=Path, default=ROOT.parent / "shared" / "data")
    args = parser.parse_args(argv)
    files = [args.shared_data / "xstest" / f"xstest_v2_completions_{m}.csv" for m in MODELS]
    if not all(f.is_file() for f in files):
        print(f"XSTest files not found under {args.shared_data}", file=sys.stderr)
        return 2
    detectors = DetectorSettings(min_events=150)
    scope = Scope(policy_bundle="default", model="chat", product="xstest")

    truth = {m: ground_truth(f) for m, f in zip(MODELS, files, strict=True)}
    show(
        "(a) ground-truth assessments: gpt4 window vs llama2orig baseline",
        evaluate({scope: truth["gpt4"]}, {scope: truth["llama2orig"]}, 1, detectors),
        scope,
    )
    for m in MODELS:
        t = truth[m]
        print(f"  {m}: {t.refusals} refusals, {t.false_positives} over-refusals")

    t0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    with tempfile.TemporaryDirectory(prefix="drift-shift-") as tmp:
        cfg = load_settings(
            data_dir=Path(tmp),
            alerts_grace_seconds=7 * 24 * 3600,
            alerts_baseline_windows=1,
            alerts_min_events=150,
        )
        for i, path in enumerate(files):
            at = t0 + timedelta(hours=i, minutes=10)
            options = BatchOptions.build("xstest-csv", None, at, "chat", None)
            report = run_batch(cfg, [path], options)
            print(
                f"  local engine, {path.name}: {report.refusals} refusals audited "
                f"(pre-filter), {sum(a.is_estimated_false_positive for a in report.assessments)}"
                " estimated over-refusals"
            )
        store = Warehouse.open(cfg)
        try:
            [result] = evaluate_windows(
                store.client,
                store.database,
                DriftConfig.from_settings(cfg),
                now=datetime.now(UTC),
                windows=[t0 + timedelta(hours=1)],
            )
        finally:
            store.close()
    scope_bundle = next(
        (f.scope for f in result.evaluation.findings if f.scope.model == "chat"), scope
    )
    show("(b) local engine through the whole pipeline", result.evaluation, scope_bundle)
    for alert in result.alerts:
        print(f"\n  {alert.kind} [{alert.severity}] {alert.alert_id}\n  {alert.summary[:400]}...")
    return 0


if __name__ == "__main__":
    sys.exit(main())
