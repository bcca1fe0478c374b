"""Build the shipped category model artifact and its model card (``refusal-audit train``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.model_selection import StratifiedKFold

from inference.model_files import save_category_model as save_model
from processors.category_model import CATEGORY_CLASSES
from processors.refusal_model import artifact_paths
from processors.stats import wilson_interval
from refusal_audit.training import triage_eval
from refusal_audit.training.build import subset
from refusal_audit.training.labels import (
    VERDICT_SOURCE,
    LabelledRefusal,
    load_triage_examples,
    load_verdict_labels,
)
from refusal_audit.training.triage import (
    C_CATEGORY,
    SEED,
    TriageData,
    build_data,
    train_category,
)

#: How much one reviewer verdict weighs against a shared-data row of the same source size
#: (``--verdict-weight``): the team's own traffic and taxonomy, judged by its reviewers.
DEFAULT_VERDICT_WEIGHT = 2.0


@dataclass(frozen=True)
class CategoryBuild:
    """What :func:`build_category_artifact` wrote: hash, paths and the evaluation."""

    content_hash: str
    npz: Path
    metadata: Path
    card: Path
    evaluation: dict[str, Any]


def verdict_agreement(data: TriageData, factor: dict[str, float]) -> dict[str, Any] | None:
    """The category model's agreement on the reviewers' rows, 5 stratified folds of them
    (shared data always in training); ``None`` with fewer than 10 such rows or one class."""
    rows = np.flatnonzero((data.source == VERDICT_SOURCE) & (data.y_cat >= 0))
    classes = np.unique(data.y_cat[rows])
    if len(rows) < 10 or len(classes) < 2:
        return None
    k = min(5, int(np.bincount(data.y_cat[rows])[classes].min()))
    if k < 2:
        return None
    pred = np.zeros(len(data.rows), dtype=np.int64)
    for _, test in StratifiedKFold(k, shuffle=True, random_state=SEED).split(
        rows, data.y_cat[rows]
    ):
        keep = np.ones(len(data.rows), dtype=bool)
        keep[rows[test]] = False
        model = train_category(data, np.flatnonzero(keep), factor)
        p = model.head.margins(data.x[rows[test]])
        pred[rows[test]] = p.argmax(axis=1)
    agree = int(np.sum(pred[rows] == data.y_cat[rows]))
    lo, hi = wilson_interval(agree, len(rows))
    return {"n": len(rows), "agree": agree, "rate": agree / len(rows), "ci": (lo, hi), "folds": k}


def build_category_artifact(
    shared_data: Path,
    stem: Path,
    *,
    with_folds: bool = True,
    every: int = 1,
    built_on: date | None = None,
    verdicts: Path | None = None,
    verdict_weight: float = DEFAULT_VERDICT_WEIGHT,
) -> CategoryBuild:
    """Train the category model on the shared data (and the reviewers' verdicts of
    ``verdicts``, a ``review labels`` file, weighted ``verdict_weight``) and write
    ``stem``.npz/.json/.md.

    Deterministic (same data, same hash). ``with_folds`` runs
    :func:`refusal_audit.training.triage_eval.run` for the card (a few minutes).
    Raises ``FileNotFoundError`` for missing data and ``ValueError`` for a bad or empty
    verdict file.
    """
    rows: list[LabelledRefusal] = load_triage_examples(shared_data)
    if every > 1:
        rows = subset(rows, every)
    verdict_rows = load_verdict_labels(verdicts) if verdicts is not None else []
    if verdicts is not None and not verdict_rows:
        raise ValueError(f"no verdicts in {verdicts}")
    data = build_data(rows + verdict_rows)
    factor = {VERDICT_SOURCE: verdict_weight}
    model = train_category(data, None, factor)
    counts = {
        source: dict(
            sorted(Counter(r.category for r in rows + verdict_rows if r.source == source).items())
        )
        for source in sorted({r.source for r in rows + verdict_rows})
    }
    evaluation: dict[str, Any] = triage_eval.run(shared_data) if with_folds else {}
    if verdict_rows:
        evaluation["verdicts"] = verdict_agreement(data, factor)
    extra = {
        "training": {
            "rows": len(rows) + len(verdict_rows),
            "categories_by_source": counts,
            "subset_every": every,
            "C": C_CATEGORY,
            "seed": SEED,
            "verdict_rows": len(verdict_rows),
            "verdict_category_rows": sum(r.category in CATEGORY_CLASSES for r in verdict_rows),
            "verdict_weight": verdict_weight if verdict_rows else None,
        },
        "evaluation": evaluation,
    }
    digest = save_model(stem, model.head, extra)
    npz, meta = artifact_paths(stem)
    card = stem.with_suffix(".md")
    card.write_text(model_card(digest, extra, built_on or date.today(), npz), encoding="utf-8")
    return CategoryBuild(digest, npz, meta, card, evaluation)


def model_card(digest: str, extra: dict[str, Any], built_on: date, npz: Path) -> str:
    """The Markdown model card: data, method, held-out figures, date and content hash."""
    training = extra["training"]
    data_lines = "\n".join(
        f"| {source} | {', '.join(f'{c} {n}' for c, n in cats.items())} |"
        for source, cats in training["categories_by_source"].items()
    )
    evaluation = extra["evaluation"]
    figures = (
        triage_eval.markdown(evaluation)
        if "category" in evaluation
        else "(held-out figures not run for this build)"
    )
    verdict = evaluation.get("verdicts")
    if training["verdict_rows"]:
        verdict_text = (
            f"{training['verdict_rows']} reviewer verdicts read, "
            f"{training.get('verdict_category_rows', training['verdict_rows'])} of them "
            "category-model rows (a verdict whose top-level category is over_refusal or "
            "policy_gray_zone is not), weight "
            f"{training['verdict_weight']:g} per row against the shared data's source weights. "
            + (
                f"Agreement on them, {verdict['folds']} stratified folds of the verdicts: "
                f"{verdict['rate']:.3f} [{verdict['ci'][0]:.3f}, {verdict['ci'][1]:.3f}] "
                f"(n={verdict['n']})."
                if verdict
                else "Too few verdicts with a category of the model's classes to measure."
            )
        )
    else:
        verdict_text = "No reviewer verdicts in this build (`refusal-audit train --with-verdicts`)."
    size = npz.stat().st_size if npz.exists() else 0
    return f"""# Model card: category model (`category-lr-{digest[:12]}`)

