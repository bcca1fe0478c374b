"""Train and validate the local engine's category model, and measure an over-refusal head.

Fixed before looking at any test fold (the same discipline as ``training/refusal.py``):

- over-refusal head: L2 logistic regression (scikit-learn liblinear dual, ``C`` =
  :data:`C_OVER`, ``random_state`` = :data:`SEED`) over the request features of
  ``processors.triage_model``; rows weigh ``sqrt(N / (S * n_source))`` per source so the
  3,500 GPTFuzz refusals (80 distinct questions) do not drown XSTest;
- category head: multinomial L2 logistic regression (lbfgs, ``C`` = :data:`C_CATEGORY`) over
  every family, on the rows whose category is not ``over_refusal`` and that have a refusal
  text, same source weights;
- threshold of the over-refusal head: out-of-fold probabilities over the training rows'
  *groups* (leave-one-group-out: XSTest prompt-type pairs, CoCoNot categories with their
  contrast requests, GPTFuzz), pooled; the threshold in 0.05..0.95 with the highest F1 wins
  (ties: nearest 0.5). Groups, not sources, because the two XSTest models answered the same
  prompts: a fold that trains on Llama-2's refusal of a prompt and tests on GPT-4's refusal of
  the same prompt measures memory, not generalisation;
- outer folds (:func:`group_folds`, :func:`source_folds`) are the same units: every group
  held out in turn, and whole sources held out (all of XSTest; all of CoCoNot).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse
from sklearn.linear_model import LogisticRegression

from processors.category_model import (
    CATEGORY_CLASSES,
    CATEGORY_FAMILIES,
    FAMILIES,
    OVER_REFUSAL_FAMILIES,
    CategoryModel,
    Head,
    Pair,
    featurize,
    in_memory_model,
    read_pair,
    select_families,
)
from refusal_audit.training.labels import LabelledRefusal
from refusal_audit.training.refusal import THRESHOLD_GRID, f1_score, source_weights

C_OVER = 2.0
C_CATEGORY = 4.0
SEED = 0

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]


@dataclass(frozen=True)
class TriageData:
    """Labelled refusals featurised once: ``x`` (every family, shape ``(n, width)``),
    over-refusal labels ``y_over``, category index ``y_cat`` into :data:`CATEGORY_CLASSES`
    (-1: none of them, e.g. an over-refusal), ``has_response``, and ``source`` /
    ``group`` / ``subgroup``."""

    rows: tuple[LabelledRefusal, ...]
    pairs: tuple[Pair, ...]
    x: sparse.csr_matrix
    y_over: BoolArray
    y_cat: npt.NDArray[np.int64]
    has_response: BoolArray
    source: npt.NDArray[np.str_]
    group: npt.NDArray[np.str_]
    subgroup: npt.NDArray[np.str_]

    @property
    def x_over(self) -> sparse.csr_matrix:
        """The over-refusal head's columns of :attr:`x`."""
        return select_families(self.x, OVER_REFUSAL_FAMILIES)


def build_data(rows: Sequence[LabelledRefusal]) -> TriageData:
    """Featurise ``rows``; a category outside :data:`CATEGORY_CLASSES` (``over_refusal``,
    ``policy_gray_zone`` from reviewers) gets ``y_cat`` -1 (not a category-model row)."""
    pairs = tuple(read_pair(r.request, r.response) for r in rows)
    cat_index = {c: i for i, c in enumerate(CATEGORY_CLASSES)}
    y_cat = [cat_index.get(r.category, -1) for r in rows]
    return TriageData(
        rows=tuple(rows),
        pairs=pairs,
        x=featurize(pairs, FAMILIES),
        y_over=np.array([r.over_refusal for r in rows], dtype=bool),
        y_cat=np.array(y_cat, dtype=np.int64),
        has_response=np.array([bool(r.response.strip()) for r in rows], dtype=bool),
        source=np.array([r.source for r in rows]),
        group=np.array([r.group for r in rows]),
        subgroup=np.array([r.subgroup for r in rows]),
    )


def fit_over(x: sparse.csr_matrix, y: BoolArray, weight: FloatArray) -> Head:
    """Fit the over-refusal head; ``ValueError`` when ``y`` holds one class."""
    if y.all() or not y.any():
        raise ValueError("over-refusal training rows hold a single class")
    model = LogisticRegression(
        C=C_OVER, solver="liblinear", dual=True, max_iter=5000, random_state=SEED
    )
    model.fit(x, y, sample_weight=weight)
    return Head(
        np.asarray(model.coef_, dtype=np.float64).reshape(1, -1),
        np.asarray(model.intercept_, dtype=np.float64).reshape(1),
        OVER_REFUSAL_FAMILIES,
        ("over_refusal",),
    )


