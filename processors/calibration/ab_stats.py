"""The A/B analysis' statistics: comparisons against control, Holm, planned sample, SRM.

The tests and why they were chosen: ``processors.calibration.ab``'s docstring
("Statistics").
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import NormalIndPower
from statsmodels.stats.proportion import (
    confint_proportions_2indep,
    proportion_effectsize,
    test_proportions_2indep,
)

from processors.calibration.ab_aggregate import ArmFigures
from schemas.calibration import ExperimentPlan

__all__ = [
    "LOWER_IS_BETTER",
    "METRICS",
    "Comparison",
    "Metric",
    "SampleRatio",
    "compare_means",
    "compare_rates",
    "holm",
    "planned_units",
    "sample_ratio",
]

Metric = Literal["re_request_rate", "escalation_rate", "satisfaction"]
METRICS: tuple[Metric, ...] = ("re_request_rate", "escalation_rate", "satisfaction")
LOWER_IS_BETTER = {"re_request_rate": True, "escalation_rate": True, "satisfaction": False}


@dataclass(frozen=True)
class Comparison:
    """One metric of one treatment arm against control: ``difference`` (arm - control),
    its ``ci_low``/``ci_high`` at ``1 - alpha``, the raw ``p_value``, the Holm-adjusted
    ``p_adjusted``, ``significant`` (adjusted p < alpha) and ``direction`` (``better``,
    ``worse`` or ``none``: significant and which way). ``test`` names the test; p is None
    when the data cannot be tested (too few users)."""

    arm_id: str
    metric: Metric
    test: str
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    p_adjusted: float | None = None
    significant: bool = False
    direction: Literal["better", "worse", "none"] = "none"


def _finite(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def compare_rates(
    count: int, n: int, control_count: int, control_n: int, alpha: float,
    alternative: Literal["two-sided", "larger"] = "two-sided",
) -> tuple[float | None, float | None, float | None, float | None]:  # fmt: skip
    """``(difference, ci_low, ci_high, p)`` of rate ``count/n`` against
    ``control_count/control_n``: score test (``alternative`` two-sided or ``larger``) and
    Newcombe's interval at ``1 - alpha`` (module docstring). None where undefined (an
    empty arm); p is 1.0 when both rates are 0 or both 1 (no evidence of a difference)."""
    if n < 1 or control_n < 1:
        return None, None, None, None
    diff = count / n - control_count / control_n
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        low, high = confint_proportions_2indep(
            count, n, control_count, control_n, compare="diff", method="newcomb", alpha=alpha
        )
        if count + control_count in (0, n + control_n):
            p: float | None = 1.0
        else:
            result = test_proportions_2indep(
                count, n, control_count, control_n,
                compare="diff", method="score", alternative=alternative,
            )  # fmt: skip
            p = _finite(result.pvalue)
    return diff, _finite(low), _finite(high), p


def compare_means(
    values: Sequence[float], control: Sequence[float], alpha: float
) -> tuple[float | None, float | None, float | None, float | None]:
    """``(difference, ci_low, ci_high, p)`` of the mean of ``values`` against ``control``:
    Welch's t-test and its interval at ``1 - alpha``. None where undefined (fewer than two
    values in a group, or no variance in either)."""
    if len(values) < 2 or len(control) < 2:
        return None, None, None, None
    diff = float(np.mean(values) - np.mean(control))
    if np.var(values) == 0 and np.var(control) == 0:
        return diff, None, None, None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        result = stats.ttest_ind(values, control, equal_var=False)
        ci = result.confidence_interval(confidence_level=1 - alpha)
    return diff, _finite(ci.low), _finite(ci.high), _finite(result.pvalue)


def holm(comparisons: Sequence[Comparison], alpha: float) -> list[Comparison]:
    """``comparisons`` with Holm-adjusted p-values, ``significant`` and ``direction`` set
    (comparisons without a p-value are left out of the family and stay not significant)."""
    tested = [i for i, c in enumerate(comparisons) if c.p_value is not None]
    adjusted: dict[int, float] = {}
    if tested:
        _, p_adj, _, _ = multipletests(
            [comparisons[i].p_value for i in tested], alpha=alpha, method="holm"
        )
        adjusted = {i: float(p) for i, p in zip(tested, p_adj, strict=True)}
    out: list[Comparison] = []
    for i, c in enumerate(comparisons):
        p = adjusted.get(i)
        significant = p is not None and p < alpha
        direction: Literal["better", "worse", "none"] = "none"
        if significant and c.difference is not None and c.difference != 0:
            better = (c.difference < 0) == LOWER_IS_BETTER[c.metric]
            direction = "better" if better else "worse"
        out.append(replace(c, p_adjusted=p, significant=significant, direction=direction))
    return out


def planned_units(plan: ExperimentPlan) -> dict[str, int]:
    """Users needed per arm (module docstring, "Planned sample"): control's from
    ``NormalIndPower.solve_power`` with the smallest treatment/control weight ratio, each
    arm's in proportion to its weight (rounded up)."""
    control = next(a for a in plan.arms if a.arm_id == plan.control_arm)
    treatments = [a for a in plan.arms if a.arm_id != plan.control_arm]
    m = max(1, len(treatments) * len(METRICS))
    p0 = plan.baseline_re_request_rate
    p1 = p0 - plan.minimum_detectable_effect
    if p1 <= 0:
        p1 = p0 + plan.minimum_detectable_effect
    effect = abs(float(proportion_effectsize(p0, min(p1, 0.9999))))
    ratio = min(a.weight for a in treatments) / control.weight
    n_control = float(
        NormalIndPower().solve_power(
            effect_size=effect, alpha=plan.alpha / m, power=plan.power, ratio=ratio
        )
    )
    return {a.arm_id: math.ceil(n_control * a.weight / control.weight) for a in plan.arms}


@dataclass(frozen=True)
class SampleRatio:
    """The sample-ratio-mismatch check: users per arm, expected users from the planned
    weights, the chi-square statistic and p-value; ``mismatch`` when p < ``srm_alpha``."""

    observed: dict[str, int]
    expected: dict[str, float]
    statistic: float | None
    p_value: float | None
    mismatch: bool


def sample_ratio(figures: dict[str, ArmFigures], plan: ExperimentPlan) -> SampleRatio:
    """The chi-square goodness-of-fit test of users per arm against the planned weights
    (no test, and no mismatch, without any user)."""
    observed = {a.arm_id: figures[a.arm_id].units for a in plan.arms}
    total = sum(observed.values())
    weight = sum(a.weight for a in plan.arms)
    expected = {a.arm_id: total * a.weight / weight for a in plan.arms}
    if total == 0:
        return SampleRatio(observed, expected, None, None, False)
    result = stats.chisquare(list(observed.values()), list(expected.values()))
    p = _finite(result.pvalue)
    return SampleRatio(
        observed, expected, _finite(result.statistic), p, p is not None and p < plan.srm_alpha
    )
