"""Held-out figures of the local engine's over-refusal score and category (issue 11, item 3).

Every figure comes from the real engine (``LocalEngine.audit_sync`` with the example bundle)
run on rows the trained parts never saw:

- **category, CoCoNot**: 5 stratified folds of CoCoNot's refusals (seed 0; XSTest and
  GPTFuzz always in training), the way an unseen fifth of CoCoNot is measured; and the harsh
  variant, each CoCoNot *subcategory* held out in turn. Top-level agreement of the engine's
  category (``bundle.top_level``) with the mapped label, Wilson 95% interval; the cue engine
  (no model) on the same rows beside it.
- **over-refusal score**: the shipped cue score against a trained request-side head
  (``training/triage.py``), ROC AUC with a bootstrap 95% interval (1,000 resamples, seed 0)
  on XSTest refusals (per model and both) and CoCoNot (contrast requests vs refusals); the
  trained head is scored leave-one-group-out (XSTest prompt-type pairs) and with the whole
  source held out.
- **end to end, XSTest**: every completion of both models through the pre-filter (the cue
  scorer, the default) and the engine with the category model of the fold that held the
  prompt's type pair out; recall of over-refusals (human-labelled refusals of safe prompts)
  and precision of the engine's estimated false positives, Wilson 95% intervals.

The cue score's weights were set looking at XSTest (odd prompt ids), so its XSTest rows are
not unseen data; CoCoNot was used only as a check while tuning.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold

from processors.category_model import CATEGORY_FAMILIES, CategoryModel
from processors.engines.local import LocalEngine
from processors.prefilter import decide_from_cues
from processors.refusal_cues import read_cues
from processors.stats import wilson_interval
from refusal_audit.bundles import example_bundle_paths, load_bundle
from refusal_audit.training.labels import (
    XSTEST_FILES,
    load_triage_examples,
    xstest_is_refusal,
    xstest_type_pair,
)
from refusal_audit.training.refusal import BOOTSTRAP_SAMPLES, SEED, source_weights
from refusal_audit.training.triage import (
    TriageData,
    build_data,
    fit_over,
    group_folds,
    over_probabilities,
    source_folds,
    train_category,
)
from schemas.events import RefusalEvent
from schemas.policy import PolicyBundle

EVENT_TIME = datetime(2026, 1, 1, tzinfo=UTC)
FOLDS = 5

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


def example_bundle() -> PolicyBundle:
    """The example policy bundle shipped in the package (what ``make demo`` audits with)."""
    return load_bundle("example", example_bundle_paths())


def _events(data: TriageData, idx: Sequence[int]) -> list[RefusalEvent]:
    return [
        RefusalEvent(
            log_id=f"row-{i}",
            event_time=EVENT_TIME,
            request=data.rows[i].request,
            response=data.rows[i].response,
            model=data.rows[i].source,
        )
        for i in idx
    ]


def engine_categories(
    engine: LocalEngine, bundle: PolicyBundle, data: TriageData, idx: Sequence[int]
) -> tuple[list[str], FloatArray]:
    """The engine's top-level categories and over-refusal scores for rows ``idx``."""
    out = engine.audit_sync(_events(data, idx), bundle)
    cats = [bundle.top_level(a.category) for a in out.result.individual_assessments]
    scores = np.array([out.false_positive_scores[f"row-{i}"] for i in idx], dtype=np.float64)
    return cats, scores


def agreement(truth: Sequence[str], got: Sequence[str]) -> dict[str, Any]:
    """Share of equal labels with its Wilson 95% interval and ``n``."""
    k = sum(t == g for t, g in zip(truth, got, strict=True))
    n = len(truth)
    lo, hi = wilson_interval(k, n)
    return {"n": n, "agree": k, "rate": k / n if n else 0.0, "ci": (lo, hi)}


