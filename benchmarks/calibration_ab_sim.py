"""How often the A/B report errs on simulated experiments (``processors.calibration.ab_sim``).

``python benchmarks/calibration_ab_sim.py [--seeds 40]`` runs every scenario with seeds
1..N and prints, per scenario, the share of runs ending in each status, the share naming the
simulated winner, and the share of arms the guardrail flags that were not simulated as
permissive (false alarms) and of permissive arms it missed.
"""

from __future__ import annotations

import argparse
from collections import Counter
from datetime import UTC, datetime

from processors.calibration.ab import analyse
from processors.calibration.ab_sim import SCENARIOS, plan_for, simulate


def main() -> None:
    """Print the table (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=40)
    args = parser.parse_args()
    start = datetime(2026, 3, 2, tzinfo=UTC)
    for name, scenario in SCENARIOS.items():
        statuses: Counter[str] = Counter()
        right_winner = false_flags = missed = arms = 0
        for seed in range(1, args.seeds + 1):
            report = analyse(simulate(scenario, name, start, seed), plan_for(scenario, name))
            statuses[report.status] += 1
            right_winner += report.winner == scenario.expect_winner
            for g in report.guardrails:
                arms += 1
                expected = g.arm_id in scenario.expect_safety
                false_flags += g.safety_regression and not expected
                missed += expected and not g.safety_regression
        n = args.seeds
        shares = ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(statuses.items()))
        print(
            f"{name}: {shares}; expected winner {right_winner / n:.2f}; guardrail false alarms "
            f"{false_flags} of {arms} arms, misses {missed}"
        )


if __name__ == "__main__":
    main()
