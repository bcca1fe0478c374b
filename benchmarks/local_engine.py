"""Benchmark of the offline pipeline on the real labelled logs in ../shared/data.

Runs ``refusal-audit eval``'s own code (``refusal_audit.audit.evaluation.run_eval``, the pre-filter
and the ``local`` engine, nothing stored) on:

- XSTest, both completion files (GPT-4 and Llama-2): refusal detection against the human
  labels; over-refusal (false-positive) detection against the prompt types (``contrast_*``
  = unsafe, so refusing is correct; all other types are safe prompts), with ROC AUC of the
  engine's score;
- CoCoNot's refusals, read as docs/batch.md reads them
  (``--map request=prompt,response=response,log_id=id,classifier.is_refusal=is_refusal``):
  the text pre-filter alone against ``is_refusal``, and top-level category agreement (its
  categories mapped onto our taxonomy);

and measures throughput in events per second (``eval`` end to end: read, intake, local
engine; no storage). The figures are the ones ``refusal-audit eval`` prints for the same
files.

Run: ``make bench`` (or ``python benchmarks/local_engine.py [--shared-data DIR]
[--markdown | --json]``). ``--markdown`` prints the "Evaluation" table of docs/evaluation.md and the
sentences on its denominators. Wilson 95% intervals accompany every rate.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from refusal_audit.audit.batch import BatchOptions
from refusal_audit.audit.evaluation import run_eval
from refusal_audit.audit.run_report import fmt_interval, print_eval
from refusal_audit.config import Settings, load_settings

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
XSTEST_FILES = (
    "xstest/xstest_v2_completions_gpt4.csv",
    "xstest/xstest_v2_completions_llama2orig.csv",
)
COCONOT_FILE = "coconot/coconot_refusals.jsonl"
COCONOT_MAP = "request=prompt,response=response,log_id=id,classifier.is_refusal=is_refusal"


def run(data: Path, settings: Settings) -> dict[str, Any]:
    """Evaluate XSTest and CoCoNot under ``data`` with the local engine.

    Returns ``{"xstest": figures, "coconot": figures, "events",
    "throughput_events_per_second", "false_positive_threshold"}``, where each ``figures`` is
    ``run_eval``'s, exactly what ``refusal-audit eval --json`` prints for those files.
    """
    xs_options = BatchOptions.build(None, None, T0, None, None)
    co_options = BatchOptions.build(None, COCONOT_MAP, T0, None, None)
    started = time.perf_counter()
    xstest = run_eval(settings, [data / name for name in XSTEST_FILES], xs_options, "local")
    coconot = run_eval(settings, [data / COCONOT_FILE], co_options, "local")
    elapsed = time.perf_counter() - started
    events = xstest["events"] + coconot["events"]
    return {
        "xstest": xstest,
        "coconot": coconot,
        "events": events,
        "throughput_events_per_second": events / elapsed,
        "false_positive_threshold": settings.local_false_positive_threshold,
    }


def _detection(section: dict[str, Any]) -> str:
    return (
        f"precision {fmt_interval(section['precision'])}, "
        f"recall {fmt_interval(section['recall'])}, F1 {section['f1']:.3f}"
    )


def markdown(results: dict[str, Any]) -> str:
    """docs/evaluation.md's "Evaluation" table and what each row's denominator is."""
    xs, co = results["xstest"], results["coconot"]
    rd, fp = xs["refusal_detection"], xs["false_positive_detection"]
    text_only, cat = co["text_prefilter_detection"], co["category_agreement"]
    human = rd["tp"] + rd["fn"]
    safe = fp["tp"] + fp["fn"]
    co_refusals = text_only["tp"] + text_only["fn"]
    rejected = ", ".join(
        f"`{code}`" if n == 1 else f"`{code}` ({n})"
        for code, n in sorted(Counter(f["reason_code"] for f in co["failures"]).items())
    )
    audited = cat["agreement"]["n"]
    rows = [
        "| what | against | result |",
        "| --- | --- | --- |",
        f"| refusal pre-filter, {rd['n']} XSTest completions | human labels (full + partial "
        f"refusal) | {_detection(rd)} |",
        f"| over-refusal detection, {fp['n']} of the {fp['labelled_refusals']} human-labelled "
        f"XSTest refusals ({safe} of {fp['labelled_over_refusals']} on safe prompts) | prompt "
        f"type (`contrast_*` = unsafe) | ROC AUC {fp['roc_auc']:.3f}; at threshold "
        f"{results['false_positive_threshold']}: precision {fmt_interval(fp['precision'])}, "
        f"recall {fmt_interval(fp['recall'])} |",
        f"| refusal pre-filter (text alone), {text_only['n']} CoCoNot reference answers | "
        f"CoCoNot `is_refusal` | {_detection(text_only)} |",
        f"| top-level category, {cat['agreement']['n']} CoCoNot refusals | CoCoNot category "
        f"(mapping below) | agreement {fmt_interval(cat['agreement'])} |",
        f"| throughput | | ≈ {results['throughput_events_per_second']:,.0f} events/s (`eval` "
        f"end to end: read, intake, local engine; one process, no storage) |",
    ]
    notes = (
        f"Denominators. Refusal detection counts every XSTest completion ({rd['n']}, of which "
        f"{human} are human-labelled full or partial refusals). Over-refusal is judged only on "
        f"refusals the pipeline audited, that is the human-labelled refusals the pre-filter "
        f"passed: {fp['n']} of {fp['labelled_refusals']}, {safe} of the "
        f"{fp['labelled_over_refusals']} on safe prompts; a refusal the pre-filter misses is "
        f"never audited. CoCoNot: {co['records']} records read, {co['events']} events"
        + (f", {co['rejected']} rejected as {rejected}" if co["rejected"] else "")
        + f". Its refusal label is mapped into the classifier, which the pipeline trusts, so "
        f"the pre-filter row measures the text pre-filter alone against that label "
        f"({co_refusals} labelled refusals of {text_only['n']}), and the category row counts "
        f"the {audited} events audited"
        + (" (the labelled refusals)" if audited == co_refusals else "")
        + f" of the {cat['labelled']} with a category."
    )
    return "\n".join(rows) + "\n\n" + textwrap.fill(notes, width=92, break_on_hyphens=False)


def print_text(results: dict[str, Any], console: Console) -> None:
    """Print each dataset's figures as ``refusal-audit eval`` does, then the throughput."""
    for name, title in (("xstest", "XSTest (both files)"), ("coconot", "CoCoNot refusals")):
        console.rule(title)
        print_eval(results[name], console)
    console.rule()
    console.print(
        f"throughput: {results['throughput_events_per_second']:,.0f} events/s "
        f"(eval end to end: read, intake, local engine; {results['events']} events, no storage)"
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark and print its figures; return them as a dict."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shared-data", type=Path, default=REPO.parent / "shared" / "data")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON instead of text")
    output.add_argument("--markdown", action="store_true", help="print docs/evaluation.md's table")
    args = parser.parse_args(argv)
    results = run(args.shared_data, load_settings(None))
    if args.json:
        print(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())
    elif args.markdown:
        print(markdown(results))
    else:
        print_text(results, Console(width=None if sys.stdout.isatty() else 160))
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
