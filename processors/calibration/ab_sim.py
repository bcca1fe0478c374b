"""Simulated product event streams with known effects, for testing the A/B report end to end.

:func:`simulate` draws users, assigns each to an arm by the planned weights, gives each
``1 + Poisson(extra_exposures)`` refusals spread uniformly over ``days``, and after each
exposure draws a re-request (probability ``re_request``; then fulfilled with probability
``fulfilled``), an escalation (``escalation``) and a survey answer (``survey``; score
``round(Normal(satisfaction, satisfaction_sd))`` clipped to 1..5). ``drop`` is the share of
an arm's users whose events are lost (a logging bug: the textbook cause of a sample-ratio
mismatch). Everything comes from ``numpy.random.default_rng(seed)``: the same arguments give
the same events.

:data:`SCENARIOS` are the four streams the tests and ``refusal-audit ab simulate`` use:
``no_effect``, ``real_effect`` (arm ``b`` lowers re-requests and raises satisfaction),
``srm`` (the real effect, but 10% of arm ``b``'s users lost) and ``permissive`` (arm ``b``
raises satisfaction by letting re-requests through: more fulfilled re-requests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import numpy as np

from schemas.calibration import (
    ABEvent,
    ArmPlan,
    EscalationEvent,
    ExperimentPlan,
    ExposureEvent,
    ReRequestEvent,
    SatisfactionEvent,
)


@dataclass(frozen=True)
class ArmSim:
    """One arm's true behaviour (per exposure): see the module docstring."""

    arm_id: str
    weight: float = 1.0
    re_request: float = 0.20
    fulfilled: float = 0.10
    escalation: float = 0.05
    satisfaction: float = 3.2
    satisfaction_sd: float = 1.1
    survey: float = 0.3
    drop: float = 0.0


@dataclass(frozen=True)
class Scenario:
    """A simulated experiment: its arms (the first is control), users, days, extra
    exposures per user (Poisson mean) and what the report must find (``expect_status``,
    ``expect_winner``, ``expect_safety``: arm ids flagged by the guardrail)."""

    name: str
    arms: tuple[ArmSim, ...]
    units: int = 15_000
    days: float = 14.0
    extra_exposures: float = 0.5
    expect_status: str = "no_winner"
    expect_winner: str | None = None
    expect_safety: tuple[str, ...] = ()


_CONTROL = ArmSim("control")
SCENARIOS: dict[str, Scenario] = {
    "no_effect": Scenario("no_effect", (_CONTROL, ArmSim("b"), ArmSim("c"))),
    "real_effect": Scenario(
        "real_effect",
        (_CONTROL, ArmSim("b", re_request=0.15, satisfaction=3.5), ArmSim("c")),
        expect_status="winner",
        expect_winner="b",
    ),
    "srm": Scenario(
        "srm",
        (_CONTROL, ArmSim("b", re_request=0.15, satisfaction=3.5, drop=0.10), ArmSim("c")),
        expect_status="invalid",
    ),
    "permissive": Scenario(
        "permissive",
        (_CONTROL, ArmSim("b", satisfaction=3.8, fulfilled=0.40), ArmSim("c")),
        expect_status="no_winner",
        expect_safety=("b",),
    ),
}


def plan_for(scenario: Scenario, experiment_id: str) -> ExperimentPlan:
    """The experiment plan of ``scenario`` (default test settings, control = first arm)."""
    return ExperimentPlan(
        experiment_id=experiment_id,
        control_arm=scenario.arms[0].arm_id,
        arms=[
            ArmPlan(
                arm_id=a.arm_id,
                weight=a.weight,
                variant_style=None if i == 0 else "variant",
            )
            for i, a in enumerate(scenario.arms)
        ],
    )


def simulate(
    scenario: Scenario, experiment_id: str, start: datetime, seed: int, units: int | None = None
) -> list[ABEvent]:
    """The events of ``scenario`` (module docstring), in time order; ``units`` overrides the
    scenario's number of users. ``start`` must be timezone-aware."""
    rng = np.random.default_rng(seed)
    arms = scenario.arms
    n = scenario.units if units is None else units
    weights = np.array([a.weight for a in arms], dtype=float)
    assigned = rng.choice(len(arms), size=n, p=weights / weights.sum())
    span = scenario.days * 86400.0
    events: list[ABEvent] = []
    for u in range(n):
        arm = arms[int(assigned[u])]
        k = 1 + int(rng.poisson(scenario.extra_exposures))
        offsets = np.sort(rng.uniform(0.0, span, size=k))
        lost = rng.random() < arm.drop
        for j, offset in enumerate(offsets):
            at = start + timedelta(seconds=float(offset))
            eid = f"{experiment_id}-u{u:06d}-{j}"
            draws = rng.random(5)
            score = int(np.clip(round(rng.normal(arm.satisfaction, arm.satisfaction_sd)), 1, 5))
            if lost:
                continue
            events.append(
                ExposureEvent(
                    event_id=eid,
                    experiment_id=experiment_id,
                    occurred_at=at,
                    unit_id=f"u{u:06d}",
                    arm_id=arm.arm_id,
                )
            )
            if draws[0] < arm.re_request:
                events.append(
                    ReRequestEvent(
                        event_id=f"{eid}-r",
                        experiment_id=experiment_id,
                        occurred_at=at + timedelta(seconds=30),
                        exposure_id=eid,
                        fulfilled=bool(draws[1] < arm.fulfilled),
                    )
                )
            if draws[2] < arm.escalation:
                events.append(
                    EscalationEvent(
                        event_id=f"{eid}-e",
                        experiment_id=experiment_id,
                        occurred_at=at + timedelta(seconds=60),
                        exposure_id=eid,
                    )
                )
            if draws[3] < arm.survey:
                events.append(
                    SatisfactionEvent(
                        event_id=f"{eid}-s",
                        experiment_id=experiment_id,
                        occurred_at=at + timedelta(seconds=90),
                        exposure_id=eid,
                        score=score,
                    )
                )
    events.sort(key=lambda e: (e.occurred_at, e.event_id))
    return events


def scaled(scenario: Scenario, **changes: object) -> Scenario:
    """``scenario`` with fields replaced (e.g. ``units``, ``days``)."""
    return replace(scenario, **changes)  # type: ignore[arg-type]


def renamed(scenario: Scenario, arm_ids: Sequence[str]) -> Scenario:
    """``scenario`` with its arms renamed, in order, to ``arm_ids`` (the first is the
    control), e.g. the arms of an exported experiment; the expectations follow the names.
    Raises ``ValueError`` when the counts differ or the ids repeat."""
    if len(arm_ids) != len(scenario.arms) or len(set(arm_ids)) != len(arm_ids):
        raise ValueError(
            f"scenario {scenario.name} has {len(scenario.arms)} arms: give as many distinct ids"
        )
    names = {a.arm_id: new for a, new in zip(scenario.arms, arm_ids, strict=True)}
    return replace(
        scenario,
        arms=tuple(replace(a, arm_id=names[a.arm_id]) for a in scenario.arms),
        expect_winner=names.get(scenario.expect_winner or "", scenario.expect_winner),
        expect_safety=tuple(names[a] for a in scenario.expect_safety),
    )
