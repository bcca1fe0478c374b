"""Held-out figures of the local engine's over-refusal score and category model.

Runs ``refusal_audit.training.triage_eval.run`` (the figures ``refusal-audit train`` stores in
the category model's metadata and the README's generated table shows): CoCoNot top-level
category agreement (5 stratified folds, and each subcategory held out), over-refusal ROC AUC
of the cue score and of a trained request-side head (prompt-type pairs or whole sources held
out), and XSTest end to end. Every figure is the real engine with the example bundle.

``--ablation`` repeats the category folds with feature families left out (agreement with
Wilson 95% intervals; a few minutes per row on two cores).

Run: ``python benchmarks/triage_folds.py [--shared-data DIR] [--ablation] [--json]``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from processors.category_model import CATEGORY_FAMILIES
from refusal_audit.training import triage_eval
from refusal_audit.training.labels import load_triage_examples
from refusal_audit.training.triage import build_data

REPO = Path(__file__).resolve().parents[1]

ABLATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("all families", CATEGORY_FAMILIES),
    (
        "without request character n-grams",
        tuple(f for f in CATEGORY_FAMILIES if f != "request_chars"),
    ),
    ("without request word n-grams", tuple(f for f in CATEGORY_FAMILIES if f != "request_words")),
    ("without refusal word n-grams", tuple(f for f in CATEGORY_FAMILIES if f != "response_words")),
    ("without cue features", tuple(f for f in CATEGORY_FAMILIES if not f.endswith("_cues"))),
    ("refusal only (words + cues)", ("response_words", "response_cues")),
    ("request only (words, chars, cues)", ("request_words", "request_chars", "request_cues")),
)


def ablation(shared_data: Path) -> str:
    """Markdown table: category agreement per feature-family subset."""
    bundle = triage_eval.example_bundle()
    data = build_data(load_triage_examples(shared_data))
    lines = [
        "| features | 5 stratified folds | subcategory held out |",
        "| --- | --- | --- |",
    ]
    for name, families in ABLATIONS:
        r = triage_eval.category_folds(data, bundle, families, with_cues=False)
        five, sub = r["trained, 5 stratified folds"], r["trained, subcategory held out"]
        lines.append(
            f"| {name} | {triage_eval.ci_text(five['rate'], five['ci'])} | "
            f"{triage_eval.ci_text(sub['rate'], sub['ci'])} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared-data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--ablation", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.ablation:
        print(ablation(args.shared_data))
        return 0
    results = triage_eval.run(args.shared_data)
    print(
        json.dumps(results, indent=2, default=str) if args.json else triage_eval.markdown(results)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
