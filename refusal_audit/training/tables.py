"""The evaluation tables of README.md and docs/evaluation.md, generated from the shipped
models' metadata and the benchmarks' saved results (no hand-copied numbers).

``refusal-audit train`` stores each model's held-out figures in its JSON metadata
(``refusal_prefilter.json`` ``folds``, ``category_model.json`` ``evaluation``); the
benchmarks write ``benchmarks/results/*.json`` (``intake_cost.py``,
``refusal_detection_loso.py``, ``prefilter_cascade.py``). The documents
hold generated blocks between ``<!-- generated:NAME -->`` and ``<!-- /generated:NAME -->``;
:func:`update` rewrites them from the metadata, and the test suite checks that they match.

Run: ``python -m refusal_audit.training.tables`` (rewrite) or ``--check`` (exit 1 when a
block is stale).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from refusal_audit.audit.prefilter_model import CATEGORY_STEM, SHIPPED_STEM
from refusal_audit.training import triage_eval
from refusal_audit.training.refusal import format_ci

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = (REPO / "README.md", REPO / "docs" / "evaluation.md")
_BLOCK = re.compile(r"(<!-- generated:([a-z-]+) -->\n)(.*?)(<!-- /generated:\2 -->)", re.DOTALL)


class MissingFigures(ValueError):
    """A shipped model was built without its held-out figures (``train --no-folds``)."""


def _metadata(stem: Path) -> dict[str, Any]:
    data = json.loads(stem.with_suffix(".json").read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{stem}.json is not a JSON object")
    return data


def _ci(value: float, ci: Sequence[float]) -> str:
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def prefilter_folds(meta: dict[str, Any]) -> str:
    """Refusal F1 per held-out source, cue scorer vs trained model (bootstrap 95% CI)."""
    folds = meta.get("folds") or []
    if not folds:
        raise MissingFigures("the refusal pre-filter model carries no fold figures")
    lines = [
        "| held-out source | n (refusals) | cue scorer F1 (response only) | trained F1 |",
        "| --- | --- | --- | --- |",
    ]
    for r in folds:
        cues, trained = r["cues"], r["trained"]
        lines.append(
            f"| {r['fold']} | {cues['n']} ({cues['refusals']}) | "
            f"{_ci(cues['f1'], cues['f1_ci'])} | {_ci(trained['f1'], trained['f1_ci'])} |"
        )
    return "\n".join(lines) + "\n"


def triage(meta: dict[str, Any]) -> str:
    """Category agreement, over-refusal AUC and XSTest end to end (triage_eval.markdown)."""
    evaluation = meta.get("evaluation") or {}
    if "category" not in evaluation:
        raise MissingFigures("the category model carries no held-out figures")
    return triage_eval.markdown(evaluation) + "\n"


#: Output of ``python benchmarks/intake_cost.py --json`` (CPU µs per event per stage).
COSTS = REPO / "benchmarks" / "results" / "intake_cost.json"
COST_TARGETS = {
    "intake + local engine": "<= 50",
    "end to end µs/event": "<= 100 (issue 11); <= 150 (issue 27)",
}
COST_STAGES = (
    ("decode+validate", "decode + validate"),
    ("fingerprint", "content fingerprint"),
    ("redaction", "redaction"),
    ("pre-filter", "pre-filter (cue scorer + request-aware stage)"),
    ("tokens", "token counting (LLM engines only; the local engine counts none)"),
    ("local engine", "local engine"),
    ("trend lines", "trend lines"),
    ("intake + local engine", "intake + local engine"),
    ("cascade", "refusal cascade (encoder head on the uncertain band)"),
    ("intake + local engine, cascade on", "intake + local engine, cascade on"),
    ("end to end µs/event", "`refusal-audit audit` into embedded chDB, beyond start-up"),
)


#: Issue 25's budget for intake + local engine with the cascade on, CPU µs per event:
#: 1.5 x the 170 µs measured when the issue was filed.
CASCADE_BUDGET_US = 255


def costs(figures: dict[str, Any]) -> str:
    """CPU µs per event of every stage (benchmarks/intake_cost.py --json) with the targets
    (the cascade rows only when the figures carry them)."""
    lines = [
        f"| stage ({figures['events']:,} events) | CPU µs per event | target |",
        "| --- | ---: | --- |",
    ]
    budget = f"<= {CASCADE_BUDGET_US} (1.5 x 170)"
    targets = {**COST_TARGETS, "intake + local engine, cascade on": budget}
    for key, label in COST_STAGES:
        if key not in figures:  # measured with --no-cascade
            continue
        if key == "cascade":
            low, high = figures["cascade band"]
            label += f" [{low:g}, {high:g}), {figures['cascade reached']:.1%} of events reach it"
        lines.append(f"| {label} | {figures[key]:.0f} | {targets.get(key, '')} |")
    lines.append(
        f"| end to end, events per second (wall) | {figures['end to end events/s (wall)']:,.0f} | |"
    )
    return "\n".join(lines) + "\n"


#: ``python benchmarks/refusal_detection_loso.py --json`` (cue rules vs request-aware stage).
DETECTION = REPO / "benchmarks" / "results" / "refusal_detection.json"
#: ``python benchmarks/prefilter_cascade.py --json`` (the cascade's curve, head out of source).
CASCADE = REPO / "benchmarks" / "results" / "prefilter_cascade.json"
#: The band of the cascade column of the detection table (the cost table's band).
CASCADE_TABLE_BAND = (0.3, 0.7)
#: Issue 25's refusal detection targets per source (F1).
DETECTION_TARGETS = {
    "xstest-gpt4": ">= 0.90",
    "xstest-llama2": ">= 0.90",
    "gptfuzz": ">= 0.90",
    "reuter": ">= 0.85",
}


def _fig(m: dict[str, Any]) -> str:
    return _ci(m["f1"], m["f1_ci"])


def detection(results: Sequence[dict[str, Any]], cascade: dict[str, Any]) -> str:
    """Refusal F1 per source: the cue rules (response only), the request-aware stage (the
    default), and the cascade at :data:`CASCADE_TABLE_BAND` with a head fitted without the
    source; bootstrap 95% intervals; the issue's target per source. Raises ``KeyError`` when
    the cascade figures lack that band or a source."""
    band = [list(row["band"]) for row in cascade["curve"]].index(list(CASCADE_TABLE_BAND))
    curve = cascade["curve"][band]["sources"]
    low, high = CASCADE_TABLE_BAND
    lines = [
        "| source | n (refusals) | cue rules, response only | request-aware stage "
        f"(default) | cascade [{low:g}, {high:g}), head out of source (reached) | target |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        c = curve[r["source"]]
        lines.append(
            f"| {r['source']} | {r['rules']['n']} ({r['rules']['refusals']}) | {_fig(r['rules'])}"
            f" | {_fig(r['request_aware'])} | {_fig(c)} ({c['reached']:.2f}) | "
            f"{DETECTION_TARGETS.get(r['source'], '')} |"
        )
    return "\n".join(lines) + "\n"


#: The curve's source columns, in the table's order, with their headings.
CURVE_SOURCES = (
    ("coconot", "CoCoNot"),
    ("gptfuzz", "GPTFuzz"),
    ("reuter", "ChatGPT (reuter)"),
    ("xstest-gpt4", "XSTest GPT-4"),
    ("xstest-llama2", "XSTest Llama-2"),
)


def cascade_curve(results: dict[str, Any]) -> str:
    """The refusal cascade's trade-off curve (``benchmarks/prefilter_cascade.py --json``): per
    band, the share of labelled rows the head decided, F1 per source with the head fitted
    without it (and the share of the source it decided), the share of the example log's
    events that reached the encoder and the CPU µs per event of pre-filter plus cascade."""
    head = ["band", "reached (labelled)", *(h for _, h in CURVE_SOURCES),
            "reached (example log)", "CPU µs/event"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row, cost in zip(results["curve"], results["cost"], strict=True):
        low, high = row["band"]
        cells = [f"[{low:g}, {high:g})" + (" off" if low == high else ""),
                 f"{row['reached']:.3f}"]  # fmt: skip
        for key, _ in CURVE_SOURCES:
            m = row["sources"][key]
            cells.append(f"{m['f1']:.3f} ({m['reached']:.2f})")
        cells += [f"{cost['reached']:.3f}", f"{cost['us_per_event']:,.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def request_aware(results: Sequence[dict[str, Any]]) -> str:
    """Per source, precision, recall and F1 (intervals) of the cue rules, the request-aware
    stage and the LOSO logistic, then what each override did
    (``benchmarks/refusal_detection_loso.py --json``)."""
    lines = [
        "| source | n (refusals) | detector | precision | recall | F1 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    labels = {
        "rules": "cue rules",
        "request_aware": "request-aware stage",
        "loso": "logistic over cue + request features (LOSO)",
    }
    for r in results:
        for key, label in labels.items():
            m = r[key]
            lines.append(
                f"| {r['source']} | {m['n']} ({m['refusals']}) | {label} | "
                f"{format_ci(m['precision'], m['precision_ci'])} | "
                f"{format_ci(m['recall'], m['recall_ci'])} | {format_ci(m['f1'], m['f1_ci'])} |"
            )
    lines.append("")
    lines.append("| source | override | fired | right |")
    lines.append("| --- | --- | --- | --- |")
    for r in results:
        for name, counts in r["overrides"].items():
            lines.append(f"| {r['source']} | {name} | {counts['fired']} | {counts['right']} |")
    return "\n".join(lines) + "\n"


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


RENDERERS: dict[str, Callable[[], str]] = {
    "detection": lambda: detection(_json(DETECTION), _json(CASCADE)),
    "cascade-curve": lambda: cascade_curve(_json(CASCADE)),
    "request-aware": lambda: request_aware(_json(DETECTION)),
    "costs": lambda: costs(_json(COSTS)),
    "prefilter-folds": lambda: prefilter_folds(_metadata(SHIPPED_STEM)),
    "triage": lambda: triage(_metadata(CATEGORY_STEM)),
}


def render(text: str) -> str:
    """``text`` with every generated block rewritten. ``KeyError`` for an unknown block."""

    def fill(m: re.Match[str]) -> str:
        return m.group(1) + RENDERERS[m.group(2)]() + m.group(4)

    return _BLOCK.sub(fill, text)


def update(paths: Sequence[Path] = DOCUMENTS, check: bool = False) -> list[Path]:
    """Rewrite (or with ``check`` only compare) the generated blocks of ``paths``; return the
    files that were (or would be) changed. Raises :class:`MissingFigures` (before writing
    anything) when a model lacks its figures."""
    rendered = {path: render(path.read_text(encoding="utf-8")) for path in paths}
    changed = [p for p, new in rendered.items() if new != p.read_text(encoding="utf-8")]
    if not check:
        for path in changed:
            path.write_text(rendered[path], encoding="utf-8")
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: rewrite the blocks, or ``--check`` (exit 1 when one is stale); exit 2
    when a shipped model carries no figures (nothing is written then)."""
    parser = argparse.ArgumentParser(
        prog="python -m refusal_audit.training.tables",
        description="Regenerate the evaluation tables of README.md and docs/evaluation.md "
        "from the shipped models' metadata (refusal_audit/models/*.json).",
    )
    parser.add_argument(
        "--check", action="store_true", help="only compare; exit 1 when a block is stale"
    )
    args = parser.parse_args(argv)
    try:
        changed = update(check=args.check)
    except MissingFigures as exc:
        print(
            f"error: {exc} (built with --no-folds?): rebuild it with "
            "`refusal-audit train -o refusal_audit/models`; nothing was written",
            file=sys.stderr,
        )
        return 2
    for path in changed:
        print(f"{'stale' if args.check else 'rewrote'}: {path}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