def auc_withci_text(y: BoolArray, score: FloatArray, seed: int = SEED) -> dict[str, Any]:
    """ROC AUC and a percentile bootstrap 95% interval (resamples lacking a class skipped)."""
    rng = np.random.default_rng(seed)
    boot: list[float] = []
    n = len(y)
    for _ in range(BOOTSTRAP_SAMPLES):
        s = rng.integers(0, n, n)
        if y[s].all() or not y[s].any():
            continue
        boot.append(float(roc_auc_score(y[s], score[s])))
    return {
        "n": n,
        "positives": int(y.sum()),
        "auc": float(roc_auc_score(y, score)),
        "ci": (float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))),
    }


def category_folds(
    data: TriageData,
    bundle: PolicyBundle,
    families: Sequence[str] = CATEGORY_FAMILIES,
    with_cues: bool = True,
) -> dict[str, Any]:
    """CoCoNot top-level agreement: 5 stratified folds and leave-one-subcategory-out, the
    trained category model (reading ``families``) against the cue engine on the same rows
    (``with_cues``)."""
    coconot = np.flatnonzero(data.source == "coconot")
    truth = [data.rows[i].category for i in coconot]
    results: dict[str, Any] = {}
    if with_cues:
        cues, _ = engine_categories(LocalEngine(), bundle, data, coconot.tolist())
        results["cue engine"] = agreement(truth, cues)
    skf = StratifiedKFold(FOLDS, shuffle=True, random_state=SEED)
    got: dict[int, str] = {}
    for _, test in skf.split(coconot, data.y_cat[coconot]):
        got.update(_fold_categories(data, bundle, coconot[test], families))
    results["trained, 5 stratified folds"] = agreement(truth, [got[int(i)] for i in coconot])
    got = {}
    for sub in sorted(set(data.subgroup[coconot].tolist())):
        part = coconot[data.subgroup[coconot] == sub]
        got.update(_fold_categories(data, bundle, part, families))
    results["trained, subcategory held out"] = agreement(truth, [got[int(i)] for i in coconot])
    return results


def _fold_categories(
    data: TriageData,
    bundle: PolicyBundle,
    test: npt.NDArray[np.intp],
    families: Sequence[str] = CATEGORY_FAMILIES,
) -> dict[int, str]:
    keep = np.ones(len(data.rows), dtype=bool)
    keep[test] = False
    model = train_category(data, np.flatnonzero(keep), families=families)
    cats, _ = engine_categories(LocalEngine(category_model=model), bundle, data, test.tolist())
    return dict(zip(test.tolist(), cats, strict=True))


def over_refusal_folds(data: TriageData, bundle: PolicyBundle) -> list[dict[str, Any]]:
    """ROC AUC of the cue score and of a trained request-side head on held-out rows."""
    everything = list(range(len(data.rows)))
    _, cue_score = engine_categories(LocalEngine(), bundle, data, everything)
    by_group = np.zeros(len(data.rows), dtype=np.float64)
    for _, test in group_folds(data):
        train = ~test
        head = fit_over(data.x_over[train], data.y_over[train], source_weights(data.source[train]))
        by_group[test] = over_probabilities(head, data, np.flatnonzero(test))
    by_source = np.zeros(len(data.rows), dtype=np.float64)
    for _, test in source_folds(data):
        train = ~test
        head = fit_over(data.x_over[train], data.y_over[train], source_weights(data.source[train]))
        by_source[test] = over_probabilities(head, data, np.flatnonzero(test))
    src = data.source.astype(str)
    sets = [
        ("XSTest GPT-4 refusals", src == "xstest-gpt4"),
        ("XSTest Llama-2 refusals", src == "xstest-llama2"),
        ("XSTest refusals, both models", np.char.startswith(src, "xstest")),
        ("CoCoNot contrast requests vs refusals", np.char.startswith(src, "coconot")),
    ]
    out = []
    for name, mask in sets:
        y = data.y_over[mask]
        out.append(
            {
                "rows": name,
                "cue score": auc_withci_text(y, cue_score[mask]),
                "trained, group held out": auc_withci_text(y, by_group[mask]),
                "trained, source held out": auc_withci_text(y, by_source[mask]),
            }
        )
    return out


