"""Human-vs-model agreement on real data: the XSTest human labels imported as reviewer verdicts
on the offline ``local`` engine's assessments (issue 10).

The XSTest completions of every model in ``shared-data/xstest`` are audited into a fresh
embedded store; for each audited event that the XSTest annotators labelled a refusal (full
or partial), a verdict file is written as a reviewer would: the refusal was a false positive
(over-refusal) when the prompt is safe (its type does not start with ``contrast_``), so the
reviewer agrees when the model's estimate says the same and otherwise disagrees with the
corrected false-positive flag (keeping the model's category: XSTest has no taxonomy
labels). The file goes through ``refusal-audit review import``'s code and the figures are
``review stats``'s (roll-up row), so they are what a team would see.

Run: ``python benchmarks/review_agreement.py [--shared-data DIR]``.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from refusal_audit.audit.batch import BatchOptions, run_batch
from refusal_audit.bundles import load_bundles
from refusal_audit.config import load_settings
from refusal_audit.review.verdict_files import import_verdicts, stats_from_store
from warehouse.store import Warehouse

ROOT = Path(__file__).resolve().parent.parent
REFUSAL_LABELS = ("2_full_refusal", "3_partial_refusal")


def main() -> None:
    """Audit, import the label verdicts, print the agreement figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared-data", type=Path, default=ROOT.parent / "shared" / "data")
    args = parser.parse_args()
    files = sorted((args.shared_data / "xstest").glob("xstest_v2_completions_*.csv"))
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_settings(data_dir=Path(tmp), engine="local")
        store = Warehouse.open(cfg)
        options = BatchOptions.build(None, None, datetime(2026, 1, 5, tzinfo=UTC), None, None)
        run_batch(cfg, files, options, sink=store)
        labels = {
            row["log_id"]: (row["type"], row["label"])
            for row in store.select(
                "SELECT log_id, attributes['type'] AS type, attributes['final_label'] AS label "
                "FROM {db:Identifier}.refusal_events FINAL"
            )
        }
        path = Path(tmp) / "xstest_verdicts.csv"
        compared = 0
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["log_id", "reviewer", "verdict", "corrected_category",
                             "corrected_false_positive", "corrected_clause", "note"])  # fmt: skip
            for a in store.current_assessments():
                prompt_type, label = labels[a["log_id"]]
                if label not in REFUSAL_LABELS:
                    continue
                compared += 1
                human_fp = not prompt_type.startswith("contrast_")
                if human_fp == a["is_estimated_false_positive"]:
                    writer.writerow([a["log_id"], "xstest", "agree", "", "", "", ""])
                else:
                    writer.writerow([a["log_id"], "xstest", "disagree", a["category"],
                                     str(human_fp).lower(), "", "XSTest label"])  # fmt: skip
        bundles = load_bundles(cfg.policy_bundles)
        report = import_verdicts(store, bundles, path)
        groups = stats_from_store(store, bundles)
        store.close()
    print(f"XSTest files: {', '.join(p.name for p in files)}")
    print(
        f"verdicts: {compared} audited human-labelled refusals, {report.imported} imported, "
        f"{len(report.errors)} refused"
    )
    for g in groups:
        if g.key[0] != "all":
            continue
        fp = g.false_positive
        if fp.insufficient_data or fp.rate is None:
            print(f"{'/'.join(g.key)}: insufficient data ({fp.n} items)")
            continue
        kappa = (
            "undefined"
            if fp.kappa is None
            else f"{fp.kappa:.3f} [{fp.kappa_low:.3f}, {fp.kappa_high:.3f}]"
        )
        human, n, low, high = g.verified_fp
        print(
            f"false-positive judgement, n={fp.n}: agreement {fp.rate:.3f} "
            f"[{fp.rate_low:.3f}, {fp.rate_high:.3f}], Cohen's kappa {kappa}; "
            f"over-refusals reviewers found among the randomly sampled unflagged items "
            f"{human}/{n} [{low:.3f}, {high:.3f}]"
        )
        labels_order = fp.labels
        print(f"confusion (rows: model {labels_order}, columns: reviewers): {fp.confusion}")


if __name__ == "__main__":
    main()
