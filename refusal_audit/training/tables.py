"""The evaluation tables of README.md and docs/evaluation.md, generated from the shipped
models' metadata (no hand-copied numbers).

``refusal-audit train`` stores each model's held-out figures in its JSON metadata
(``refusal_prefilter.json`` ``folds``, ``category_model.json`` ``evaluation``). The documents
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

from refusal_audit.prefilter_model import CATEGORY_STEM, SHIPPED_STEM
from refusal_audit.training import triage_eval

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
COST_TARGETS = {"intake + local engine": "<= 50", "end to end µs/event": "<= 100"}
COST_STAGES = (
    ("decode+validate", "decode + validate"),
    ("fingerprint", "content fingerprint"),
    ("redaction", "redaction"),
    ("pre-filter", "pre-filter (cue scorer)"),
    ("tokens", "token counting"),
    ("local engine", "local engine"),
    ("trend lines", "trend lines"),
    ("intake + local engine", "intake + local engine"),
    ("end to end µs/event", "`refusal-audit audit` into embedded chDB, beyond start-up"),
)


def costs(figures: dict[str, Any]) -> str:
    """CPU µs per event of every stage (benchmarks/intake_cost.py --json) with the targets."""
    lines = [
        f"| stage ({figures['events']:,} events) | CPU µs per event | target |",
        "| --- | ---: | --- |",
    ]
    for key, label in COST_STAGES:
        lines.append(f"| {label} | {figures[key]:.0f} | {COST_TARGETS.get(key, '')} |")
    lines.append(
        f"| end to end, events per second (wall) | {figures['end to end events/s (wall)']:,.0f} | |"
    )
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[[], str]] = {
    "costs": lambda: costs(json.loads(COSTS.read_text(encoding="utf-8"))),
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
