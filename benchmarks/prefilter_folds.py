"""Leave-one-source-out figures of the refusal pre-filter: cue scorer vs trained model.

Reads the labelled responses of ../shared/data through ``refusal_audit.training.labels``
(XSTest GPT-4 and Llama-2, GPTFuzz, Reuter, CoCoNot refusals and contrast answers), then for
every outer fold trains the model without it (threshold by the inner leave-one-source-out
rule of ``refusal_audit.training.refusal``) and scores the held-out rows, beside the cue
scorer on the same rows. Precision and recall carry Wilson 95% intervals, F1 a percentile
bootstrap 95% interval (1,000 resamples, seed 0).

``--ablation`` repeats the folds with feature families left out (F1 per fold; slow: about a
minute per row on two cores). ``--cost`` measures CPU microseconds per event of the cue
scorer and of the trained scorer on batches of 1,000 responses, using the shipped artifact.

Run: ``python benchmarks/prefilter_folds.py [--shared-data DIR] [--ablation] [--cost]``;
its output is the pre-filter section of docs/evaluation.md.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from processors.prefilter import decide_from_cues
from processors.refusal_cues import read_cues
from processors.refusal_model import FAMILIES, RefusalModel
from refusal_audit.training.labels import load_refusal_examples
from refusal_audit.training.refusal import build_dataset, fold_table, leave_one_source_out

REPO = Path(__file__).resolve().parents[1]

ABLATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("all families", FAMILIES),
    ("without char n-grams", tuple(f for f in FAMILIES if f != "char_opening")),
    ("without word n-grams", tuple(f for f in FAMILIES if not f.startswith("word"))),
    ("without cue features", tuple(f for f in FAMILIES if f != "cues")),
    ("without shape features", tuple(f for f in FAMILIES if f != "shape")),
    ("n-grams only (word + char)", ("word_opening", "word_text", "char_opening")),
    ("cues + shape only", ("cues", "shape")),
)


def ablation_table(shared_data: Path) -> str:
    """Markdown table: F1 of the trained model per held-out fold for each family subset."""
    rows = load_refusal_examples(shared_data)
    header: list[str] | None = None
    lines: list[str] = []
    cue_f1: list[float] = []
    for label, families in ABLATIONS:
        results = leave_one_source_out(build_dataset(rows, families))
        if header is None:
            header = [str(r["fold"]) for r in results]
            cue_f1 = [float(r["cues"]["f1"]) for r in results]
        f1 = [float(r["trained"]["f1"]) for r in results]
        lines.append(_ablation_row(label, f1))
    assert header is not None
    head = "| features | " + " | ".join(header) + " | min | mean |"
    sep = "| --- " * (len(header) + 3) + "|"
    return "\n".join([head, sep, _ablation_row("cue scorer (no training)", cue_f1), *lines])


def _ablation_row(label: str, f1: Sequence[float]) -> str:
    cells = " | ".join(f"{v:.3f}" for v in f1)
    return f"| {label} | {cells} | {min(f1):.3f} | {float(np.mean(f1)):.3f} |"


def cost(shared_data: Path, model: RefusalModel, batch: int = 1000) -> dict[str, float]:
    """CPU µs per event (``time.process_time``) on the first ``batch`` responses of each
    source: cue scorer alone; trained scorer (cue reading + features + one product)."""
    rows = load_refusal_examples(shared_data)
    texts = [r.text for r in rows]
    rng = np.random.default_rng(0)
    sample = [texts[i] for i in rng.choice(len(texts), size=batch, replace=False)]
    for t in sample[:50]:  # warm up regexes and vectorizers
        decide_from_cues(read_cues(t))
    model.scores([read_cues(t) for t in sample[:50]])
    t0 = time.process_time()
    for t in sample:
        decide_from_cues(read_cues(t))
    cues_us = (time.process_time() - t0) / batch * 1e6
    t0 = time.process_time()
    readings = [read_cues(t) for t in sample]
    t1 = time.process_time()
    model.scores(readings)
    t2 = time.process_time()
    t3 = time.process_time()
    for r in readings[:200]:
        model.scores([r])
    single = (time.process_time() - t3) / 200 * 1e6
    return {
        "cue_scorer_us": cues_us,
        "trained_total_us": (t2 - t0) / batch * 1e6,
        "trained_model_part_us": (t2 - t1) / batch * 1e6,
        "trained_model_part_batch_of_one_us": single,
        "mean_chars": float(np.mean([len(t) for t in sample])),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Print the fold table (and the ablation / cost when asked); return the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shared-data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--ablation", action="store_true", help="also the ablation table")
    parser.add_argument("--cost", action="store_true", help="also CPU µs per event")
    args = parser.parse_args(argv)
    rows = load_refusal_examples(args.shared_data)
    results = leave_one_source_out(build_dataset(rows))
    print(fold_table(results))
    out: dict[str, Any] = {"folds": results}
    if args.ablation:
        print()
        print(ablation_table(args.shared_data))
    if args.cost:
        from refusal_audit.audit.prefilter_model import load_shipped_model

        figures = cost(args.shared_data, load_shipped_model())
        out["cost"] = figures
        print()
        print(
            f"CPU per event (batches of 1,000 responses, mean {figures['mean_chars']:.0f} "
            f"chars): cue scorer {figures['cue_scorer_us']:.0f} µs; trained scorer "
            f"{figures['trained_total_us']:.0f} µs (of which features + product "
            f"{figures['trained_model_part_us']:.0f} µs; "
            f"{figures['trained_model_part_batch_of_one_us']:.0f} µs when scored one by one)"
        )
    return out


if __name__ == "__main__":
    main()
