"""Train the monotone circumvention model on the dev corpus, cross-validate it by domain,
write the artifact (``refusal_audit/models/circumvention_check.{npz,json,md}``).

Only ``datasets/circumvention/dev.jsonl`` (and, optionally, reviewers' verdict sets) is
trained on here: the held-out file is for the one final report (``refusal-audit clarify
eval``), never for fitting or choosing anything.

Procedure (docs/clarification.md, "The circumvention check"):

1. one feature row per question of each dev set
   (:func:`processors.clarification.circumvention_model.question_rows`);
2. the model (:class:`processors.clarification.circumvention_model.CircumventionModel`): a
   per-question logistic score, pooled over the set by noisy-OR, fitted by minimising the
   class-balanced log loss of the SET labels plus ``||w||^2 / (2 C)`` with L-BFGS-B, each
   weight bounded by its sign (``feature_signs``: reject signals >= 0, acceptable
   practices <= 0), columns standardised on the training questions (the dev questions
   only, whatever else is trained on: :func:`standardisation`);
3. leave-one-domain-out: for each dev domain, fit on the other domains and score the
   held-back one, so every dev set gets an out-of-fold probability (vetoes count as 1);
4. the threshold is the highest whose out-of-fold recall is at least :data:`TARGET_RECALL`
   (issue 25's recall target); ``C`` is the one of :data:`C_GRID` with the best out-of-fold
   precision at that threshold (ties: the smaller ``C``);
5. the shipped model is refitted on all of dev with that ``C`` and threshold.

Reviewers' verdicts (``build(verdicts=FILE)``, a ``refusal-audit review clarification-labels``
file; ``refusal-audit train --with-verdicts``) add their sets, domain
``reviewer-verdicts``, each weighted ``verdict_weight`` against a dev set's 1 (the classes
stay balanced: :func:`balanced_weights`), to the refit of step 5 only: steps 3 and 4 (the
CV figures, the threshold and ``C``) and the standardisation (mean and scale) are dev's
alone, so verdicts cannot move them. The sets are sorted (:func:`set_order`) before the
refit, so the same sets in any line order give the same model; with weight 0 the refit is
the dev-only one (the same content hash as without verdicts). Their own fold (the dev-only
model, scored on them) is reported apart.

Run: ``python -m refusal_audit.training.circumvention [--encoder NAME] [-o STEM]`` or
``refusal-audit train --model circumvention``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize

from inference.model_files import write_circumvention_model
from processors.clarification.circumvention_model import (
    FORMAT_VERSION,
    POOLING,
    CircumventionModel,
    content_hash,
    feature_names,
    feature_signs,
    model_from_arrays,
    prototype_vectors,
    question_rows,
    vetoes,
)
from processors.clarification.verdict_sets import VERDICT_DOMAIN
from processors.stats import wilson_interval
from processors.text_encoder import TextEncoder
from refusal_audit.training.circumvention_corpus import DEV_PATH, DevSet, load_dev
from refusal_audit.training.verdict_files import check_verdict_weight, load_verdict_sets

STEM = Path(__file__).resolve().parents[1] / "models" / "circumvention_check"
C_GRID: tuple[float, ...] = (0.1, 0.3, 1.0, 3.0)
"""Inverse regularisation strengths tried by leave-one-domain-out on dev."""
TARGET_RECALL = 0.90
"""Out-of-fold recall the threshold must keep on dev (issue 25, item 5's recall target)."""


@dataclass(frozen=True)
class Questions:
    """Question rows of a list of sets: ``x`` ``(m, n_features)``, ``group`` ``(m,)`` the
    index of each row's set, ``n_sets``."""

    x: np.ndarray
    group: np.ndarray
    n_sets: int

    def subset(self, keep: np.ndarray) -> Questions:
        """The rows of the sets where ``keep`` (a ``(n_sets,)`` bool mask) is True, with the
        sets renumbered 0.. in order."""
        new_index = np.cumsum(keep) - 1
        rows = keep[self.group]
        return Questions(self.x[rows], new_index[self.group[rows]], int(keep.sum()))


def features(sets: Sequence[DevSet], encoder: TextEncoder | None = None) -> Questions:
    """The question rows of ``sets`` (encoder columns only with ``encoder``)."""
    protos = prototype_vectors(encoder) if encoder is not None else None
    blocks, groups = [], []
    for i, s in enumerate(sets):
        blocks.append(question_rows(s.questions, s.request, s.refusal, encoder, protos))
        groups.append(np.full(len(s.questions), i))
    return Questions(np.vstack(blocks), np.concatenate(groups), len(sets))


Params = tuple[np.ndarray, np.ndarray, np.ndarray, float]
"""``(weights, mean, scale, bias)`` of a fitted model."""


def standardisation(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, scale)`` of the columns of ``x`` ``(m, n_features)``, each ``(n_features,)``:
    the population standard deviation, 1 for a constant column."""
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    return mean, scale


def set_order(s: DevSet) -> tuple[str, str, str, tuple[str, ...], bool]:
    """A total order of sets (set id first), so a list of sets sorts the same whatever
    order it was read in."""
    return s.set_id, s.request, s.refusal, tuple(s.questions), s.reject


def balanced_weights(y: np.ndarray, sample_weight: np.ndarray | None = None) -> np.ndarray:
    """Per-set loss weights ``(n_sets,)``: ``sample_weight`` (default 1 each) rescaled so
    that each class holds half of the total weight, ``s_i * total / (2 * class total)``.
    With unit weights this is ``n_sets / (2 * n_class)``, the plain class balance."""
    y = y.astype(bool)
    if sample_weight is None:
        n_pos, n_neg = int(y.sum()), int((~y).sum())
        return np.where(y, len(y) / (2 * max(n_pos, 1)), len(y) / (2 * max(n_neg, 1)))
    s = np.asarray(sample_weight, dtype=np.float64)
    total, pos, neg = float(s.sum()), float(s[y].sum()), float(s[~y].sum())
    return s * np.where(y, total / (2 * (pos or 1.0)), total / (2 * (neg or 1.0)))


def fit(
    q: Questions,
    y: np.ndarray,
    signs: Sequence[int],
    c: float,
    sample_weight: np.ndarray | None = None,
    moments: tuple[np.ndarray, np.ndarray] | None = None,
) -> Params:
    """Fit the sign-constrained noisy-OR model on set labels ``y`` ``(n_sets,)`` (module
    docstring, step 2), each set's loss weighted by :func:`balanced_weights` of
    ``sample_weight`` ``(n_sets,)`` (None: 1 each), the columns standardised with
    ``moments`` (``(mean, scale)``; None: :func:`standardisation` of ``q``'s rows).
    Deterministic (zero start, L-BFGS-B)."""
    mean, scale = moments if moments is not None else standardisation(q.x)
    xs = (q.x - mean) / scale
    y = y.astype(bool)
    weight = balanced_weights(y, sample_weight)
    d = xs.shape[1]

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:d], theta[d]
        z = xs @ w + b
        p = 1.0 / (1.0 + np.exp(-z))
        log_keep = np.bincount(q.group, weights=-np.logaddexp(0.0, z), minlength=q.n_sets)
        keep = np.exp(log_keep)  # 1 - P(set)
        reject = np.maximum(-np.expm1(log_keep), 1e-300)  # P(set)
        set_loss = np.where(y, -np.log(reject), -log_keep)
        # d loss / d z_q: y=1: -p_q (1-P)/P ; y=0: p_q
        factor = np.where(y, -keep / reject, 1.0) * weight
        dz = p * factor[q.group]
        grad_w = xs.T @ dz + w / c
        value = float(weight @ set_loss + 0.5 * (w @ w) / c)
        return value, np.append(grad_w, dz.sum())

    bounds = [(0.0, None) if s > 0 else (None, 0.0) if s < 0 else (None, None) for s in signs]
    result = minimize(
        loss, np.zeros(d + 1), jac=True, method="L-BFGS-B", bounds=[*bounds, (None, None)],
        options={"maxiter": 2000},
    )  # fmt: skip
    theta = result.x
    return theta[:d].astype(np.float64), mean, scale, float(theta[d])


def set_scores(params: Params, q: Questions) -> np.ndarray:
    """Noisy-OR set probabilities of ``q``'s sets: ``(n_sets,)``."""
    w, mean, scale, b = params
    z = ((q.x - mean) / scale) @ w + b
    return np.asarray(-np.expm1(np.bincount(q.group, -np.logaddexp(0.0, z), q.n_sets)))


def out_of_fold(sets: Sequence[DevSet], q: Questions, signs: Sequence[int], c: float) -> np.ndarray:
    """Leave-one-domain-out set probabilities of dev ``sets``: shape ``(len(sets),)``; each
    fold is fitted (and standardised) on the other domains' sets alone. Raises
    ``ValueError`` for a reviewers' set (domain ``reviewer-verdicts``): verdicts are in no
    fold (module docstring)."""
    y = np.array([s.reject for s in sets])
    domains = np.array([s.domain for s in sets])
    if VERDICT_DOMAIN in domains:
        raise ValueError("reviewers' verdict sets are in no cross-validation fold")
    oof = np.full(len(sets), np.nan)
    for d in sorted(set(domains)):
        test = domains == d
        oof[test] = set_scores(fit(q.subset(~test), y[~test], signs, c), q.subset(test))
    return oof


def vetoed(sets: Sequence[DevSet]) -> np.ndarray:
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


def cv_figures(sets: Sequence[DevSet], oof: np.ndarray) -> dict[str, Any]:
    """Figures of out-of-fold scores (vetoes included): threshold (:func:`choose_threshold`),
    overall rates, rates per held-back domain."""
    y = np.array([s.reject for s in sets])
    scores = np.maximum(oof, vetoed(sets))
    threshold = choose_threshold(scores, y)
    domains = np.array([s.domain for s in sets])
    per_domain = {
        d: rates(scores[domains == d], y[domains == d], threshold) for d in sorted(set(domains))
    }
    return {"threshold": threshold, "overall": rates(scores, y, threshold), "domains": per_domain}


def cross_validate(sets: Sequence[DevSet], q: Questions, signs: Sequence[int]) -> dict[str, Any]:
    """Leave-one-domain-out over :data:`C_GRID` on the dev ``sets`` (:func:`out_of_fold`:
    no reviewers' set): the figures (:func:`cv_figures`) of the chosen ``C`` (best
    out-of-fold precision at the recall threshold), with ``C`` and the precision of every
    ``C`` tried. Raises ``ValueError`` for a reviewers' set."""
    best: dict[str, Any] | None = None
    tried = {}
    for c in C_GRID:
        figures = cv_figures(sets, out_of_fold(sets, q, signs, c))
        precision = figures["overall"]["precision"]["rate"] or 0.0
        tried[str(c)] = precision
        if best is None or precision > best["overall"]["precision"]["rate"] + 1e-12:
            best = {**figures, "C": c}
    assert best is not None
    return {**best, "precision_by_C": tried}


@dataclass(frozen=True)
class CircumventionBuild:
    """What :func:`build` wrote: the loaded model, the three paths and the CV figures."""

    model: CircumventionModel
    npz: Path
    metadata: Path
    card: Path
    cv: dict[str, Any]


def _verdict_fold(
    dev_params: Params, extra: Sequence[DevSet], q_extra: Questions, threshold: float
) -> dict[str, Any]:
    """The reviewers' sets ``extra`` (question rows ``q_extra``) as a fold of their own: the
    model fitted on the dev sets only (``dev_params``) scores them at ``threshold`` (vetoes
    included); :func:`rates`."""
    scores = np.maximum(set_scores(dev_params, q_extra), vetoed(extra))
    return rates(scores, np.array([s.reject for s in extra]), threshold)


def _joined(a: Questions, b: Questions) -> Questions:
    """The question rows of ``a``'s sets followed by ``b``'s (``b``'s renumbered after)."""
    return Questions(
        np.vstack([a.x, b.x]), np.concatenate([a.group, b.group + a.n_sets]), a.n_sets + b.n_sets
    )


def build(
    encoder: TextEncoder | None = None,
    stem: Path = STEM,
    dev: Path = DEV_PATH,
    built_on: date | None = None,
    verdicts: Path | None = None,
    verdict_weight: float = 1.0,
) -> CircumventionBuild:
    """Cross-validate on ``dev``, refit on all of it, write ``<stem>.npz``/``.json``/``.md``.

    ``verdicts``: a ``refusal-audit review clarification-labels`` file whose sets join the
    final refit only, each weighted ``verdict_weight`` (a dev set: 1; finite, 0 to
    :data:`~refusal_audit.training.verdict_files.MAX_VERDICT_WEIGHT`), never the CV
    figures, ``C``, the threshold or the standardisation (module docstring); the metadata's
    ``verdicts`` and the card report them apart.

    Deterministic: the same dev file, verdicts, encoder and date give the same metadata,
    content hash and card (the .npz differs only in its zip timestamps). Raises
    ``OSError`` for an unreadable file or a failed write, ``ValueError``/``KeyError``
    for a malformed one (or a dev file with a single label; a verdict file's errors name
    the line, and a held-out set in it is refused).
    """
    verdict_weight = check_verdict_weight(verdict_weight)
    dev_sets = load_dev(dev)
    y_dev = np.array([s.reject for s in dev_sets])
    if y_dev.all() or not y_dev.any():
        raise ValueError(f"{dev}: the corpus needs both labels to train the check")
    extra = load_verdict_sets(verdicts, dev=dev) if verdicts is not None else []
    if verdicts is not None and not extra:
        raise ValueError(f"no verdicts in {verdicts}")
    extra = sorted(extra, key=set_order)
    names = feature_names(encoder is not None)
    signs = feature_signs(names)
    q_dev = features(dev_sets, encoder)
    cv = cross_validate(dev_sets, q_dev, signs)
    dev_params = fit(q_dev, y_dev, signs, cv["C"])
    q_extra = features(extra, encoder) if extra else None
    if q_extra is not None and verdict_weight > 0:
        y = np.array([s.reject for s in (*dev_sets, *extra)])
        weight = np.array([1.0] * len(dev_sets) + [verdict_weight] * len(extra))
        moments = dev_params[1], dev_params[2]  # the dev questions' mean and scale
        w, mean, scale, b = fit(_joined(q_dev, q_extra), y, signs, cv["C"], weight, moments)
    else:  # no verdicts, or weight 0: they add nothing to the loss
        w, mean, scale, b = dev_params
    w = np.where(np.abs(w) < 1e-12, 0.0, w)  # the bound's exact zero, not a -0.0 or 1e-17
    spec = {
        "features": list(names),
        "signs": list(signs),
        "pooling": POOLING,
        "encoder": encoder.name if encoder is not None else None,
        "threshold": cv["threshold"],
        "bias": b,
        "C": cv["C"],
    }
    arrays = {"weights": w, "mean": mean, "scale": scale}
    day = (built_on or date.today()).isoformat()
    meta = {
        "format_version": FORMAT_VERSION,
        "spec": spec,
        "content_hash": content_hash(spec, arrays),
        "trained_on": f"{dev.name} ({len(dev_sets)} sets), {day}",
        "cv": cv["overall"],
        "precision_by_C": cv["precision_by_C"],
    }
    if verdicts is not None and q_extra is not None:  # a verdict file holds >= 1 set
        n_reject = sum(s.reject for s in extra)
        meta["trained_on"] += (
            f" + {len(extra)} reviewer verdict sets ({verdicts.name}, weight {verdict_weight:g})"
        )
        meta["verdicts"] = {
            "file": verdicts.name,
            "sets": len(extra),
            "labels": {"acceptable": len(extra) - n_reject, "reject": n_reject},
            "weight": float(verdict_weight),
            "own_fold": _verdict_fold(dev_params, extra, q_extra, cv["threshold"]),
        }
    paths = (*write_circumvention_model(stem, meta, arrays), stem.with_suffix(".md"))
    paths[2].write_text(_card(meta, w, names), encoding="utf-8")
    return CircumventionBuild(model_from_arrays(meta, arrays), *paths, cv)


def _card(meta: dict[str, Any], w: np.ndarray, names: Sequence[str]) -> str:
    cv = meta["cv"]
    spec = meta["spec"]
    nonzero = sorted(
        ((v, n) for v, n in zip(w, names, strict=True) if v != 0), key=lambda t: -abs(t[0])
    )
    zero = [n for v, n in zip(w, names, strict=True) if v == 0]
    lines = [
        "# Circumvention check model",
        "",
        "Per-question logistic score over rubric detectors and old rules (features of",
        "`processors/clarification/circumvention_model.py`), pooled over the set by",
        "noisy-OR, weights sign-constrained (reject signals >= 0, acceptable practices <= 0),",
        f"trained on {meta['trained_on']}; `refusal-audit train --model circumvention`",
        "(or `python -m refusal_audit.training.circumvention`) rebuilds it.",
        "",
        f"Leave-one-domain-out on dev (C = {spec['C']}, chosen among "
        f"{', '.join(meta['precision_by_C'])} by the same cross-validation) at threshold "
        f"{spec['threshold']:.3f}: precision {cv['precision']['rate']:.3f}, recall "
        f"{cv['recall']['rate']:.3f}. Nothing was fitted or chosen on the held-out file.",
        "",
        *_verdict_lines(meta.get("verdicts")),
        "Standardised weights (non-zero):",
        "",
        *[f"- `{n}`: {v:+.2f}" for v, n in nonzero],
        "",
        f"At their bound (0): {', '.join(f'`{n}`' for n in zero) or 'none'}.",
        "",
    ]
    return "\n".join(lines)


def _rate(figure: dict[str, Any]) -> str:
    return "n/a" if figure["rate"] is None else f"{figure['rate']:.3f}"


def _verdict_lines(verdicts: dict[str, Any] | None) -> list[str]:
    """The card's paragraph on the reviewers' sets (nothing without them)."""
    if not verdicts:
        return []
    labels, fold = verdicts["labels"], verdicts["own_fold"]
    return [
        f"Reviewer verdicts: {verdicts['sets']} sets from `{verdicts['file']}` "
        f"({labels['acceptable']} acceptable, {labels['reject']} reject; "
        f"`refusal-audit review clarification-labels`), weight {verdicts['weight']:g} each "
        "against a dev set's 1, classes balanced. They join the final refit only: the",
        "cross-validation, C, the threshold and the standardisation are dev's, and the "
        "figures above are on dev sets only. As a fold of "
        "their own (the model fitted on dev only, same C and threshold): precision "
        f"{_rate(fold['precision'])}, recall {_rate(fold['recall'])}.",
        "",
    ]


def main() -> None:
    """CLI: rebuild the artifact (optionally with an encoder) and print the CV figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", default=None, help="encoder name (default: none)")
    parser.add_argument("-o", "--stem", type=Path, default=STEM, help="artifact path stem")
    args = parser.parse_args()
    encoder = None
    if args.encoder:
        from refusal_audit.config import load_settings
        from refusal_audit.encoders.runtime import OnnxEncoder

        encoder = OnnxEncoder.load(args.encoder, load_settings())
    built = build(encoder, args.stem)
    summary = {"content_hash": built.model.content_hash, "C": built.cv["C"]}
    print(json.dumps({**summary, "cv": built.cv["overall"]}, indent=2))


if __name__ == "__main__":
    main()
