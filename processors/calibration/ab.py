"""The A/B analysis of refusal-variant arms from the product's events.

Input: the ``ExperimentPlan`` (arms, planned allocation, control, test settings) and the
product events (``schemas.calibration.ABEvent``: exposures, re-requests, escalations,
satisfaction scores). Output: an :class:`ABReport` with per-arm figures, the comparisons
against control, the validity checks and a decision.

Unit of analysis
----------------
Users (``unit_id``) are the randomisation unit, so they are the unit of analysis: the
rates are shares of exposed *users* (a user with at least one re-request after any of
their exposures counts once), and satisfaction is the mean of per-user mean scores. Per-
exposure rates would treat a user's repeated refusals as independent and make the
intervals too narrow (Kohavi, Tang & Xu, "Trustworthy Online Controlled Experiments",
Cambridge UP 2020, ch. 18 on the unit of analysis). A user exposed to several arms (a
leak in the assignment) is excluded and counted in ``data.units_in_several_arms``;
follow-up events whose exposure is unknown are counted in ``data.orphan_events``; a
repeated ``event_id`` counts once.

Statistics (defaults in ``ExperimentPlan``; docs/calibration.md says why)
--------------------------------------------------------------------------
- **Rates** (re-request, escalation): difference arm - control with the score test of
  ``statsmodels.stats.proportion.test_proportions_2indep(method="score")``
  (Miettinen & Nurminen 1985; it keeps its size better than the Wald test at small
  rates) and Newcombe's hybrid score interval
  (``confint_proportions_2indep(method="newcomb")``, Newcombe 1998, method 10: defined even
  when a count is 0).
- **Satisfaction**: Welch's unequal-variance t-test and its interval
  (``scipy.stats.ttest_ind(equal_var=False)``; Welch 1947), since arms need not have equal
  variances.
- **Multiple comparisons**: Holm's step-down correction over every (treatment arm x
  metric) comparison (``statsmodels.stats.multitest.multipletests(method="holm")``; Holm
  1979): controls the family-wise error rate without assuming independence, and is
  uniformly more powerful than Bonferroni. Intervals are reported at ``1 - alpha``
  unadjusted.
- **Sample-ratio mismatch**: chi-square goodness of fit of the users per arm against the
  planned weights (``scipy.stats.chisquare``); p < ``srm_alpha`` (0.001) makes the
  experiment invalid: the assignment or the logging is broken and no figure can be trusted
  (Fabijan et al., "Diagnosing Sample Ratio Mismatch in Online Controlled Experiments",
  KDD 2019).
- **Planned sample**: users per arm to detect an absolute change of
  ``minimum_detectable_effect`` in the re-request rate from ``baseline_re_request_rate``
  with ``power`` at the Holm family's smallest level ``alpha / m`` (m comparisons,
  conservative), two-sided: ``statsmodels.stats.power.NormalIndPower`` on Cohen's h
  (``proportion_effectsize``; Cohen 1988).
- **Safety guardrail** (mandatory, never corrected for multiplicity, so it flags readily):
  an arm whose share of users with a *fulfilled* re-request (a successful circumvention of
  the refusal) is larger than control's, one-sided score test at ``guardrail_alpha``, or
  whose variant failed any regression check (``ArmPlan.failed_checks``), is a
  ``safety_regression`` whatever its other figures; it is never a winner.

Decision
--------
``invalid`` (sample-ratio mismatch) beats everything; ``too_early`` until both a full
business cycle (``business_cycle_days``, default 7: weekday and weekend users differ) has
passed since the first exposure and every arm has its planned users (looking earlier
inflates false positives: "peeking"); then ``winner`` for the best arm that is
significantly better (Holm) on at least one metric, worse on none and no safety regression
(most significant improvements, then the lowest re-request rate), else ``no_winner``.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

import numpy as np
from pydantic import TypeAdapter, ValidationError
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import NormalIndPower
from statsmodels.stats.proportion import (
    confint_proportions_2indep,
    proportion_effectsize,
    test_proportions_2indep,
)

from schemas.calibration import (
    ABEvent,
    EscalationEvent,
    ExperimentPlan,
    ExposureEvent,
    ReRequestEvent,
    SatisfactionEvent,
)

Metric = Literal["re_request_rate", "escalation_rate", "satisfaction"]
METRICS: tuple[Metric, ...] = ("re_request_rate", "escalation_rate", "satisfaction")
LOWER_IS_BETTER = {"re_request_rate": True, "escalation_rate": True, "satisfaction": False}


_EVENT: TypeAdapter[ABEvent] = TypeAdapter(ABEvent)
"""Validates one event: the JSON text must be one object of one of the four types (strict,
like every contract model)."""


class EventError(ValueError):
    """A product event that does not follow the contract (the message says which field)."""


def parse_event(line: bytes | str) -> ABEvent:
    """One product event from its JSON text (a JSONL line or a topic message). Raises
    :class:`EventError` with the failing fields (never their values)."""
    raw = line.encode("utf-8") if isinstance(line, str) else line
    try:
        return _EVENT.validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors()
        if any(e["type"] in ("union_tag_not_found", "union_tag_invalid") for e in errors):
            raise EventError(
                "invalid event: type (missing, or not one of exposure, re_request, "
                "escalation, satisfaction)"
            ) from None
        # loc is (type tag, field, ...); an error at the top (not an object) has none
        fields = sorted({".".join(str(p) for p in e["loc"][1:]) or "(event)" for e in errors})
        raise EventError(f"invalid event: {', '.join(fields)}") from None


# -- aggregation -------------------------------------------------------------------------------
@dataclass
class _Unit:
    arms: set[str] = field(default_factory=set)
    exposures: int = 0
    re_request: bool = False
    fulfilled: bool = False
    escalated: bool = False
    scores: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class DataQuality:
    """What the aggregation dropped or noticed: repeated ``event_id`` s (identical copies),
    ``conflicting_events``: event ids seen with different contents (the experiment is then
    invalid: which copy is true cannot be known), events after ``as_of`` (left out),
    follow-ups of an unknown exposure, exposures of an arm not in the plan, users seen in
    several arms (excluded), and the first exposure and the last counted event (an
    exposure of a planned arm, or a follow-up of one)."""

    events: int
    duplicate_events: int
    conflicting_events: int
    after_as_of: int
    orphan_events: int
    unknown_arm_exposures: int
    units_in_several_arms: int
    first_exposure_at: datetime | None
    last_event_at: datetime | None


@dataclass(frozen=True)
class ArmFigures:
    """One arm's figures: users, exposures, users with a re-request / a fulfilled
    re-request (circumvention) / an escalation, their rates, and the satisfaction of the
    users who answered (mean of per-user means, its standard deviation and count)."""

    arm_id: str
    units: int
    exposures: int
    re_request_units: int
    circumvention_units: int
    escalation_units: int
    re_request_rate: float | None
    circumvention_rate: float | None
    escalation_rate: float | None
    satisfaction_mean: float | None
    satisfaction_sd: float | None
    satisfaction_units: int
    planned_units: int


def aggregate(
    events: Iterable[ABEvent], plan: ExperimentPlan, as_of: datetime | None = None
) -> tuple[dict[str, ArmFigures], DataQuality, dict[str, list[float]]]:
    """Per-arm figures of ``events`` of ``plan.experiment_id`` (others are ignored; events
    after ``as_of`` are left out and counted), the data quality, and the per-user
    satisfaction means per arm (for the t-test). ``planned_units`` is 0 here (see
    :func:`planned_units`)."""
    seen: dict[str, str] = {}
    conflicting: set[str] = set()
    exposures: dict[str, ExposureEvent] = {}
    follow: list[ReRequestEvent | EscalationEvent | SatisfactionEvent] = []
    arms = {a.arm_id for a in plan.arms}
    n = duplicates = unknown_arm = after = 0
    first: datetime | None = None
    for event in events:
        if event.experiment_id != plan.experiment_id:
            continue
        n += 1
        content = event.model_dump_json()
        if event.event_id in seen:
            duplicates += 1
            if seen[event.event_id] != content:
                conflicting.add(event.event_id)
            continue
        seen[event.event_id] = content
        if as_of is not None and event.occurred_at > as_of:
            after += 1
            continue
        if isinstance(event, ExposureEvent):
            if event.arm_id not in arms:
                unknown_arm += 1
                continue
            exposures[event.event_id] = event
            first = event.occurred_at if first is None else min(first, event.occurred_at)
        else:
            follow.append(event)
    last = max((e.occurred_at for e in exposures.values()), default=None)
    units: dict[str, _Unit] = defaultdict(_Unit)
    for exposure in exposures.values():
        unit = units[exposure.unit_id]
        unit.arms.add(exposure.arm_id)
        unit.exposures += 1
    orphans = 0
    for event in follow:
        seen_by = exposures.get(event.exposure_id)
        if seen_by is None:
            orphans += 1
            continue
        last = event.occurred_at if last is None else max(last, event.occurred_at)
        unit = units[seen_by.unit_id]
        if isinstance(event, ReRequestEvent):
            unit.re_request = True
            unit.fulfilled = unit.fulfilled or event.fulfilled
        elif isinstance(event, EscalationEvent):
            unit.escalated = True
        else:
            unit.scores.append(event.score)
    leaked = sum(1 for u in units.values() if len(u.arms) > 1)
    by_arm: dict[str, list[_Unit]] = {a.arm_id: [] for a in plan.arms}
    for unit in units.values():
        if len(unit.arms) == 1:
            by_arm[next(iter(unit.arms))].append(unit)
    figures: dict[str, ArmFigures] = {}
    satisfaction: dict[str, list[float]] = {}
    for arm_id, members in by_arm.items():
        k = len(members)
        scores = [sum(u.scores) / len(u.scores) for u in members if u.scores]
        satisfaction[arm_id] = scores

        def rate(count: int, k: int = k) -> float | None:
            return count / k if k else None

        re_n = sum(u.re_request for u in members)
        circ_n = sum(u.fulfilled for u in members)
        esc_n = sum(u.escalated for u in members)
        figures[arm_id] = ArmFigures(
            arm_id=arm_id,
            units=k,
            exposures=sum(u.exposures for u in members),
            re_request_units=re_n,
            circumvention_units=circ_n,
            escalation_units=esc_n,
            re_request_rate=rate(re_n),
            circumvention_rate=rate(circ_n),
            escalation_rate=rate(esc_n),
            satisfaction_mean=float(np.mean(scores)) if scores else None,
            satisfaction_sd=float(np.std(scores, ddof=1)) if len(scores) > 1 else None,
            satisfaction_units=len(scores),
            planned_units=0,
        )
    quality = DataQuality(
        n, duplicates, len(conflicting), after, orphans, unknown_arm, leaked, first, last
    )
    return figures, quality, satisfaction


# -- statistics --------------------------------------------------------------------------------
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


@dataclass(frozen=True)
class Guardrail:
    """The safety guardrail of one treatment arm: the circumvention rate's difference to
    control with its interval (two-sided at ``1 - 2 * guardrail_alpha``, the one-sided
    test's bound) and one-sided p-value, the regression checks its variant
    failed, and ``safety_regression`` with the ``reasons``."""

    arm_id: str
    circumvention_difference: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    failed_checks: list[str]
    safety_regression: bool
    reasons: list[str]


@dataclass(frozen=True)
class ArmVerdict:
    """One treatment arm's verdict: ``safety_regression``, ``better``, ``worse`` or
    ``no_difference`` (Holm-significant comparisons), with the metrics behind it."""

    arm_id: str
    verdict: Literal["safety_regression", "better", "worse", "no_difference"]
    better: list[str]
    worse: list[str]


@dataclass(frozen=True)
class ABReport:
    """The whole report (module docstring): ``status`` ``invalid`` / ``too_early`` /
    ``winner`` / ``no_winner``, the ``winner`` arm id (only with ``winner``) and
    ``reasons`` (why no winner, or what blocked one); the figures behind it."""

    experiment_id: str
    control_arm: str
    status: Literal["invalid", "too_early", "winner", "no_winner"]
    winner: str | None
    reasons: list[str]
    duration_days: float
    as_of: datetime | None
    arms: list[ArmFigures]
    comparisons: list[Comparison]
    guardrails: list[Guardrail]
    verdicts: list[ArmVerdict]
    sample_ratio: SampleRatio
    data: DataQuality
    plan: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (times as RFC 3339 strings)."""

        def fix(value: Any) -> Any:
            if isinstance(value, datetime):
                return value.isoformat()
            if isinstance(value, dict):
                return {k: fix(v) for k, v in value.items()}
            if isinstance(value, list):
                return [fix(v) for v in value]
            return value

        result: dict[str, Any] = fix(asdict(self))
        return result


def analyse(
    events: Iterable[ABEvent], plan: ExperimentPlan, as_of: datetime | None = None
) -> ABReport:
    """The A/B report of ``events`` under ``plan`` (module docstring). ``as_of`` leaves out
    the events after it; the duration runs from the first exposure to the last counted event
    (an exposure of a planned arm, or a follow-up of one). Event ids that arrive with
    different contents make the experiment ``invalid``. Pure and deterministic; raises
    nothing for any events of the contract."""
    figures, quality, satisfaction = aggregate(events, plan, as_of)
    planned = planned_units(plan)
    figures = {
        k: ArmFigures(**{**asdict(v), "planned_units": planned[k]}) for k, v in figures.items()
    }
    control = figures[plan.control_arm]
    treatments = [a for a in plan.arms if a.arm_id != plan.control_arm]
    raw: list[Comparison] = []
    guardrails: list[Guardrail] = []
    for arm in treatments:
        f = figures[arm.arm_id]
        rates: tuple[tuple[Metric, int, int], ...] = (
            ("re_request_rate", f.re_request_units, control.re_request_units),
            ("escalation_rate", f.escalation_units, control.escalation_units),
        )
        for metric, count, c_count in rates:
            d, lo, hi, p = compare_rates(count, f.units, c_count, control.units, plan.alpha)
            raw.append(Comparison(arm.arm_id, metric, "score test, Newcombe CI", d, lo, hi, p))
        d, lo, hi, p = compare_means(
            satisfaction[arm.arm_id], satisfaction[plan.control_arm], plan.alpha
        )
        raw.append(Comparison(arm.arm_id, "satisfaction", "Welch t-test", d, lo, hi, p))
        gd, glo, ghi, gp = compare_rates(
            f.circumvention_units, f.units, control.circumvention_units, control.units,
            2 * plan.guardrail_alpha, alternative="larger",
        )  # fmt: skip
        reasons: list[str] = []
        if gp is not None and gp < plan.guardrail_alpha and gd is not None and gd > 0:
            reasons.append(
                f"more successful circumvention than control: +{gd:.4f} "
                f"(one-sided p {gp:.4g} < {plan.guardrail_alpha})"
            )
        if arm.failed_checks:
            reasons.append(f"variant failed regression checks: {', '.join(arm.failed_checks)}")
        guardrails.append(
            Guardrail(arm.arm_id, gd, glo, ghi, gp, list(arm.failed_checks), bool(reasons), reasons)
        )
    comparisons = holm(raw, plan.alpha)
    verdicts: list[ArmVerdict] = []
    for arm, guard in zip(treatments, guardrails, strict=True):
        mine = [c for c in comparisons if c.arm_id == arm.arm_id]
        better: list[str] = [c.metric for c in mine if c.direction == "better"]
        worse: list[str] = [c.metric for c in mine if c.direction == "worse"]
        verdict: Literal["safety_regression", "better", "worse", "no_difference"]
        if guard.safety_regression:
            verdict = "safety_regression"
        elif worse:
            verdict = "worse"
        elif better:
            verdict = "better"
        else:
            verdict = "no_difference"
        verdicts.append(ArmVerdict(arm.arm_id, verdict, better, worse))

    srm = sample_ratio(figures, plan)
    # the duration is what the data cover: up to the last counted event, never beyond it
    # (an --as-of in the future, or a stray late event, cannot complete a business cycle)
    end = quality.last_event_at
    start = quality.first_exposure_at
    duration = (end - start).total_seconds() / 86400 if end and start else 0.0
    reasons_out: list[str] = []
    status: Literal["invalid", "too_early", "winner", "no_winner"]
    winner: str | None = None
    for v in verdicts:
        if v.verdict == "safety_regression":
            guard = next(g for g in guardrails if g.arm_id == v.arm_id)
            reasons_out.append(f"arm {v.arm_id}: safety regression ({'; '.join(guard.reasons)})")
    if quality.conflicting_events:
        status = "invalid"
        reasons_out.insert(
            0,
            f"{quality.conflicting_events} event id(s) arrived with different contents: which "
            "copy is true cannot be known, so no decision is made (fix the product's logging)",
        )
    elif srm.mismatch:
        status = "invalid"
        reasons_out.insert(
            0,
            f"sample-ratio mismatch: users per arm {srm.observed} against planned weights "
            f"(chi-square p {srm.p_value:.3g} < {plan.srm_alpha})",
        )
    else:
        short = [
            f"{k}: {figures[k].units} of {figures[k].planned_units} planned users"
            for k in figures
            if figures[k].units < figures[k].planned_units
        ]
        early = duration < plan.business_cycle_days
        if early or short:
            status = "too_early"
            if early:
                reasons_out.insert(
                    0, f"{duration:.1f} of {plan.business_cycle_days:g} days (one business cycle)"
                )
            if short:
                reasons_out.insert(0, "planned sample not reached: " + "; ".join(short))
        else:
            candidates = [v for v in verdicts if v.verdict == "better"]
            if candidates:

                def rank(v: ArmVerdict) -> tuple[int, float]:
                    re = figures[v.arm_id].re_request_rate
                    return -len(v.better), re if re is not None else 1.0

                winner = min(candidates, key=rank).arm_id
                status = "winner"
            else:
                status = "no_winner"
                reasons_out.append("no arm is significantly better (Holm) without being worse")
    return ABReport(
        experiment_id=plan.experiment_id,
        control_arm=plan.control_arm,
        status=status,
        winner=winner,
        reasons=reasons_out,
        duration_days=round(duration, 3),
        as_of=end,
        arms=[figures[a.arm_id] for a in plan.arms],
        comparisons=comparisons,
        guardrails=guardrails,
        verdicts=verdicts,
        sample_ratio=srm,
        data=quality,
        plan=plan.model_dump(mode="json"),
    )
