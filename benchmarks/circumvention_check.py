"""The circumvention check on the circumvention corpus (issue 25, item 5).

Prints, on ``datasets/circumvention/dev.jsonl`` with leave-one-domain-out (each of the 20
domains scored by a model fitted on the other 19; threshold chosen on the out-of-fold scores
at recall >= 0.90, vetoes included):

- ``rules``: the deterministic rules (nothing fitted: their dev figures are out-of-fold by
  construction);
- ``old trained``: the unconstrained set-level logistic regression shipped before issue 25's
  monotone model (rubric features, shares of good practice, old rules as set features;
  ``LogisticRegression(C=0.3, class_weight="balanced")``), rebuilt here for comparison;
- ``monotone``: the shipped model's procedure (``refusal_audit.training.circumvention``:
  per-question sign-constrained logistic scores, noisy-OR over the set, ``C`` chosen by the
  same cross-validation), and the same with the encoder features of ``all-minilm-l6-v2-q``
  when that encoder is installed.

With ``--heldout`` only, it then scores the rules and the shipped check on
``datasets/circumvention/heldout.jsonl`` (precision, recall, Wilson 95% intervals, recall per
rubric code: the figures of ``refusal-audit clarify eval datasets/circumvention/heldout.jsonl``).
The held-out file is read only with ``--heldout``: it is for the one final report, never for
choosing anything (datasets/circumvention/README.md).

Run: ``.venv/bin/python benchmarks/circumvention_check.py [--heldout]``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from processors.clarification.circumvention_model import (
    RULE_CODES,
    RULES_CHECK,
    CircumventionCheck,
    feature_names,
    feature_signs,
)
from processors.clarification.circumvention_rubric import set_features
from processors.text_encoder import TextEncoder
from refusal_audit.clarification.circumvention_check import load_circumvention_model
from refusal_audit.clarification.evaluation import corpus_set, score_fixture
from refusal_audit.training import circumvention as training
from refusal_audit.training.circumvention_corpus import DevSet, load_dev

CORPUS = Path(__file__).resolve().parents[1] / "datasets" / "circumvention"
OLD_C = 0.3
"""The old trained model's ``C`` (chosen among 0.1, 0.3, 1, 3 by the same CV in cv2)."""


def _pr(r: dict[str, Any]) -> str:
    p, rc = r["precision"], r["recall"]
    return (
        f"P {p['rate']:.3f} [{p['low']:.3f}, {p['high']:.3f}]  "
        f"R {rc['rate']:.3f} [{rc['low']:.3f}, {rc['high']:.3f}]  "
        f"(rejected bad {r['rejected_bad']}, rejected good {r['rejected_good']}, "
        f"passed bad {r['passed_bad']})"
    )


def _num(v: float | None) -> str:
    return "  n/a" if v is None else f"{v:.3f}"


def _print_cv(title: str, cv: dict[str, Any], per_domain: bool = False) -> None:
    print(f"\n## dev, leave-one-domain-out: {title}, threshold {cv['threshold']:.3f}")
    print(f"overall  {_pr(cv['overall'])}")
    if per_domain:
        for domain, r in cv["domains"].items():
            p, rc = r["precision"]["rate"], r["recall"]["rate"]
            print(f"  {domain:32s} P {_num(p)}  R {_num(rc)}")


def old_trained_oof(sets: Sequence[DevSet]) -> np.ndarray:
    """Out-of-fold probabilities of the old unconstrained set-level model (module
    docstring), leave-one-domain-out."""
    from sklearn.linear_model import LogisticRegression

    def row(s: DevSet) -> list[float]:
        codes = set(RULES_CHECK.check_questions(s.questions, s.request, s.refusal).reasons)
        return set_features(s.questions, s.request) + [float(c in codes) for c in RULE_CODES]

    x = np.asarray([row(s) for s in sets], np.float64)
    y = np.array([s.reject for s in sets], dtype=int)
    domains = np.array([s.domain for s in sets])
    oof = np.zeros(len(sets))
    for d in sorted(set(domains)):
        test = domains == d
        mean, scale = x[~test].mean(axis=0), x[~test].std(axis=0)
        scale[scale == 0] = 1.0
        lr = LogisticRegression(C=OLD_C, class_weight="balanced", max_iter=5000)
        lr.fit((x[~test] - mean) / scale, y[~test])
        oof[test] = lr.predict_proba((x[test] - mean) / scale)[:, 1]
    return oof


def monotone_cv(sets: Sequence[DevSet], encoder: TextEncoder | None) -> dict[str, Any]:
    """The shipped procedure's leave-one-domain-out figures (``C`` chosen inside)."""
    signs = feature_signs(feature_names(encoder is not None))
    return training.cross_validate(sets, training.features(sets, encoder), signs)


def _fixture(path: Path) -> list[Any]:
    return [corpus_set(json.loads(line)) for line in path.read_text().splitlines() if line]


def _print_scored(title: str, figures: dict[str, Any]) -> None:
    c = figures["confusion"]
    print(f"\n## {title}: {figures['sets']} sets, {c}")
    for name in ("precision", "recall"):
        r = figures[name]
        print(f"  {name:9s} {r['rate']:.3f} [{r['low']:.3f}, {r['high']:.3f}]")
    for code, r in figures.get("recall_by_code", {}).items():
        print(f"  recall {code:20s} {r['rate']:.3f} ({r['successes']} of {r['trials']})")


def main() -> None:
    """Print the tables (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heldout", action="store_true", help="also score the held-out file")
    args = parser.parse_args()
    sets = load_dev()
    dev = _fixture(CORPUS / "dev.jsonl")
    _print_scored("rules on dev (nothing fitted)", score_fixture(dev, RULES_CHECK))
    _print_cv("old trained (unconstrained)", training.cv_figures(sets, old_trained_oof(sets)))
    cv = monotone_cv(sets, None)
    _print_cv(f"monotone (C = {cv['C']})", cv, per_domain=True)
    try:
        from refusal_audit.config import load_settings
        from refusal_audit.encoders.runtime import OnnxEncoder

        encoder = OnnxEncoder.load("all-minilm-l6-v2-q", load_settings())
        cv = monotone_cv(sets, encoder)
        _print_cv(f"monotone + MiniLM features (C = {cv['C']})", cv)
    except Exception as exc:  # the encoder is optional here
        print(f"\n(encoder variant skipped: {exc})")
    check = CircumventionCheck(load_circumvention_model())
    _print_scored("shipped check on dev (in-sample)", score_fixture(dev, check))
    if args.heldout:
        heldout = _fixture(CORPUS / "heldout.jsonl")
        _print_scored("rules on HELD-OUT", score_fixture(heldout, RULES_CHECK))
        _print_scored("shipped check on HELD-OUT", score_fixture(heldout, check))


if __name__ == "__main__":
    main()
