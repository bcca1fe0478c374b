"""Refusal detection per source: the cue rules vs the request-aware stage, out of source.

Reads the labelled (request, response) pairs of ../shared/data through
``refusal_audit.training.labels.load_refusal_examples`` (XSTest GPT-4, XSTest Llama-2,
GPTFuzz, Reuter, CoCoNot refusals + contrast answers) and prints, per source, precision and
recall (Wilson 95% intervals) and F1 (percentile bootstrap 95%, 1,000 resamples, seed 0) of:

- ``cue rules``: ``processors.prefilter.detect_refusal_text`` (response only; nothing fitted);
- ``request-aware stage``: ``processors.prefilter.detect_refusal_texts`` with the
  requests (the cue rules corrected by ``processors.request_aware.override``). Nothing is
  fitted, but its rules were shaped by error analysis on these same sources: read the
  figures as design-time figures, not as out-of-source ones;
- ``logistic (LOSO)``: for comparison, an L2 logistic regression (scikit-learn, ``C`` =
  :data:`C`, per-source weights ``sqrt(N / (S * n_source))``, threshold 0.5) over
  ``processors.request_aware.pair_features`` (cue and request features), fitted *without*
  the source it is scored on (five folds, one per source). Not shipped.

``--strict-xstest`` also drops the other XSTest model from the logistic model's training when
an XSTest model is held out (its prompts are the same 450).
``--fit`` prints the logistic model's weights fitted on all rows (in-sample; to read, not to
ship). ``--cost`` prints CPU µs per event over examples/refusal_log.jsonl (as
benchmarks/intake_cost.py reads it): the cue rules alone vs the cue rules plus the
request-aware stage, via ``processors.prefilter.detect_refusals``.

Run: ``python benchmarks/refusal_detection_loso.py [--shared-data DIR] [--fit]
[--strict-xstest] [--cost] [--json FILE]``. Its output is the request-aware section of
docs/evaluation.md; ``--json benchmarks/results/refusal_detection.json`` feeds the README's
refusal detection table (``python -m refusal_audit.training.tables``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.linear_model import LogisticRegression

from processors.prefilter import decide_from_cues, detect_refusal_texts
from processors.refusal_cues import read_cues
from processors.request_aware import FEATURE_NAMES, pair_features, read_request_pair
from refusal_audit.training.labels import SOURCES, LabelledResponse, load_refusal_examples
from refusal_audit.training.refusal import binary_figures, source_weights
from refusal_audit.training.tables import request_aware

REPO = Path(__file__).resolve().parents[1]
#: Regularisation of the logistic model (fixed before any fold was scored).
C = 1.0


def featurise(rows: Sequence[LabelledResponse]) -> tuple[npt.NDArray[np.float64], Any]:
    """``(x shape (n, len(FEATURE_NAMES)), cue-rule decisions shape (n,))`` of ``rows``."""
    xs: list[tuple[float, ...]] = []
    cue_pred: list[bool] = []
    for r in rows:
        cues = read_cues(r.text)
        xs.append(pair_features(cues, read_request_pair(r.request, r.text, cues)))
        cue_pred.append(decide_from_cues(cues).is_refusal)
    return np.array(xs, dtype=np.float64), np.array(cue_pred, dtype=bool)


def fit(
    x: npt.NDArray[np.float64], y: npt.NDArray[np.bool_], source: npt.NDArray[np.str_]
) -> tuple[npt.NDArray[np.float64], float]:
    """Fit the logistic model; ``(weights shape (width,), bias)``."""
    model = LogisticRegression(C=C, max_iter=5000)
    model.fit(x, y, sample_weight=source_weights(source))
    return np.asarray(model.coef_[0], dtype=np.float64), float(model.intercept_[0])


def _prob(x: npt.NDArray[np.float64], w: npt.NDArray[np.float64], b: float) -> Any:
    return 1.0 / (1.0 + np.exp(-(x @ w + b)))


def evaluate(shared_data: Path, strict_xstest: bool = False) -> list[dict[str, Any]]:
    """One dict per source: ``source``, ``rules``, ``request_aware``, ``loso`` (binary_figures)
    and ``overrides`` (count of each request-aware override on the source's rows)."""
    rows = load_refusal_examples(shared_data)
    x, cue_pred = featurise(rows)
    y = np.array([r.is_refusal for r in rows], dtype=bool)
    source = np.array([r.source for r in rows])
    decisions = detect_refusal_texts([r.text for r in rows], None, [r.request for r in rows])
    staged = np.array([d.is_refusal for d in decisions], dtype=bool)
    changed = np.array(
        [next((c for c in d.cues if c.startswith("request:")), "") for d in decisions]
    )
    out: list[dict[str, Any]] = []
    for held in SOURCES:
        test = source == held
        train = ~test
        if strict_xstest and held.startswith("xstest"):
            train &= ~np.char.startswith(source, "xstest")
        w, b = fit(x[train], y[train], source[train])
        pred = _prob(x[test], w, b) >= 0.5
        out.append(
            {
                "source": held,
                "rules": binary_figures(y[test], cue_pred[test]),
                "request_aware": binary_figures(y[test], staged[test]),
                "loso": binary_figures(y[test], pred),
                "overrides": {
                    name: {
                        "fired": int(np.sum(test & (changed == name))),
                        "right": int(
                            np.sum(
                                test
                                & (changed == name)
                                & (y == (name == "request:implicit_refusal"))
                            )
                        ),
                    }
                    for name in sorted(set(changed[test].tolist()) - {""})
                },
            }
        )
    return out


def cost(repeat: int = 5, cycles: int = 50) -> dict[str, float]:
    """CPU µs per event (best of ``repeat``) of ``detect_refusals`` over the example log
    cycled ``cycles`` times: without requests (cue rules) and with them (request-aware stage)."""
    import orjson

    from processors.prefilter import detect_refusals
    from schemas.events import RefusalEvent

    lines = (REPO / "examples" / "refusal_log.jsonl").read_bytes().splitlines()
    events = [RefusalEvent.model_validate(orjson.loads(x)) for x in lines if x.strip()] * cycles
    blank = [e.model_copy(update={"request": ""}) for e in events]
    figures: dict[str, float] = {"events": float(len(events))}
    for name, batch in (("cue_rules_us", blank), ("request_aware_us", events)):
        best = float("inf")
        for _ in range(repeat):
            t0 = time.process_time()
            detect_refusals(batch)
            best = min(best, time.process_time() - t0)
        figures[name] = best / len(batch) * 1e6
    return figures


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Print the per-source table (and the fit / cost when asked); return the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shared-data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--fit", action="store_true", help="print logistic weights, all rows")
    parser.add_argument("--strict-xstest", action="store_true")
    parser.add_argument("--cost", action="store_true", help="also CPU µs per event")
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="also write the per-source figures to this JSON file "
        "(benchmarks/results/refusal_detection.json feeds the README table)",
    )
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    if args.fit:
        rows = load_refusal_examples(args.shared_data)
        x, _ = featurise(rows)
        w, b = fit(
            x,
            np.array([r.is_refusal for r in rows], dtype=bool),
            np.array([r.source for r in rows]),
        )
        for name, value in zip(FEATURE_NAMES, w, strict=True):
            print(f"{name:28s} {value:8.4f}")
        print(f"{'bias':28s} {b:8.4f}")
        out["fit"] = (w, b)
        return out
    results = evaluate(args.shared_data, args.strict_xstest)
    out["results"] = results
    print(request_aware(results), end="")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    if args.cost:
        figures = cost()
        out["cost"] = figures
        print()
        print(
            f"CPU per event over examples/refusal_log.jsonl ({figures['events']:.0f} events): "
            f"cue rules {figures['cue_rules_us']:.1f} µs; cue rules + request-aware stage "
            f"{figures['request_aware_us']:.1f} µs"
        )
    return out


if __name__ == "__main__":
    main()
