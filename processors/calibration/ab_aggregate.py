"""The A/B analysis' aggregation: product events to per-arm figures, per user.

``aggregate`` counts each randomised user once (``processors.calibration.ab``'s docstring,
"Unit of analysis"): repeated event ids once, users seen in several arms excluded,
follow-ups of an unknown exposure counted apart (``DataQuality``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from schemas.calibration import (
    ABEvent,
    EscalationEvent,
    ExperimentPlan,
    ExposureEvent,
    ReRequestEvent,
    SatisfactionEvent,
)

__all__ = ["ArmFigures", "DataQuality", "aggregate"]


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


def _arm_figures(arm_id: str, members: list[_Unit]) -> tuple[ArmFigures, list[float]]:
    """One arm's figures from its users, and their per-user satisfaction means."""
    k = len(members)
    scores = [sum(u.scores) / len(u.scores) for u in members if u.scores]

    def rate(count: int, k: int = k) -> float | None:
        return count / k if k else None

    re_n = sum(u.re_request for u in members)
    circ_n = sum(u.fulfilled for u in members)
    esc_n = sum(u.escalated for u in members)
    figures = ArmFigures(
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
    return figures, scores


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
        figures[arm_id], satisfaction[arm_id] = _arm_figures(arm_id, members)
    quality = DataQuality(
        n, duplicates, len(conflicting), after, orphans, unknown_arm, leaked, first, last
    )
    return figures, quality, satisfaction
