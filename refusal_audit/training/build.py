"""Build the shipped refusal pre-filter artifact and its model card (``refusal-audit train``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Protocol, TypeVar

from inference.model_files import save_refusal_model as save_model
from processors.refusal_model import FAMILIES, artifact_paths
from refusal_audit.training.labels import load_refusal_examples
from refusal_audit.training.refusal import (
    SEED,
    C,
    build_dataset,
    fold_table,
    leave_one_source_out,
    train,
)


@dataclass(frozen=True)
class BuildResult:
    """What :func:`build_artifact` wrote: the content hash, the artifact and card paths,
    the threshold and the fold results (empty when folds were skipped)."""

    content_hash: str
    npz: Path
    metadata: Path
    card: Path
    threshold: float
    folds: list[dict[str, Any]]


class _Sourced(Protocol):
    @property
    def source(self) -> str: ...


_Row = TypeVar("_Row", bound=_Sourced)


def subset(rows: Sequence[_Row], every: int) -> list[_Row]:
    """Every ``every``-th row of each source (deterministic; for quick builds and tests)."""
    seen: Counter[str] = Counter()
    out: list[_Row] = []
    for r in rows:
        if seen[r.source] % every == 0:
            out.append(r)
        seen[r.source] += 1
    return out


#: Fewest rows a source may keep after ``--every`` (:func:`check_subset`): below it the
#: pre-filter's threshold and card figures rest on a handful of rows of that source.
MIN_SOURCE_ROWS = 5


def check_subset(full: Sequence[_Row], kept: Sequence[_Row], every: int) -> None:
    """Refuse a subset that leaves a source of ``full`` with fewer than
    :data:`MIN_SOURCE_ROWS` rows in ``kept``. Raises ``ValueError`` naming the sources and
    the largest ``every`` that keeps enough rows."""
    total = Counter(r.source for r in full)
    left = Counter(r.source for r in kept)
    thin = sorted(s for s in total if left[s] < MIN_SOURCE_ROWS)
    if not thin:
        return
    largest = max(1, (min(total.values()) - 1) // (MIN_SOURCE_ROWS - 1))  # ceil(n/e) >= MIN
    detail = ", ".join(f"{s}: {left[s]} of {total[s]}" for s in thin)
    raise ValueError(
        f"--every {every} leaves too few rows for the pre-filter ({detail}; at least "
        f"{MIN_SOURCE_ROWS} per source): use --every {largest} or less"
    )


def build_artifact(
    shared_data: Path,
    stem: Path,
    *,
    with_folds: bool = True,
    every: int = 1,
    built_on: date | None = None,
) -> BuildResult:
    """Train on every labelled response of ``shared_data`` and write ``stem``.npz/.json/.md.

    Deterministic: the same data gives the same content hash (fixed seeds, hashing
    features, no clock in the hashed part; the card's date is ``built_on``, default today).
    ``with_folds`` also runs the leave-one-source-out validation for the card (about a
    minute); ``every`` > 1 trains on a subset (:func:`subset`). Raises ``FileNotFoundError``
    for missing data files, ``ValueError`` when ``every`` leaves a source too few rows
    (:func:`check_subset`).
    """
    rows = load_refusal_examples(shared_data)
    if every > 1:
        kept = subset(rows, every)
        check_subset(rows, kept, every)
        rows = kept
    data = build_dataset(rows, FAMILIES)
    model = train(data)
    counts = {
        source: {
            "rows": sum(1 for r in rows if r.source == source),
            "refusals": sum(1 for r in rows if r.source == source and r.is_refusal),
        }
        for source in sorted({r.source for r in rows})
    }
    extra: dict[str, Any] = {
        "training": {
            "rows": len(rows),
            "sources": counts,
            "subset_every": every,
            "C": C,
            "seed": SEED,
            "threshold_rule": model.details,
        }
    }
    results = leave_one_source_out(data) if with_folds else []
    extra["folds"] = results
    digest = save_model(stem, model.weights, model.bias, model.threshold, FAMILIES, extra)
    npz, meta = artifact_paths(stem)
    card = stem.with_suffix(".md")
    card.write_text(
        model_card(digest, model.threshold, counts, results, built_on or date.today(), npz),
        encoding="utf-8",
    )
    return BuildResult(digest, npz, meta, card, model.threshold, results)


def model_card(
    digest: str,
    threshold: float,
    counts: dict[str, dict[str, int]],
    results: Sequence[dict[str, Any]],
    built_on: date,
    npz: Path,
) -> str:
    """The Markdown model card: data, method, folds, figures, date and content hash."""
    data_lines = "\n".join(f"| {s} | {c['rows']} | {c['refusals']} |" for s, c in counts.items())
    folds = fold_table(results) if results else "(folds not run for this build)"
    size = npz.stat().st_size if npz.exists() else 0
    return f"""# Model card: refusal pre-filter (`refusal-lr-{digest[:12]}`)

- content hash (SHA-256 of spec and arrays): `{digest}`
- built: {built_on.isoformat()} with `refusal-audit train`
- artifact: `{npz.name}` ({size:,} bytes, numpy arrays, loaded with `allow_pickle=False`) and
  its JSON metadata
- decides: is a logged response a refusal (full or partial) — the pre-filter's first question

## Data

Labelled responses read from `../shared/data` (mapping of each dataset's labels:
`refusal_audit/training/labels.py`); texts are not stored in the artifact.

| source | rows | refusals |
| --- | --- | --- |
{data_lines}

## Method

L2 logistic regression (scikit-learn liblinear, C={C}, seed {SEED}) over hashed word
1-2-grams (opening, text), character 3-5-grams (opening), the cue scorer's cue families as
binary features plus its evidence, and shape features (`processors/refusal_model.py`).
Sources weigh `sqrt(N / (S * n_source))`. Threshold {threshold:.2f}: the one maximising the
mean F1 over inner leave-one-source-out folds of the training data (rule fixed in advance,
`refusal_audit/training/refusal.py`).

## Leave-one-source-out validation

Each fold trains without the named source (threshold chosen on the training sources only)
and tests on it; precision and recall with Wilson 95% intervals, F1 with a bootstrap 95%
interval (1,000 resamples, seed 0). The cue scorer is the hand-weighted pre-filter on the
same rows (its cues were tuned looking at XSTest, so its XSTest rows are not unseen).

{folds}

## Limits

Trained on five public sets of English chat responses (GPT-4, Llama-2, ChatGPT, Vicuna,
CoCoNot's reference model); its figures on other models' phrasing are the folds above, not a
guarantee. Reuter's refusal label counts redirecting, contradicting and disclaiming answers
as refusals, a broader notion than XSTest's.
"""
