"""The circumvention check on the circumvention corpus (issue 25, item 5).

Prints the leave-one-domain-out cross-validation on ``datasets/circumvention/dev.jsonl``
(threshold chosen on the out-of-fold scores at recall >= 0.90, vetoes included) for the
shipped feature set and, when the encoder is installed, with the encoder features of
``all-minilm-l6-v2-q``; the old rules on dev for reference; and, with ``--heldout`` only,
the shipped check on ``datasets/circumvention/heldout.jsonl`` (precision, recall, Wilson 95%
intervals, recall per rubric code), the same figures as
``refusal-audit clarify eval datasets/circumvention/heldout.jsonl``.

The held-out file is read only with ``--heldout``: it is for the one final report, never for
choosing anything (datasets/circumvention/README.md).

Run: ``.venv/bin/python benchmarks/circumvention_check.py [--heldout]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from processors.clarification.circumvention_model import RULES_CHECK, CircumventionCheck
from refusal_audit.circumvention_check import load_circumvention_model
from refusal_audit.clarify.evaluate import corpus_set, score_fixture
from refusal_audit.training import circumvention as training

CORPUS = Path(__file__).resolve().parents[1] / "datasets" / "circumvention"


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


def cv_table(encoder: object | None) -> None:
    """Print the leave-one-domain-out table for one feature set."""
    sets = training.load_dev()
    x = training.features(sets, encoder)  # type: ignore[arg-type]
    cv = training.cross_validate(sets, x)
    name = getattr(encoder, "name", "none")
    print(f"\n## dev, leave-one-domain-out, encoder {name}, threshold {cv['threshold']:.3f}")
    print(f"overall  {_pr(cv['overall'])}")
    for domain, r in cv["domains"].items():
        p, rc = r["precision"]["rate"], r["recall"]["rate"]
        print(f"  {domain:32s} P {_num(p)}  R {_num(rc)}")


def _fixture(path: Path) -> list[Any]:
    import json

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
    cv_table(None)
    try:
        from refusal_audit.config import load_settings
        from refusal_audit.encoders.runtime import OnnxEncoder

        cv_table(OnnxEncoder.load("all-minilm-l6-v2-q", load_settings()))
    except Exception as exc:  # the encoder is optional here
        print(f"\n(encoder variant skipped: {exc})")
    dev = _fixture(CORPUS / "dev.jsonl")
    _print_scored("old rules on dev (not fitted on it)", score_fixture(dev, RULES_CHECK))
    check = CircumventionCheck(load_circumvention_model())
    _print_scored("shipped check on dev (in-sample)", score_fixture(dev, check))
    if args.heldout:
        _print_scored(
            "shipped check on HELD-OUT", score_fixture(_fixture(CORPUS / "heldout.jsonl"), check)
        )


if __name__ == "__main__":
    main()
