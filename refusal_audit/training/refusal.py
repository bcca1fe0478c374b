"""Train and validate the refusal pre-filter (``refusal-audit train``, the fold benchmark).

Everything here is fixed before looking at any test fold:

- model: L2 logistic regression (scikit-learn, liblinear dual solver, ``C`` =
  :data:`C`, ``random_state`` = :data:`SEED`) over ``processors.refusal_model``'s features;
- sample weights: each source's rows weigh ``sqrt(N / (S * n_source))`` (N rows, S sources),
  so the 4,300 GPTFuzz responses do not drown the 450-row XSTest sets, without making one
  XSTest row worth ten GPTFuzz rows;
- threshold: inner leave-one-source-out on the training rows only (each training source
  held out once, CoCoNot as one source); the out-of-fold probabilities give each inner
  source an F1 per candidate threshold (0.05, 0.06, ..., 0.95), and the threshold with the
  highest *mean* F1 over the inner sources wins (ties: nearest 0.5). The test fold never
  enters the choice;
- outer folds (:func:`folds`): train without one source, test on it: XSTest GPT-4,
  XSTest Llama-2, GPTFuzz, Reuter, and each CoCoNot category (its refusals and, where it has
  them, its contrast answers).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse
from sklearn.linear_model import LogisticRegression

from processors.prefilter import decide_from_cues
from processors.refusal_cues import read_cues
from processors.refusal_model import FAMILIES, featurize
from refusal_audit.training.labels import LabelledResponse

C = 4.0
SEED = 0
THRESHOLD_GRID = tuple(round(0.05 + 0.01 * i, 2) for i in range(91))
BOOTSTRAP_SAMPLES = 1000
Z95 = 1.959963984540054

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Dataset:
    """Labelled rows with their feature matrix ``x`` (shape ``(n, width)``), labels ``y``,
    ``source`` and ``group`` per row (arrays of length n), and the cue scorer's decisions
    ``cue_pred`` (for the comparison)."""

    rows: tuple[LabelledResponse, ...]
    x: sparse.csr_matrix
    y: BoolArray
    source: npt.NDArray[np.str_]
    group: npt.NDArray[np.str_]
    cue_pred: BoolArray
    families: tuple[str, ...]


def build_dataset(
    rows: Sequence[LabelledResponse],
    families: Sequence[str] = FAMILIES,
    extra: Callable[[Sequence[str]], sparse.csr_matrix] | None = None,
) -> Dataset:
    """Featurise ``rows`` once. ``extra`` (optional) maps the raw texts to extra columns
    appended on the right (used to measure text embeddings; not part of shipped models)."""
    readings = [read_cues(r.text) for r in rows]
    x = featurize(readings, families)
    if extra is not None:
        x = sparse.hstack([x, extra([r.text for r in rows])], format="csr")
    return Dataset(
        rows=tuple(rows),
        x=x,
        y=np.array([r.is_refusal for r in rows], dtype=bool),
        source=np.array([r.source for r in rows]),
        group=np.array([r.group for r in rows]),
        cue_pred=np.array([decide_from_cues(rd).is_refusal for rd in readings], dtype=bool),
        families=tuple(f for f in FAMILIES if f in families),
    )


def source_weights(source: npt.NDArray[np.str_]) -> FloatArray:
    """Per-row weight ``sqrt(N / (S * n_source))`` (module docstring), shape ``(n,)``."""
    names, inverse, counts = np.unique(source, return_inverse=True, return_counts=True)
    per = np.sqrt(len(source) / (len(names) * counts.astype(np.float64)))
    return np.asarray(per[inverse], dtype=np.float64)


def fit(x: sparse.csr_matrix, y: BoolArray, weight: FloatArray) -> tuple[FloatArray, float]:
    """Fit the logistic regression; return ``(coefficients shape (width,), intercept)``.

    Raises ``ValueError`` when ``y`` holds a single class.
    """
    if y.all() or not y.any():
        raise ValueError("training rows hold a single class")
    model = LogisticRegression(C=C, solver="liblinear", dual=True, max_iter=5000, random_state=SEED)
    model.fit(x, y, sample_weight=weight)
    return np.asarray(model.coef_[0], dtype=np.float64), float(model.intercept_[0])


def _sigmoid(z: FloatArray) -> FloatArray:
    return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float64)


def f1_score(y: BoolArray, pred: BoolArray) -> float:
    """Refusal F1 (0.0 when there is no true and no predicted refusal)."""
    tp = float(np.sum(y & pred))
    denom = float(np.sum(y) + np.sum(pred))
    return 2.0 * tp / denom if denom else 0.0


def choose_threshold(data: Dataset, idx: npt.NDArray[np.intp]) -> tuple[float, dict[str, Any]]:
    """The threshold rule of the module docstring on the training rows ``idx``.

    Returns ``(threshold, details)`` with the inner sources and their F1 at the chosen
    threshold. With a single training source it falls back to 5 interleaved folds of it.
    """
    sources = data.source[idx]
    names = sorted(set(sources.tolist()))
    if len(names) > 1:
        inner = [(name, sources == name) for name in names]
    else:
        pos = np.arange(len(idx))
        inner = [(f"part{k}", pos % 5 == k) for k in range(5)]
    oof = np.zeros(len(idx), dtype=np.float64)
    for _, held in inner:
        train = idx[~held]
        w, b = fit(data.x[train], data.y[train], source_weights(data.source[train]))
        oof[held] = _sigmoid(np.asarray(data.x[idx[held]] @ w) + b)
    y = data.y[idx]
    best_t, best = 0.5, -1.0
    for t in THRESHOLD_GRID:
        mean = float(np.mean([f1_score(y[h], oof[h] >= t) for _, h in inner]))
        if mean > best + 1e-12 or (abs(mean - best) <= 1e-12 and abs(t - 0.5) < abs(best_t - 0.5)):
            best_t, best = t, mean
    per = {name: round(f1_score(y[h], oof[h] >= best_t), 4) for name, h in inner}
    return best_t, {"inner_mean_f1": round(best, 4), "inner_f1": per}


@dataclass(frozen=True)
class TrainedModel:
    """Coefficients (shape ``(width,)``), intercept, threshold and threshold details."""

    weights: FloatArray
    bias: float
    threshold: float
    details: dict[str, Any] = field(default_factory=dict)


def train(data: Dataset, idx: npt.NDArray[np.intp] | None = None) -> TrainedModel:
    """Choose the threshold (inner leave-one-source-out) and fit on all of ``idx`` (default:
    every row). Deterministic."""
    if idx is None:
        idx = np.arange(len(data.y))
    threshold, details = choose_threshold(data, idx)
    w, b = fit(data.x[idx], data.y[idx], source_weights(data.source[idx]))
    return TrainedModel(w, b, threshold, details)


def folds(data: Dataset) -> list[tuple[str, BoolArray]]:
    """Outer folds ``(name, test mask)``: each non-CoCoNot source, then each CoCoNot group."""
    out: list[tuple[str, BoolArray]] = []
    for source in ("xstest-gpt4", "xstest-llama2", "gptfuzz", "reuter"):
        mask = data.source == source
        if mask.any():
            out.append((source, mask))
    for group in sorted(set(data.group[data.source == "coconot"].tolist())):
        out.append((group, data.group == group))
    return out


def wilson(successes: int, n: int) -> tuple[float, float]:
    """Wilson score 95% interval of a proportion (``(0.0, 1.0)`` when ``n`` is 0)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + Z95**2 / n
    centre = (p + Z95**2 / (2 * n)) / denom
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def binary_figures(y: BoolArray, pred: BoolArray, seed: int = SEED) -> dict[str, Any]:
    """Precision and recall with Wilson 95% intervals, F1 with a percentile bootstrap 95%
    interval (:data:`BOOTSTRAP_SAMPLES` resamples of the rows, ``seed``), and the counts."""
    tp = int(np.sum(y & pred))
    fp = int(np.sum(~y & pred))
    fn = int(np.sum(y & ~pred))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    rng = np.random.default_rng(seed)
    n = len(y)
    boot = np.empty(BOOTSTRAP_SAMPLES)
    for i in range(BOOTSTRAP_SAMPLES):
        s = rng.integers(0, n, n)
        boot[i] = f1_score(y[s], pred[s])
    return {
        "n": n,
        "refusals": int(np.sum(y)),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "precision": precision,
        "precision_ci": wilson(tp, tp + fp),
        "recall": recall,
        "recall_ci": wilson(tp, tp + fn),
        "f1": f1_score(y, pred),
        "f1_ci": (float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))),
    }


