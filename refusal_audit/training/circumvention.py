"""Train the circumvention model on the dev corpus, cross-validate it by domain, write the
artifact (``refusal_audit/models/circumvention_check.{npz,json,md}``).

Only ``datasets/circumvention/dev.jsonl`` is read here: the held-out file is for the one
final report (``refusal-audit clarify eval``), never for fitting or choosing anything.

Procedure (docs/clarification.md, "The circumvention check"):

1. features of each dev set (:func:`processors.clarification.circumvention_model.set_row`);
2. leave-one-domain-out: for each of the dev domains, standardise and fit a logistic
   regression (``C``, balanced class weights) on the other domains and score the held-back
   domain, so every dev set gets an out-of-fold probability;
3. the threshold is the highest one whose out-of-fold recall is at least
   :data:`TARGET_RECALL` (issue 25's recall target): recall is the figure the issue puts
   first for safety; precision is what that leaves;
4. the shipped model is refitted on all of dev with that threshold.

Run: ``python -m refusal_audit.training.circumvention [--encoder NAME]``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from processors.clarification.circumvention_model import (
    FORMAT_VERSION,
    CircumventionModel,
    content_hash,
    feature_names,
    model_from_arrays,
    prototype_vectors,
    set_row,
    vetoes,
)
from processors.stats import wilson_interval
from processors.text_encoder import TextEncoder

DEV_PATH = Path(__file__).resolve().parents[2] / "datasets" / "circumvention" / "dev.jsonl"
STEM = Path(__file__).resolve().parents[1] / "models" / "circumvention_check"
C = 0.3
"""Inverse regularisation (chosen among 0.1, 0.3, 1, 3 by leave-one-domain-out on dev)."""
TARGET_RECALL = 0.90
"""Out-of-fold recall the threshold must keep on dev (issue 25, item 5's recall target)."""


@dataclass(frozen=True)
class DevSet:
    """One dev set: domain, texts and label (True: ``reject``)."""

    set_id: str
    domain: str
    request: str
    refusal: str
    questions: list[str]
    reject: bool


def load_dev(path: Path = DEV_PATH) -> list[DevSet]:
    """The sets of a corpus file (``datasets/circumvention`` format)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            out.append(
                DevSet(
                    r["set_id"], r["domain"], r["request"], r["refusal"],
                    [q["question_text"] for q in r["questions"]], r["label"] == "reject",
                )
            )  # fmt: skip
    return out


def features(sets: list[DevSet], encoder: TextEncoder | None = None) -> np.ndarray:
    """The ``(len(sets), n_features)`` matrix (encoder columns only with ``encoder``)."""
    protos = prototype_vectors(encoder) if encoder is not None else None
    return np.asarray(
        [set_row(s.questions, s.request, s.refusal, encoder, protos) for s in sets], np.float64
    )


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    from sklearn.linear_model import LogisticRegression

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    lr = LogisticRegression(C=C, class_weight="balanced", max_iter=5000)
    lr.fit((x - mean) / scale, y)
    return lr.coef_[0].astype(np.float64), mean, scale, float(lr.intercept_[0])


def _proba(params: tuple[np.ndarray, np.ndarray, np.ndarray, float], x: np.ndarray) -> np.ndarray:
    w, mean, scale, b = params
    return np.asarray(1.0 / (1.0 + np.exp(-(((x - mean) / scale) @ w + b))))


def out_of_fold(sets: list[DevSet], x: np.ndarray) -> np.ndarray:
    """Leave-one-domain-out probabilities: shape ``(len(sets),)``."""
    y = np.array([s.reject for s in sets], dtype=int)
    domains = np.array([s.domain for s in sets])
    oof = np.zeros(len(sets))
    for d in sorted(set(domains)):
        test = domains == d
        oof[test] = _proba(_fit(x[~test], y[~test]), x[test])
    return oof


def vetoed(sets: list[DevSet]) -> np.ndarray:
    """1.0 for a set a veto detector rejects whatever its score, else 0.0."""
    return np.array([1.0 if vetoes(s.questions, s.request) else 0.0 for s in sets])


def choose_threshold(scores: np.ndarray, reject: np.ndarray) -> float:
    """The highest threshold (of the scores themselves, minus 1e-9) whose recall on
    ``reject`` is >= :data:`TARGET_RECALL`."""
    positives = np.sort(scores[reject.astype(bool)])[::-1]
    k = int(np.ceil(TARGET_RECALL * len(positives)))
    return float(min(max(positives[k - 1] - 1e-9, 1e-6), 1 - 1e-6))


def rates(scores: np.ndarray, reject: np.ndarray, threshold: float) -> dict[str, Any]:
    """Precision and recall (with Wilson 95% intervals) of ``scores >= threshold``."""
    p = scores >= threshold
    y = reject.astype(bool)
    tp, fp, fn = int((p & y).sum()), int((p & ~y).sum()), int((~p & y).sum())
    out: dict[str, Any] = {"rejected_bad": tp, "rejected_good": fp, "passed_bad": fn}
    for name, hits, n in (("precision", tp, tp + fp), ("recall", tp, tp + fn)):
        low, high = wilson_interval(hits, n)
        out[name] = {"rate": hits / n if n else None, "low": low, "high": high}
    return out


def cross_validate(sets: list[DevSet], x: np.ndarray) -> dict[str, Any]:
    """Leave-one-domain-out figures on dev: threshold chosen on the out-of-fold scores
    (:func:`choose_threshold`), overall and per held-back domain."""
    y = np.array([s.reject for s in sets])
    oof = np.maximum(out_of_fold(sets, x), vetoed(sets))
    threshold = choose_threshold(oof, y)
    domains = np.array([s.domain for s in sets])
    per_domain = {
        d: rates(oof[domains == d], y[domains == d], threshold) for d in sorted(set(domains))
    }
    return {"threshold": threshold, "overall": rates(oof, y, threshold), "domains": per_domain}


def build(
    encoder: TextEncoder | None = None, stem: Path = STEM, dev: Path = DEV_PATH
) -> tuple[CircumventionModel, dict[str, Any]]:
    """Cross-validate, refit on all of dev, write ``<stem>.npz``/``.json``/``.md``; return
    the loaded model and the CV figures."""
    sets = load_dev(dev)
    x = features(sets, encoder)
    cv = cross_validate(sets, x)
    y = np.array([s.reject for s in sets], dtype=int)
    w, mean, scale, b = _fit(x, y)
    spec = {
        "features": list(feature_names(encoder is not None)),
        "encoder": encoder.name if encoder is not None else None,
        "threshold": cv["threshold"],
        "bias": b,
        "C": C,
    }
    arrays = {"weights": w, "mean": mean, "scale": scale}
    meta = {
        "format_version": FORMAT_VERSION,
        "spec": spec,
        "content_hash": content_hash(spec, arrays),
        "trained_on": f"{dev.name} ({len(sets)} sets), {date.today().isoformat()}",
        "cv": cv["overall"],
    }
    stem.parent.mkdir(parents=True, exist_ok=True)
    np.savez(stem.with_suffix(".npz"), **arrays)  # type: ignore[arg-type]
    stem.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    stem.with_suffix(".md").write_text(_card(meta, w, spec["features"]), encoding="utf-8")
    return model_from_arrays(meta, arrays), cv


def _card(meta: dict[str, Any], w: np.ndarray, names: list[str]) -> str:
    top = sorted(zip(w, names, strict=True), key=lambda t: -abs(t[0]))[:12]
    cv = meta["cv"]
    lines = [
        "# Circumvention check model",
        "",
        "Logistic regression over rubric detectors and old rules (features of",
        "`processors/clarification/circumvention_model.py`), trained on "
        f"{meta['trained_on']}; `python -m refusal_audit.training.circumvention` rebuilds it.",
        "",
        f"Leave-one-domain-out on dev at threshold {meta['spec']['threshold']:.3f}: precision "
        f"{cv['precision']['rate']:.3f}, recall {cv['recall']['rate']:.3f}.",
        "",
        "Largest standardised weights:",
        "",
        *[f"- `{n}`: {v:+.2f}" for v, n in top],
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    """CLI: rebuild the artifact (optionally with an encoder) and print the CV figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", default=None, help="encoder name (default: none)")
    args = parser.parse_args()
    encoder = None
    if args.encoder:
        from refusal_audit.config import load_settings
        from refusal_audit.encoders.runtime import OnnxEncoder

        encoder = OnnxEncoder.load(args.encoder, load_settings())
    model, cv = build(encoder)
    print(json.dumps({"content_hash": model.content_hash, "cv": cv["overall"]}, indent=2))


if __name__ == "__main__":
    main()