- content hash (SHA-256 of spec and arrays): `{digest}`
- built: {built_on.isoformat()} with `refusal-audit train`
- artifact: `{npz.name}` ({size:,} bytes, numpy arrays, loaded with `allow_pickle=False`) and
  its JSON metadata
- decides: the top-level category of a refusal that is not an over-refusal
  ({", ".join(CATEGORY_CLASSES)}), when the local engine runs with
  `local_category_model = "trained"`

## Data

Labelled refusals read from `../shared/data` (mappings: `refusal_audit/training/labels.py`);
texts are not stored in the artifact. Rows per source and category:

| source | categories |
| --- | --- |
{data_lines}

{verdict_text}

## Method

Multinomial L2 logistic regression (scikit-learn lbfgs, C={training["C"]}, seed {training["seed"]})
over hashed word 1-2-grams and character 3-5-grams of the request, word 1-2-grams of the
refusal's opening, and the local engine's request and refusal cues
(`processors/category_model.py`). Sources weigh `sqrt(N / (S * n_source))`.

## Held-out figures

Produced by `refusal_audit/training/triage_eval.py` (the engine with the example bundle):

{figures}

## Limits

On a random fifth of CoCoNot the model is better than the cue rules; with a whole CoCoNot
subcategory held out (a kind of request never seen) it is worse, so the default stays
`local_category_model = "cues"`. Trained on English chat refusals of GPT-4, Llama-2, Vicuna,
ChatGPT and CoCoNot's reference model.
"""
