"""Print a run report for people, and serialise it as the ``--out`` JSON document."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from processors.stats import wilson_interval
from refusal_audit.audit.pipeline import Failure, RunReport
from schemas.events import DISAGREEMENT_DIRECTIONS

MAX_FAILURES_SHOWN = 20


def _rate(k: int, n: int) -> str:
    if n == 0:
        return "n/a"
    low, high = wilson_interval(k, n)
    return f"{k}/{n} = {k / n:.3f} [95% Wilson {low:.3f}, {high:.3f}]"


MAX_GAPS_SHOWN = 10


def print_report(report: RunReport, console: Console) -> None:
    """Print counts, the audit summary, gap flags and failures (file, location, reason)."""
    summary = report.summary()
    counts = Table(title="Run", show_header=False)
    for label, value in (
        ("records read", report.records),
        ("events (valid, unique)", report.events),
        ("refusals audited", len(report.assessments)),
        ("refusals already audited (stored assessments listed)", len(report.stored_assessments)),
        ("non-refusals (stored, not audited)", report.non_refusals),
        ("identical copies of an event (skipped)", report.identical_copies),
        ("log_id reused with other content (dead-lettered)", report.duplicates),
        ("rejected records (dead-lettered)", report.rejected),
        ("batches (failed)", f"{report.batches} ({report.failed_batches})"),
    ):
        counts.add_row(label, str(value))
    console.print(counts)
    console.print(disagreement_line(report))
    if report.cascade:
        console.print(cascade_line(report.encoder_decided, report.events))
    if report.retired:
        shown = ", ".join(report.retired[:10]) + (" ..." if len(report.retired) > 10 else "")
        console.print(
            f"[yellow]{len(report.retired)} event(s) stored as refusals were judged "
            f"non-refusals this time (the pre-filter or its settings changed); their "
            f"assessments no longer count: {shown}[/yellow]"
        )

    total = summary.total_refusals
    categories = Table(title="Audit summary: categories")
    categories.add_column("category")
    categories.add_column("count", justify="right")
    categories.add_column("share", justify="right")
    for name, n in sorted(summary.categorization.items(), key=lambda kv: (-kv[1], kv[0])):
        categories.add_row(name, str(n), f"{n / total:.3f}" if total else "")
    console.print(categories)
    assessments = report.all_assessments()
    review = sum(a.requires_human_review for a in assessments)
    reasons = Counter(a.review_reason for a in assessments if a.sampled_for_review)
    console.print(
        f"estimated false positives (over-refusals): "
        f"{_rate(summary.estimated_false_positives, total)}"
    )
    extra = ", ".join(
        f"{reasons[r]} {r.replace('_', ' ')}" for r in sorted(reasons) if r != "flagged"
    )
    console.print(
        f"flagged for human review: {_rate(review, total)}; in review: "
        f"{sum(reasons.values())} (the flagged{', ' + extra if extra else ''})"
    )
    flags = summary.policy_gap_flags  # one per description, all its refusals (run-wide)
    if flags:
        gaps = Table(title=f"Policy gap flags ({len(flags)} distinct)")
        gaps.add_column("description")
        gaps.add_column("refusals", justify="right")
        gaps.add_column("examples")
        for flag in flags[:MAX_GAPS_SHOWN]:
            ids = list(dict.fromkeys(flag.example_log_ids))
            gaps.add_row(flag.description, str(len(ids)), ", ".join(ids[:3]))
        console.print(gaps)
        if len(flags) > MAX_GAPS_SHOWN:
            console.print(
                f"... and {len(flags) - MAX_GAPS_SHOWN} more: --out FILE lists them all, "
                "`refusal-audit gaps` groups them"
            )
    print_failures(report.failures, console)


def disagreement_line(report: RunReport) -> str:
    """One line: how many of the run's events the platform classifier and our refusal
    detection judged differently, by direction (``RunReport.disagreements``), and where the
    events are listed."""
    d = report.disagreements
    total = sum(d.values())
    if not total:
        return "classifier vs our refusal detection: no disagreement"
    return (
        f"[yellow]classifier vs our refusal detection: {total} disagreement(s) "
        f"({d['classifier_refusal_detector_not']} classifier refusal, detector not; "
        f"{d['detector_refusal_classifier_not']} detector refusal, classifier not); the "
        "classifier's verdict decided; both are stored: `refusal-audit query "
        "refusal_disagreement_events --all` lists them[/yellow]"
    )


def cascade_line(decided: int, events: int) -> str:
    """One line: how many of a run's ``events`` the refusal cascade's encoder head decided
    (``RunReport.encoder_decided``) and their share."""
    share = decided / events if events else 0.0
    return (
        f"refusal cascade: the encoder head decided {decided} of {events} event(s) "
        f"({share:.1%}; cue `encoder_head`)"
    )


def print_failures(failures: Sequence[Failure], console: Console, *, stored: bool = True) -> None:
    """Print failed records and batches as a table: source, location, reason code, reason.

    Prints nothing when there are none, at most ``MAX_FAILURES_SHOWN`` rows otherwise.
    ``stored``: the run kept them as dead letters (``audit``); ``eval`` stores nothing.
    """
    if not failures:
        return
    fate = "all kept as dead letters" if stored else "not evaluated"
    table = Table(title=f"Failures ({len(failures)}, {fate})")
    for column in ("source", "location", "reason_code", "reason"):
        table.add_column(column, overflow="fold")
    for f in failures[:MAX_FAILURES_SHOWN]:
        table.add_row(f.source, f.location, f.reason_code, f.reason)
    console.print(table)
    if len(failures) > MAX_FAILURES_SHOWN:
        more = "refusal-audit query dead_letters" if stored else "--json lists them all"
        console.print(f"... and {len(failures) - MAX_FAILURES_SHOWN} more: {more}")


def report_document(report: RunReport) -> dict[str, Any]:
    """The full result as a JSON-ready dict: counts, summary, batches, assessments, failures.

    ``individual_assessments`` (``StoredAssessment``s) lists the assessments made by this
    run, then the stored ones of the refusals it skipped as already audited
    (``RunReport.stored_assessments``); ``already_audited`` lists the log ids of the latter,
    in order, and ``counts.already_audited`` counts them."""
    return {
        "counts": {
            "records": report.records,
            "events": report.events,
            "refusals": report.refusals,
            "non_refusals": report.non_refusals,
            "duplicates": report.duplicates,
            "identical_copies": report.identical_copies,
            "rejected": report.rejected,
            "batches": report.batches,
            "failed_batches": report.failed_batches,
            "failed_events": report.failed_events,
            "already_audited": len(report.stored_assessments),
            "disagreements": {d: report.disagreements[d] for d in DISAGREEMENT_DIRECTIONS},
            "encoder_decided": report.encoder_decided,
        },
        "audit_summary": report.summary().model_dump(mode="json"),
        "batches": [b.model_dump(mode="json") for b in report.batch_records],
        "individual_assessments": [a.model_dump(mode="json") for a in report.all_assessments()],
        "already_audited": [a.log_id for a in report.stored_assessments],
        "failures": [vars(f) for f in report.failures],
        "retired": report.retired,
    }


def report_json(report: RunReport) -> bytes:
    """``report_document`` serialised as indented JSON bytes."""
    return orjson.dumps(report_document(report), option=orjson.OPT_INDENT_2)


def fmt_interval(r: dict[str, Any]) -> str:
    """A ``processors.evaluation.rate`` as ``value [low, high]`` (three decimals)."""
    return f"{r['value']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"


def _fmt_rate(r: dict[str, Any]) -> str:
    return f"{fmt_interval(r)} ({r['k']}/{r['n']})"


AGREEMENT_ROWS = (
    ("refusal_detection", "refusal detection"),
    ("text_prefilter_detection", "refusal detection, text pre-filter alone"),
    ("false_positive_detection", "false positive (over-refusal)"),
)


def eval_notes(figures: dict[str, Any]) -> list[str]:
    """Plain-words notes on ``run_eval`` figures: what each measure counts, what was not
    measured and why (no labels; a refusal label mapped into the classifier)."""
    notes: list[str] = []
    in_classifier = figures.get("refusal_label_in_classifier", 0)
    if in_classifier:
        notes.append(
            f"The refusal label of {_count(in_classifier, 'event', 'events')} was mapped into "
            "the classifier (classifier.is_refusal), and the pipeline trusts that verdict "
            "instead of its text pre-filter: its refusal decisions equal the label by "
            "construction, so there is nothing to measure there. The row 'text pre-filter "
            "alone' shows what the pre-filter would have decided without the mapped label."
        )
    if "refusal_detection" not in figures and not in_classifier:
        notes.append(
            "Refusal detection: not measured, no event has a refusal label (XSTest's "
            "final_label, or an is_refusal attribute or mapped classifier.is_refusal)."
        )
    fp = figures.get("false_positive_detection")
    if fp is None:
        notes.append(
            "Over-refusal (false positive) detection: not measured, no audited refusal has an "
            "over-refusal label (XSTest's prompt type, or a label attribute safe/unsafe)."
        )
    else:
        positives, left = fp["tp"] + fp["fn"], fp["labelled_refusals"] - fp["n"]
        why = "not passed by the pre-filter"
        if figures.get("failed_events"):
            why += " or in a failed batch"
        notes.append(
            f"Over-refusal figures count only the labelled refusals the pipeline audited: "
            f"{fp['n']} of {fp['labelled_refusals']} ({positives} of "
            f"{fp['labelled_over_refusals']} on safe prompts)."
            + (
                f" The other {left} were {why}, so they have no over-refusal estimate."
                if left
                else ""
            )
        )
    return notes


def _count(n: int, singular: str, plural: str) -> str:
    return f"{n} {singular if n == 1 else plural}"


def eval_counts(figures: dict[str, Any]) -> str:
    """One line: records read, events evaluated, and what was not evaluated (with a pointer
    to the failures table, which gives each one's reason)."""
    line = (
        f"{_count(figures['records'], 'record', 'records')} read, "
        f"{_count(figures['events'], 'event', 'events')} evaluated"
    )
    missing = []
    if figures["rejected"]:
        missing.append(_count(figures["rejected"], "rejected record", "rejected records"))
    if figures.get("duplicates"):
        missing.append(
            _count(figures["duplicates"], "duplicate log_id", "duplicate log_ids")
            + " (the first copy is evaluated)"
        )
    if figures["failed_batches"]:
        missing.append(
            _count(figures["failed_batches"], "failed batch", "failed batches")
            + f" ({_count(figures.get('failed_events', 0), 'event', 'events')} not audited)"
        )
    if missing:
        line += "; " + ", ".join(missing) + " (reasons under Failures below)"
    return line


def engine_steps_line(figures: dict[str, Any]) -> str | None:
    """One line: the LLM engine's calls and the events per step that resolved them (e.g.
    ``LLM calls: 5; events by the step that resolved them: first 10, retry 2, unresolved
    1``), or None when the engine made no call (the local engine)."""
    calls = figures.get("engine_calls", 0)
    if not calls:
        return None
    steps = figures.get("engine_steps", {})
    order = ["first", "split", "retry", "reaudit", "unresolved"]
    listed = [f"{s} {steps[s]}" for s in order if steps.get(s)]
    listed += [f"{s} {n}" for s, n in sorted(steps.items()) if s not in order and n]
    return f"LLM calls: {calls}; events by the step that resolved them: " + (
        ", ".join(listed) or "none"
    )


def classifier_vs_detector_line(figures: dict[str, Any]) -> str:
    """The eval's ``classifier_vs_detector`` figures in one line ("" when not measured):
    how often the platform classifier's verdict and our detection differed on labelled
    events, and which one the label sided with."""
    v = figures.get("classifier_vs_detector")
    if v is None:
        return ""
    line = (
        f"platform classifier vs our detection, {v['compared']} labelled events with both: "
        f"disagree on {_fmt_rate(v['disagreements'])} "
        f"({v['classifier_refusal_detector_not']} classifier refusal, detector not; "
        f"{v['detector_refusal_classifier_not']} detector refusal, classifier not)"
    )
    if v["disagreements"]["k"]:
        line += (
            f"; the label sides with the classifier {_fmt_rate(v['classifier_right'])}, "
            f"with our detection {_fmt_rate(v['detector_right'])}"
        )
    return line + (
        f"; F1 classifier {v['classifier']['f1']:.3f}, our detection {v['detector']['f1']:.3f}"
    )


def print_eval(figures: dict[str, Any], console: Console) -> None:
    """Print ``refusal_audit.audit.evaluation.run_eval`` figures (rates with Wilson 95% intervals).

    Counts first, then the agreement table (or, when nothing in it could be measured, why),
    notes on what the figures count, category agreement, and the failed records with their
    reasons (as ``audit`` lists them).
    """
    engine = figures["engine"]
    console.print(f"engine {engine['name']} / {engine['model']} / {engine['version']}")
    if "context_window" in engine:
        console.print(
            f"server {engine.get('server', 'unknown')}, context window "
            f"{engine['context_window']:,} tokens ({engine.get('context_source', '')}), "
            f"response_format {engine.get('response_format', '')}"
        )
    console.print(eval_counts(figures))
    if "encoder_decided" in figures:
        console.print(cascade_line(figures["encoder_decided"], figures["events"]))
    steps = engine_steps_line(figures)
    if steps:
        console.print(steps)
    table = Table(title="Agreement with the labels")
    for column in ("measure", "precision", "recall", "F1", "balanced accuracy", "other"):
        table.add_column(column)
    for key, title in AGREEMENT_ROWS:
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
    if table.row_count:
        console.print(table)
    else:
        console.print("Agreement with the labels: nothing to measure.")
    for note in eval_notes(figures):
        console.print(note)
    versus = classifier_vs_detector_line(figures)
    if versus:
        console.print(versus)
    categories = figures.get("category_agreement")
    if categories is not None:
        agreement = categories["agreement"]
        console.print(
            f"category agreement (top level): {_fmt_rate(agreement)}, over the "
            f"{agreement['n']} audited events of the {categories['labelled']} with a category "
            "label"
        )
        confusion = Table(title="Category confusion (expected -> predicted)")
        for column in ("expected", "predicted", "count"):
            confusion.add_column(column)
        for cell in categories["confusion"]:
            confusion.add_row(cell["expected"], cell["predicted"], str(cell["count"]))
        console.print(confusion)
    print_failures([Failure(**f) for f in figures.get("failures", [])], console, stored=False)
