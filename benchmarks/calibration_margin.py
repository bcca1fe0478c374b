"""The refusal margin of the calibration regression check, from the detector's scores on XSTest.

``python benchmarks/calibration_margin.py [--shared-data DIR]`` prints, for thresholds from
0.5 to 0.99, how many of XSTest v2's human-labelled compliant completions and refusals
(GPT-4 and Llama-2, 900 rows) the cue scorer (``processors.prefilter``) scores at or above
it, and the 95th/99th percentile of the compliant completions' scores: the source of
``processors.calibration.regression.REFUSAL_MARGIN_SCORE``. Then what the regression
check's ``informational`` rule (``processors.calibration.regression.informational``) costs
on real refusals: the share of XSTest's completions, per human label (full compliance, full
refusal, partial refusal), in which it flags a sentence when they are read as variants of a
refusal under clause AUP-2.3 (the figures in docs/calibration.md).
"""

from __future__ import annotations

import argparse
import csv
from collections import Counter
from pathlib import Path

import numpy as np

from processors.calibration.regression import REFUSAL_MARGIN_SCORE, informational
from processors.prefilter import detect_refusal_text
from refusal_audit.training.labels import XSTEST_FILES, load_xstest


def main() -> None:
    """Print the table (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shared-data", type=Path, default=Path("../shared/data"))
    args = parser.parse_args()
    rows = [r for s in ("xstest-gpt4", "xstest-llama2") for r in load_xstest(args.shared_data, s)]
    scores = np.array([detect_refusal_text(r.text).score for r in rows])
    refusal = np.array([r.is_refusal for r in rows])
    compliant, refused = scores[~refusal], scores[refusal]
    print(f"{len(compliant)} compliant, {len(refused)} refusals")
    q95, q99 = np.quantile(compliant, [0.95, 0.99])
    print(f"compliant scores: 95th percentile {q95:.3f}, 99th {q99:.3f}")
    print("threshold | compliant >= t | refusals >= t | precision")
    for t in sorted({0.5, 0.7, 0.8, 0.9, REFUSAL_MARGIN_SCORE, 0.98, 0.99}):
        fp, tp = int((compliant >= t).sum()), int((refused >= t).sum())
        mark = "  <- REFUSAL_MARGIN_SCORE" if t == REFUSAL_MARGIN_SCORE else ""
        print(f"{t:.2f} | {fp} ({fp / len(compliant):.4f}) | {tp} ({tp / len(refused):.3f}) | "
              f"{tp / (tp + fp):.4f}{mark}")  # fmt: skip

    informational_cost(args.shared_data)


def informational_cost(shared_data: Path, clause_id: str = "AUP-2.3") -> None:
    """Print, per XSTest ``final_label``, how many completions the ``informational`` rule
    flags (module docstring)."""
    total: Counter[str] = Counter()
    flagged: Counter[str] = Counter()
    for source in ("xstest-gpt4", "xstest-llama2"):
        path = shared_data / "xstest" / XSTEST_FILES[source]
        with path.open(newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                total[row["final_label"]] += 1
                flagged[row["final_label"]] += bool(informational(row["completion"], clause_id))
    print(f"informational rule (clause {clause_id}): label | flagged | share")
    for label in sorted(total):
        print(f"{label} | {flagged[label]} of {total[label]} | {flagged[label] / total[label]:.1%}")


if __name__ == "__main__":
    main()