def leave_one_source_out(data: Dataset) -> list[dict[str, Any]]:
    """Every outer fold: train without it (threshold by the inner rule), test on it.

    Returns one dict per fold: ``fold``, ``threshold``, ``trained`` and ``cues`` (the cue
    scorer on the same rows), each as :func:`binary_figures`.
    """
    results: list[dict[str, Any]] = []
    for name, test in folds(data):
        idx = np.flatnonzero(~test)
        model = train(data, idx)
        prob = _sigmoid(np.asarray(data.x[test] @ model.weights) + model.bias)
        y = data.y[test]
        results.append(
            {
                "fold": name,
                "threshold": model.threshold,
                "trained": binary_figures(y, prob >= model.threshold),
                "cues": binary_figures(y, data.cue_pred[test]),
            }
        )
    return results


def format_ci(value: float, ci: tuple[float, float]) -> str:
    """``0.951 [0.930, 0.966]``."""
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def fold_table(results: Sequence[dict[str, Any]]) -> str:
    """The Markdown table of :func:`leave_one_source_out`'s results (cue scorer vs trained)."""
    lines = [
        "| held-out fold | n (refusals) | scorer | precision | recall | F1 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        for scorer in ("cues", "trained"):
            m = r[scorer]
            label = "cue scorer" if scorer == "cues" else f"trained (t={r['threshold']:.2f})"
            lines.append(
                f"| {r['fold']} | {m['n']} ({m['refusals']}) | {label} | "
                f"{format_ci(m['precision'], m['precision_ci'])} | "
                f"{format_ci(m['recall'], m['recall_ci'])} | {format_ci(m['f1'], m['f1_ci'])} |"
            )
    return "\n".join(lines)