def fit_category(
    x: sparse.csr_matrix,
    y: npt.NDArray[np.int64],
    weight: FloatArray,
    families: Sequence[str] = CATEGORY_FAMILIES,
) -> Head:
    """Fit the multinomial category head on rows with ``y >= 0`` of ``x`` (the columns of
    ``families``); every class of :data:`CATEGORY_CLASSES` must occur (``ValueError``
    otherwise)."""
    keep = y >= 0
    present = set(np.unique(y[keep]).tolist())
    if present != set(range(len(CATEGORY_CLASSES))):
        raise ValueError(f"category training rows lack classes: have {sorted(present)}")
    model = LogisticRegression(C=C_CATEGORY, solver="lbfgs", max_iter=3000, random_state=SEED)
    model.fit(x[keep], y[keep], sample_weight=weight[keep])
    return Head(
        np.asarray(model.coef_, dtype=np.float64),
        np.asarray(model.intercept_, dtype=np.float64),
        tuple(f for f in FAMILIES if f in families),
        CATEGORY_CLASSES,
    )


def _sigmoid(z: FloatArray) -> FloatArray:
    return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float64)


def over_probabilities(head: Head, data: TriageData, idx: IntArray) -> FloatArray:
    """P(over-refusal) of rows ``idx`` under ``head`` (no threshold), shape ``(len(idx),)``."""
    return _sigmoid(head.margins(data.x_over[idx])[:, 0])


def choose_threshold(data: TriageData, idx: IntArray) -> tuple[float, dict[str, Any]]:
    """The threshold rule of the module docstring on the training rows ``idx``: pooled
    leave-one-group-out probabilities, the F1-best threshold (ties: nearest 0.5)."""
    groups = data.group[idx]
    oof = np.zeros(len(idx), dtype=np.float64)
    for g in sorted(set(groups.tolist())):
        held = groups == g
        train = idx[~held]
        if data.y_over[train].all() or not data.y_over[train].any():
            oof[held] = 0.5
            continue
        head = fit_over(data.x_over[train], data.y_over[train], source_weights(data.source[train]))
        oof[held] = over_probabilities(head, data, idx[held])
    y = data.y_over[idx]
    best_t, best = 0.5, -1.0
    for t in THRESHOLD_GRID:
        f1 = f1_score(y, oof >= t)
        if f1 > best + 1e-12 or (abs(f1 - best) <= 1e-12 and abs(t - 0.5) < abs(best_t - 0.5)):
            best_t, best = t, f1
    return best_t, {"inner_pooled_f1": round(best, 4), "inner_groups": len(set(groups.tolist()))}


def train_category(
    data: TriageData,
    idx: IntArray | None = None,
    source_factor: dict[str, float] | None = None,
    families: Sequence[str] = CATEGORY_FAMILIES,
) -> CategoryModel:
    """Fit the category model on the rows ``idx`` (default all) that have a refusal text and
    a category of :data:`CATEGORY_CLASSES`. Rows weigh :func:`source_weights` times
    ``source_factor[source]`` (default 1; how much a reviewer's verdict counts); ``families``
    (default all) the feature families it reads (for ablations). Deterministic."""
    if idx is None:
        idx = np.arange(len(data.rows))
    rows = idx[data.has_response[idx]]
    weight = source_weights(data.source[rows])
    if source_factor:
        weight = weight * np.array([source_factor.get(s, 1.0) for s in data.source[rows]])
    x = select_families(data.x[rows], families)
    head = fit_category(x, data.y_cat[rows], weight, families)
    return in_memory_model(head)


def group_folds(data: TriageData) -> list[tuple[str, BoolArray]]:
    """Every group held out in turn: ``(group, test mask)``."""
    return [(g, data.group == g) for g in sorted(set(data.group.tolist()))]


def source_folds(data: TriageData) -> list[tuple[str, BoolArray]]:
    """Whole sources held out: all of XSTest (both models), all of CoCoNot (refusals and
    contrast), GPTFuzz."""
    is_x = np.char.startswith(data.source.astype(str), "xstest")
    is_c = np.char.startswith(data.source.astype(str), "coconot")
    return [("xstest", is_x), ("coconot", is_c), ("gptfuzz", data.source == "gptfuzz")]
