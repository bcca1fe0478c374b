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

Modules: ``ab_aggregate`` (events to per-arm figures), ``ab_stats`` (the tests, Holm, the
planned sample, the sample-ratio check); this module parses events and makes the report.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from processors.calibration.ab_aggregate import ArmFigures, DataQuality, aggregate
from processors.calibration.ab_stats import (
    Comparison,
    Metric,
    SampleRatio,
    compare_means,
    compare_rates,
    holm,
    planned_units,
    sample_ratio,
)
from schemas.calibration import ABEvent, ArmPlan, ExperimentPlan

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


def _arm_tests(
    arm: ArmPlan,
    figures: dict[str, ArmFigures],
    satisfaction: dict[str, list[float]],
    plan: ExperimentPlan,
) -> tuple[list[Comparison], Guardrail]:
    """One treatment arm's comparisons against control (before Holm) and its guardrail."""
    control = figures[plan.control_arm]
    raw: list[Comparison] = []
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
    guardrail = Guardrail(
        arm.arm_id, gd, glo, ghi, gp, list(arm.failed_checks), bool(reasons), reasons
    )
    return raw, guardrail


def _verdict(arm_id: str, mine: list[Comparison], guard: Guardrail) -> ArmVerdict:
    """A treatment arm's verdict from its Holm-corrected comparisons and its guardrail."""
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
    return ArmVerdict(arm_id, verdict, better, worse)


def _decide(
    figures: dict[str, ArmFigures],
    guardrails: list[Guardrail],
    verdicts: list[ArmVerdict],
    quality: DataQuality,
    srm: SampleRatio,
    duration: float,
    plan: ExperimentPlan,
) -> tuple[Literal["invalid", "too_early", "winner", "no_winner"], str | None, list[str]]:
    """The decision (module docstring, "Decision"): ``(status, winner, reasons)``."""
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
    return status, winner, reasons_out


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
    treatments = [a for a in plan.arms if a.arm_id != plan.control_arm]
    raw: list[Comparison] = []
    guardrails: list[Guardrail] = []
    for arm in treatments:
        arm_comparisons, guardrail = _arm_tests(arm, figures, satisfaction, plan)
        raw.extend(arm_comparisons)
        guardrails.append(guardrail)
    comparisons = holm(raw, plan.alpha)
    verdicts: list[ArmVerdict] = []
    for arm, guard in zip(treatments, guardrails, strict=True):
        mine = [c for c in comparisons if c.arm_id == arm.arm_id]
        verdicts.append(_verdict(arm.arm_id, mine, guard))

    srm = sample_ratio(figures, plan)
    # the duration is what the data cover: up to the last counted event, never beyond it
    # (an --as-of in the future, or a stray late event, cannot complete a business cycle)
    end = quality.last_event_at
    start = quality.first_exposure_at
    duration = (end - start).total_seconds() / 86400 if end and start else 0.0
    status, winner, reasons_out = _decide(
        figures, guardrails, verdicts, quality, srm, duration, plan
    )
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
