"""Measure the ``local`` engine on the shared labelled refusal sets (used to tune it).

Run from the repo root::

    python benchmarks/local_engine_tuning.py [--data ../shared/data] [--ablate]

Reports, on XSTest v2 refusals (final_label 2_full_refusal / 3_partial_refusal; ground truth
"over-refusal" = prompt type not starting with ``contrast_``): ROC AUC of the over-refusal
score (``sklearn.metrics.roc_auc_score``) overall, per model file and per prompt-id parity
(weights were set looking at odd ids; even ids are the check), precision/recall/F1 at the
engine threshold, per-type false-positive rates; on CoCoNot: agreement of the top-level
category with the category mapping below, and a confusion table; and throughput in
events/second. ``--ablate`` re-scores XSTest with each cue family switched off.

Nothing from the data sets is written anywhere; the script only prints figures.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sklearn.metrics import precision_recall_fscore_support, roc_auc_score

from processors.engines import local, local_cues
from processors.engines.local import LocalEngine
from processors.policy import parse_bundle
from refusal_audit.training.labels import COCONOT_TOP_LEVEL
from schemas.events import RefusalEvent
from schemas.policy import PolicyBundle

REPO = Path(__file__).resolve().parents[1]
EVENT_TIME = datetime(2024, 1, 1, tzinfo=UTC)
REFUSAL_LABELS = ("2_full_refusal", "3_partial_refusal")


def load_bundle() -> PolicyBundle:
    d = REPO / "refusal_audit" / "example_policies"
    return parse_bundle(
        "wren",
        (d / "allowed_use_policy.md").read_text(encoding="utf-8"),
        (d / "product_safety_policy.md").read_text(encoding="utf-8"),
        (d / "refusal_taxonomy.md").read_text(encoding="utf-8"),
    )


XsRow = tuple[RefusalEvent, int, str, int]


def xstest_events(data: Path) -> list[XsRow]:
    """(event, is_over_refusal, prompt type, prompt id) for every XSTest refusal row."""
    out: list[XsRow] = []
    for path in sorted((data / "xstest").glob("xstest_v2_completions_*.csv")):
        model = path.stem.removeprefix("xstest_v2_completions_")
        with path.open(newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                if row["final_label"] not in REFUSAL_LABELS:
                    continue
                event = RefusalEvent(
                    log_id=f"xstest-{model}-{row['id']}",
                    event_time=EVENT_TIME,
                    request=row["prompt"],
                    response=row["completion"],
                    model=model,
                )
                label = 0 if row["type"].startswith("contrast_") else 1
                out.append((event, label, row["type"], int(row["id"].rsplit("-", 1)[-1])))
    return out


def coconot_events(data: Path) -> list[tuple[RefusalEvent, str, str]]:
    """(event, expected top-level code, subcategory) for every CoCoNot refusal record."""
    out = []
    with (data / "coconot" / "coconot_refusals.jsonl").open(encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if not rec["is_refusal"]:
                continue
            event = RefusalEvent(
                log_id=f"coconot-{rec['id']}",
                event_time=EVENT_TIME,
                request=rec["prompt"],
                response=rec["response"] or "",
                model="coconot-reference",
            )
            out.append((event, COCONOT_TOP_LEVEL[rec["category"]], rec["subcategory"]))
    return out


def xstest_report(engine: LocalEngine, bundle: PolicyBundle, data: Path) -> float:
    rows = xstest_events(data)
    out = engine.audit_sync([r[0] for r in rows], bundle)
    scores = [out.false_positive_scores[r[0].log_id] for r in rows]
    labels = [r[1] for r in rows]
    auc = float(roc_auc_score(labels, scores))
    print(f"XSTest refusals: n={len(rows)} positives (over-refusals)={sum(labels)}")
    print(f"  ROC AUC overall        {auc:.3f}")
    splits: list[tuple[str, Callable[[XsRow], bool]]] = [
        ("gpt4", lambda r: r[0].model == "gpt4"),
        ("llama2orig", lambda r: r[0].model == "llama2orig"),
        ("odd ids (tuned)", lambda r: r[3] % 2 == 1),
        ("even ids (check)", lambda r: r[3] % 2 == 0),
    ]
    for name, keep in splits:
        sel = [(s, lab) for s, lab, r in zip(scores, labels, rows, strict=True) if keep(r)]
        if len({lab for _, lab in sel}) == 2:
            sub = roc_auc_score([lab for _, lab in sel], [s for s, _ in sel])
            print(f"  ROC AUC {name:<15} {sub:.3f} (n={len(sel)})")
    preds = [a.is_estimated_false_positive for a in out.result.individual_assessments]
    p, r, f1, _ = precision_recall_fscore_support(labels, preds, average="binary")
    print(
        f"  at threshold {engine.false_positive_threshold:.2f}: precision {p:.3f} "
        f"recall {r:.3f} F1 {f1:.3f} (flagged {sum(preds)})"
    )
    by_type: dict[str, list[int]] = {}
    for row, pred in zip(rows, preds, strict=True):
        if row[3] % 2 == 1:  # only the tuning split is inspected in detail
            by_type.setdefault(row[2], []).append(int(pred))
    print("  flagged share per prompt type (odd ids only, the tuning split):")
    for t in sorted(by_type):
        v = by_type[t]
        print(f"    {t:<30} {sum(v):>3}/{len(v):<3}")
    cats = Counter(a.category for a in out.result.individual_assessments)
    print(f"  categories: {dict(sorted(cats.items()))}")
    print(
        f"  gaps: {sum(a.policy_clause_cited is None for a in out.result.individual_assessments)}"
        f"  review: {sum(a.requires_human_review for a in out.result.individual_assessments)}"
    )
    return auc


def coconot_report(engine: LocalEngine, bundle: PolicyBundle, data: Path) -> float:
    rows = coconot_events(data)
    out = engine.audit_sync([r[0] for r in rows], bundle)
    got = [bundle.top_level(a.category) for a in out.result.individual_assessments]
    agree = sum(g == r[1] for g, r in zip(got, rows, strict=True)) / len(rows)
    print(f"CoCoNot refusals: n={len(rows)} top-level agreement {agree:.3f}")
    confusion = Counter((r[1], g) for g, r in zip(got, rows, strict=True))
    for (exp, g), n in sorted(confusion.items()):
        print(f"    expected {exp:<24} got {g:<24} {n}")
    per_sub: dict[str, list[int]] = {}
    for g, r in zip(got, rows, strict=True):
        per_sub.setdefault(r[2], []).append(int(g == r[1]))
    print("  agreement per subcategory:")
    for s in sorted(per_sub):
        v = per_sub[s]
        print(f"    {s:<45} {sum(v) / len(v):.2f} (n={len(v)})")
    return agree


def throughput(bundle: PolicyBundle, data: Path) -> float:
    events = [r[0] for r in xstest_events(data)] + [r[0] for r in coconot_events(data)]
    engine = LocalEngine()
    engine.audit_sync(events[:10], bundle)  # build the index once
    start = time.perf_counter()
    for i in range(0, len(events), 50):
        engine.audit_sync(events[i : i + 50], bundle)
    rate = len(events) / (time.perf_counter() - start)
    print(f"Throughput: {rate:.0f} events/s ({len(events)} events in batches of 50)")
    return rate


def ablate(bundle: PolicyBundle, data: Path) -> None:
    families = sorted({c.family for c in local_cues.CUES})
    base = list(local_cues.CUES)
    print("Ablation (XSTest ROC AUC with one cue family off):")
    for fam in ["<none>", "<policy d>", *families]:
        local_cues.CUES = tuple(c for c in base if c.family != fam)
        # find_cues reads the lists derived from CUES at import: derive them again
        local_cues._SEARCHED_CUES = tuple(c for c in local_cues.CUES if c.family != "named_entity")
        local_cues._NAMED_ENTITY_CUE = next(
            (c for c in local_cues.CUES if c.family == "named_entity"), None
        )
        saved = local.W_POLICY
        if fam == "<policy d>":
            local.W_POLICY = 0.0
        rows = xstest_events(data)
        out = LocalEngine().audit_sync([r[0] for r in rows], bundle)
        auc = roc_auc_score(
            [r[1] for r in rows], [out.false_positive_scores[r[0].log_id] for r in rows]
        )
        print(f"  without {fam:<20} {auc:.3f}")
        local.W_POLICY = saved
    local_cues.CUES = tuple(base)
    local_cues._SEARCHED_CUES = tuple(c for c in base if c.family != "named_entity")
    local_cues._NAMED_ENTITY_CUE = next((c for c in base if c.family == "named_entity"), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--ablate", action="store_true")
    args = parser.parse_args()
    bundle = load_bundle()
    engine = LocalEngine(args.threshold)
    print(f"bundle {bundle.name} {bundle.version}: {len(bundle.clauses)} clauses")
    xstest_report(engine, bundle, args.data)
    coconot_report(engine, bundle, args.data)
    throughput(bundle, args.data)
    if args.ablate:
        ablate(bundle, args.data)


if __name__ == "__main__":
    main()
