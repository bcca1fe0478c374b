"""Approved refusal variants as treatment arms: an OpenFeature flagd flag and an arm list.

``build_experiment`` turns the approved variants of one policy clause into:

- a flagd flag definition (the vendor-neutral OpenFeature flag format,
  https://flagd.dev/reference/flag-definitions/; schema ``https://flagd.dev/schema/v0/flags.json``):
  one string flag whose variants are the arms (``control``: the current refusal; one arm per
  approved variant, its text as the value), ``defaultVariant`` ``control`` and a
  ``fractional`` targeting rule splitting users by flagd's default bucketing key (flag key +
  ``targetingKey``) in the planned weights; the flag's ``metadata`` names the experiment,
  bundle and clause;
- the arm list (``arm_id``, ``kind``, ``style``, ``label``, ``text``, ``calibration_run_id``,
  ``approved_by``, ``approved_at``) for people and for the product's exposure events, whose
  ``arm_id`` is the flag's variant key;
- the ``ExperimentPlan`` that ``ab report`` reads (the arms, equal weights, the control arm).

Only variants that passed every regression check reach here (the caller selects approved
ones; :class:`ExportError` is raised for anything else, so a bug upstream cannot export a
failing variant).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from schemas.calibration import ArmPlan, CalibrationRun, ExperimentPlan

FLAGD_SCHEMA = "https://flagd.dev/schema/v0/flags.json"
CONTROL_ARM = "control"
WEIGHT_SCALE = 100
"""flagd weights are integers: a plan weight of 1.0 becomes 100."""


class ExportError(ValueError):
    """Nothing (or something not allowed) to export; the message says what."""


@dataclass(frozen=True)
class ApprovedVariant:
    """One variant whose current decision is ``approve``: its run, style, approver and time."""

    run: CalibrationRun
    style: str
    approved_by: str
    approved_at: datetime


@dataclass(frozen=True)
class Experiment:
    """What ``build_experiment`` makes: the flagd document, the arm list and the plan."""

    flag_key: str
    flagd: dict[str, Any]
    arms: list[dict[str, Any]]
    plan: ExperimentPlan


def flag_key(policy_bundle: str, clause_id: str) -> str:
    """The flag key of a clause's refusal style: ``refusal-style.<bundle>.<clause>``, with
    anything but letters, digits, ``.``, ``_`` and ``-`` replaced by ``-``."""
    raw = f"refusal-style.{policy_bundle}.{clause_id}"
    return re.sub(r"[^A-Za-z0-9._-]", "-", raw)


def control_text(runs: Sequence[CalibrationRun]) -> str:
    """The current refusal: the most frequent ``refusal`` of ``runs`` (ties: the newest run's).
    Raises :class:`ExportError` for no runs."""
    if not runs:
        raise ExportError("no run to take the current refusal from")
    counts = Counter(r.refusal for r in runs)
    newest = max(runs, key=lambda r: (r.created_at, r.calibration_run_id))
    best = max(counts.values())
    return newest.refusal if counts[newest.refusal] == best else counts.most_common(1)[0][0]


def _arm_ids(approved: Sequence[ApprovedVariant]) -> list[str]:
    styles = Counter(a.style for a in approved)
    return [
        a.style if styles[a.style] == 1 else f"{a.style}-{a.run.calibration_run_id[-8:]}"
        for a in approved
    ]


def build_experiment(
    experiment_id: str,
    policy_bundle: str,
    clause_id: str,
    approved: Sequence[ApprovedVariant],
    control: str | None = None,
) -> Experiment:
    """The experiment of ``approved`` (ordered by run time, then spectrum order), with
    ``control`` as the control arm's text (None: :func:`control_text` of their runs).

    Raises :class:`ExportError` when there is no approved variant, a variant is of another
    bundle or clause, is missing from its run, failed any regression check, or its run was
    escalated.
    """
    if not approved:
        raise ExportError(f"no approved variant of clause {clause_id!r} in {policy_bundle!r}")
    for a in approved:
        run = a.run
        if (run.policy_bundle, run.clause_id) != (policy_bundle, clause_id):
            raise ExportError(
                f"{run.calibration_run_id}/{a.style} belongs to {run.policy_bundle} "
                f"{run.clause_id}, not {policy_bundle} {clause_id}"
            )
        if run.status == "escalated":
            raise ExportError(f"{run.calibration_run_id} was escalated: nothing of it is exported")
        check = next((v for v in run.validations if v.style == a.style), None)
        if check is None or run.output is None:
            raise ExportError(f"{run.calibration_run_id} has no variant of style {a.style!r}")
        if not check.passed:
            raise ExportError(
                f"{run.calibration_run_id}/{a.style} failed its checks "
                f"({', '.join(check.reasons)}) and cannot be exported"
            )
    ordered = sorted(
        approved,
        key=lambda a: (a.run.created_at, a.run.calibration_run_id,
                       a.run.spectrum.ids().index(a.style)),
    )  # fmt: skip
    ids = _arm_ids(ordered)
    text = control if control is not None else control_text([a.run for a in ordered])
    arms: list[dict[str, Any]] = [
        {"arm_id": CONTROL_ARM, "kind": "control", "style": None, "label": "Current refusal",
         "text": text, "calibration_run_id": None, "approved_by": None, "approved_at": None}
    ]  # fmt: skip
    for arm_id, a in zip(ids, ordered, strict=True):
        assert a.run.output is not None
        variant = next(v for v in a.run.output.variants if v.style == a.style)
        style = a.run.spectrum.get(a.style)
        arms.append({
            "arm_id": arm_id, "kind": "treatment", "style": a.style,
            "label": style.label if style else a.style, "text": variant.response_text,
            "calibration_run_id": a.run.calibration_run_id, "approved_by": a.approved_by,
            "approved_at": a.approved_at.isoformat(),
        })  # fmt: skip
    key = flag_key(policy_bundle, clause_id)
    flag = {
        "state": "ENABLED",
        "variants": {arm["arm_id"]: arm["text"] for arm in arms},
        "defaultVariant": CONTROL_ARM,
        "targeting": {"fractional": [[arm["arm_id"], WEIGHT_SCALE] for arm in arms]},
        "metadata": {
            "experiment_id": experiment_id,
            "policy_bundle": policy_bundle,
            "clause_id": clause_id,
            "source": "refusal-audit calibrate export",
        },
    }
    plan = ExperimentPlan(
        experiment_id=experiment_id,
        control_arm=CONTROL_ARM,
        clause_id=clause_id,
        arms=[
            ArmPlan(arm_id=arm["arm_id"], weight=1.0, variant_style=arm["style"],
                    calibration_run_id=arm["calibration_run_id"])
            for arm in arms
        ],
    )  # fmt: skip
    return Experiment(key, {"$schema": FLAGD_SCHEMA, "flags": {key: flag}}, arms, plan)