def end_to_end_xstest(shared_data: Path, data: TriageData, bundle: PolicyBundle) -> dict[str, Any]:
    """Over-refusal recall and precision over every XSTest completion (pre-filter, then the
    engine; the category model of each prompt-type pair's fold), cue engine beside it."""
    models: dict[str, CategoryModel] = {}
    for group, test in group_folds(data):
        if group.startswith("xstest:"):
            models[group] = train_category(data, np.flatnonzero(~test))
    counts = {"cue engine": [0, 0, 0], "trained category": [0, 0, 0]}  # tp, flagged, positives
    for source, name in XSTEST_FILES.items():
        with (shared_data / "xstest" / name).open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        for row in rows:
            over = xstest_is_refusal(row["final_label"]) and not row["type"].startswith("contrast_")
            for c in counts.values():
                c[2] += over
        passed = [r for r in rows if decide_from_cues(read_cues(r["completion"])).is_refusal]
        for label in counts:
            for group in sorted({xstest_type_pair(r["type"]) for r in passed}):
                part = [r for r in passed if xstest_type_pair(r["type"]) == group]
                events = [
                    RefusalEvent(
                        log_id=f"{source}-{r['id']}",
                        event_time=EVENT_TIME,
                        request=r["prompt"],
                        response=r["completion"],
                        model=source,
                    )
                    for r in part
                ]
                engine = (
                    LocalEngine()
                    if label == "cue engine"
                    else LocalEngine(category_model=models[f"xstest:{group}"])
                )
                out = engine.audit_sync(events, bundle)
                for r, a in zip(part, out.result.individual_assessments, strict=True):
                    if a.is_estimated_false_positive:
                        counts[label][1] += 1
                        counts[label][0] += xstest_is_refusal(r["final_label"]) and not r[
                            "type"
                        ].startswith("contrast_")
    result = {}
    for label, (tp, flagged, positives) in counts.items():
        result[label] = {
            "tp": tp,
            "flagged": flagged,
            "positives": positives,
            "recall": tp / positives if positives else 0.0,
            "recall_ci": wilson_interval(tp, positives),
            "precision": tp / flagged if flagged else 0.0,
            "precision_ci": wilson_interval(tp, flagged),
        }
    return result


def run(shared_data: Path) -> dict[str, Any]:
    """Every figure of the module docstring: ``{"category", "over_refusal", "end_to_end"}``."""
    bundle = example_bundle()
    data = build_data(load_triage_examples(shared_data))
    return {
        "category": category_folds(data, bundle),
        "over_refusal": over_refusal_folds(data, bundle),
        "end_to_end": end_to_end_xstest(shared_data, data, bundle),
    }


def ci_text(value: float, ci: Sequence[float]) -> str:
    """``0.810 [0.781, 0.836]``: a rate and its 95% interval."""
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def markdown(results: dict[str, Any]) -> str:
    """The three Markdown tables of :func:`run`'s results (docs/evaluation.md, README)."""
    lines = [
        "| CoCoNot top-level category (794 refusals) | agreement |",
        "| --- | --- |",
    ]
    for name, r in results["category"].items():
        lines.append(f"| {name} | {ci_text(r['rate'], r['ci'])} |")
    lines += [
        "",
        "| over-refusal ROC AUC on | n (over-refusals) | cue score (shipped) | trained, "
        "group held out | trained, source held out |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in results["over_refusal"]:
        cue = r["cue score"]
        group, source = r["trained, group held out"], r["trained, source held out"]
        lines.append(
            f"| {r['rows']} | {cue['n']} ({cue['positives']}) | {ci_text(cue['auc'], cue['ci'])} | "
            f"{ci_text(group['auc'], group['ci'])} | {ci_text(source['auc'], source['ci'])} |"
        )
    lines += [
        "",
        "| XSTest end to end (900 completions) | over-refusals found (recall) | precision |",
        "| --- | --- | --- |",
    ]
    for name, r in results["end_to_end"].items():
        lines.append(
            f"| {name} | {r['tp']}/{r['positives']}: {ci_text(r['recall'], r['recall_ci'])} | "
            f"{r['tp']}/{r['flagged']}: {ci_text(r['precision'], r['precision_ci'])} |"
        )
    return "\n".join(lines)
