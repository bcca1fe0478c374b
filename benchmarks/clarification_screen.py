"""The clarification request screen on the shared data: unsafe requests routed to
clarification (target 0, each listed) and what the screen costs on safe and ambiguous ones.

Opens every request of the shared data (``refusal_audit.clarification.screen_eval``) with the
``local`` classifier and question engine over the example bundle, as ``clarify serve``
does, and prints per group the share routed to clarification (route ``policy_gray_zone``):

- worst case: every request with a refusal worded as a clarifying question (only the
  request screen keeps an unsafe request from being asked about);
- real refusal: the unsafe requests with the refusals the data holds.

Unsafe groups list every request routed to clarification, with the questions surfaced. The
worst case's ``dev`` / ``held-out`` columns split each group by
:func:`refusal_audit.clarification.screen_eval.held_out` (the half not looked at while the
screen's first rules were written; docs/clarification.md says which figures are
in-sample). The safe groups show the cost: a request of theirs that is no longer clarified
stays refused.

Run: ``python benchmarks/clarification_screen.py [--data ../shared/data] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from processors.clarification.flow import Clarifier
from processors.clarification.local_questions import LocalQuestionEngine
from processors.engines.local import LocalEngine
from refusal_audit.clarification.screen_eval import (
    GroupResult,
    Probe,
    held_out,
    measure,
    real_refusal_probes,
    worst_case_probes,
)
from refusal_audit.training.triage_eval import example_bundle

ROOT = Path(__file__).resolve().parents[1]


def _split(result: GroupResult, probes: list[Probe]) -> str:
    ids = [p.id for p in probes if p.group == result.group]
    clarified = {i for i, _, _ in result.clarified}
    parts = []
    for name, keep in (("dev", False), ("held-out", True)):
        part = [i for i in ids if held_out(i) == keep]
        parts.append(f"{name} {sum(i in clarified for i in part)}/{len(part)}")
    return ", ".join(parts)


def _print(title: str, groups: dict[str, GroupResult], probes: list[Probe] | None) -> None:
    print(f"\n== {title}")
    for result in groups.values():
        label = "unsafe" if result.unsafe else "safe/ambiguous"
        split = f"  ({_split(result, probes)})" if probes is not None else ""
        counts = f"{len(result.clarified):4d}/{result.total:<5d} {result.share:6.1%}"
        print(f"{result.group:34s} {label:15s} routed to clarification {counts}{split}")
    for result in groups.values():
        if result.unsafe and result.clarified:
            print(f"\n-- {result.group}: unsafe requests routed to clarification")
            for probe_id, request, questions in result.clarified:
                print(f"  {probe_id}: {request[:160]!r}")
                for q in questions:
                    print(f"      asked: {q}")


def main(argv: list[str] | None = None) -> int:
    """Print the figures; exit 0 (a benchmark, not a gate: tests/ holds the gate)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    bundle = example_bundle()
    clarifier = Clarifier(LocalEngine(), LocalQuestionEngine(), {"default": bundle})
    worst = worst_case_probes(args.data)
    real = real_refusal_probes(args.data)
    worst_groups = measure(clarifier, worst)
    real_groups = measure(clarifier, real)
    if args.json:
        out = {
            name: {
                g.group: {"unsafe": g.unsafe, "total": g.total, "clarified": len(g.clarified),
                          "requests": [r for _, r, _ in g.clarified] if g.unsafe else []}
                for g in groups.values()
            }
            for name, groups in (("worst_case", worst_groups), ("real_refusal", real_groups))
        }  # fmt: skip
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    _print("worst case: every request, refusal worded as a clarifying question", worst_groups,
           worst)  # fmt: skip
    _print("real refusal: unsafe requests with the data's own refusals", real_groups, None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
