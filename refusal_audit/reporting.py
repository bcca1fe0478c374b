"""Print a run report for people, and serialise it as the ``--out`` JSON document."""

from __future__ import annotations

from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from processors.stats import wilson_interval
from refusal_audit.pipeline import RunReport

MAX_FAILURES_SHOWN = 20


def _rate(k: int, n: int) -> str:
    if n == 0:
        return "n/a"
    low, high = wilson_interval(k, n)
    return f"{k}/{n} = {k / n:.3f} [95% Wilson {low:.3f}, {high:.3f}]"


def print_report(report: RunReport, console: Console) -> None:
    """Print counts, the audit summary, gap flags and failures (file, location, reason)."""
    summary = report.summary()
    counts = Table(title="Run", show_header=False)
    for label, value in (
        ("records read", report.records),
        ("events (valid, unique)", report.events),
        ("refusals audited", len(report.assessments)),
        ("non-refusals (stored, not audited)", report.non_refusals),
        ("duplicate log_ids (audited once)", report.duplicates),
        ("rejected records (dead-lettered)", report.rejected),
        ("batches (failed)", f"{report.batches} ({report.failed_batches})"),
    ):
        counts.add_row(label, str(value))
    console.print(counts)

    total = summary.total_refusals
    categories = Table(title="Audit summary: categories")
    categories.add_column("category")
    categories.add_column("count", justify="right")
    categories.add_column("share", justify="right")
    for name, n in sorted(summary.categorization.items(), key=lambda kv: (-kv[1], kv[0])):
        categories.add_row(name, str(n), f"{n / total:.3f}" if total else "")
    console.print(categories)
    review = sum(a.requires_human_review for a in report.assessments)
    sampled = sum(a.sampled_for_review for a in report.assessments)
    console.print(
        f"estimated false positives (over-refusals): "
        f"{_rate(summary.estimated_false_positives, total)}"
    )
    console.print(
        f"flagged for human review: {_rate(review, total)}; sampled for review: {sampled}"
    )
    if summary.policy_gap_flags:
        grouped: dict[str, list[str]] = {}
        for flag in summary.policy_gap_flags:  # the same gap flagged by several batches
            grouped.setdefault(flag.description, []).extend(flag.example_log_ids)
        gaps = Table(title=f"Policy gap flags ({len(grouped)} distinct)")
        gaps.add_column("description")
        gaps.add_column("refusals", justify="right")
        gaps.add_column("examples")
        for description, ids in list(grouped.items())[:10]:
            gaps.add_row(description, str(len(ids)), ", ".join(ids[:3]))
        console.print(gaps)
    if report.failures:
        failures = Table(title=f"Failures ({len(report.failures)}, all kept as dead letters)")
        for column in ("source", "location", "reason_code", "reason"):
            failures.add_column(column, overflow="fold")
        for f in report.failures[:MAX_FAILURES_SHOWN]:
            failures.add_row(f.source, f.location, f.reason_code, f.reason)
        console.print(failures)
        if len(report.failures) > MAX_FAILURES_SHOWN:
            console.print(
                f"... and {len(report.failures) - MAX_FAILURES_SHOWN} more: "
                "refusal-audit query dead_letters"
            )


def report_document(report: RunReport) -> dict[str, Any]:
    """The full result as a JSON-ready dict: counts, summary, batches, assessments, failures."""
    return {
        "counts": {
            "records": report.records,
            "events": report.events,
            "refusals": report.refusals,
            "non_refusals": report.non_refusals,
            "duplicates": report.duplicates,
            "rejected": report.rejected,
            "batches": report.batches,
            "failed_batches": report.failed_batches,
            "failed_events": report.failed_events,
        },
        "audit_summary": report.summary().model_dump(mode="json"),
        "batches": [b.model_dump(mode="json") for b in report.batch_records],
        "individual_assessments": [a.model_dump(mode="json") for a in report.assessments],
        "failures": [vars(f) for f in report.failures],
    }


def report_json(report: RunReport) -> bytes:
    """``report_document`` serialised as indented JSON bytes."""
    return orjson.dumps(report_document(report), option=orjson.OPT_INDENT_2)


def _fmt_rate(r: dict[str, float]) -> str:
    return f"{r['value']:.3f} [{r['low']:.3f}, {r['high']:.3f}] ({r['k']}/{r['n']})"


def print_eval(figures: dict[str, Any], console: Console) -> None:
    """Print ``refusal_audit.evaluate.run_eval`` figures (rates with Wilson 95% intervals)."""
    engine = figures["engine"]
    console.print(
        f"engine {engine['name']} / {engine['model']} / {engine['version']}; "
        f"{figures['events']} labelled events, {figures['rejected']} rejected records"
    )
    table = Table(title="Agreement with the labels")
    for column in ("measure", "precision", "recall", "F1", "balanced accuracy", "other"):
        table.add_column(column)
    for key, title in (
        ("refusal_detection", "refusal detection"),
        ("false_positive_detection", "false positive (over-refusal)"),
    ):
        section = figures.get(key)
        if section is None:
            continue
        other = f"ROC AUC {section['roc_auc']:.3f}" if "roc_auc" in section else ""
        table.add_row(
            title,
            _fmt_rate(section["precision"]),
            _fmt_rate(section["recall"]),
            f"{section['f1']:.3f}",
            f"{section['balanced_accuracy']:.3f}",
            other,
        )
    console.print(table)
    categories = figures.get("category_agreement")
    if categories is not None:
        console.print(f"category agreement (top level): {_fmt_rate(categories['agreement'])}")
        confusion = Table(title="Category confusion (expected -> predicted)")
        for column in ("expected", "predicted", "count"):
            confusion.add_column(column)
        for cell in categories["confusion"]:
            confusion.add_row(cell["expected"], cell["predicted"], str(cell["count"]))
        console.print(confusion)
