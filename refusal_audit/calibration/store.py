"""Calibration with the warehouse: refusals in, runs logged, approved variants exported, A/B
events loaded (the application side of ``warehouse.calibration``; docs/calibration.md).

- :func:`requests_from_warehouse`: calibration requests from the audit's current refusals,
  by log id, category or cited clause;
- :func:`log_runs`: every run, with its variants and validation results, into ClickHouse;
- :func:`approved_variants` / :func:`export_experiment`: the approval gate's output as a
  flagd experiment (``processors.calibration.export``), recorded with its plan;
- :func:`load_events`: product A/B events from a file into ``ab_event_log``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from processors.calibration.approval import PAST_TENSE, current_decisions
from processors.calibration.export import ApprovedVariant, Experiment, ExportError, build_experiment
from schemas.calibration import ABEvent, CalibrationRequest, CalibrationRun
from schemas.policy import PolicyBundle
from warehouse import calibration as wc
from warehouse.store import Warehouse


@dataclass(frozen=True)
class Skipped:
    """A refusal of the warehouse that could not be calibrated: its log id and why."""

    log_id: str
    reason: str


def requests_from_warehouse(
    store: Warehouse,
    *,
    log_ids: Sequence[str] | None = None,
    category: str | None = None,
    clause_id: str | None = None,
    policy_bundle: str | None = None,
    limit: int = 20,
    requested_by: str | None = None,
) -> tuple[list[CalibrationRequest], list[Skipped]]:
    """Requests for the current refusals matching the filters (``warehouse.calibration.
    refusals_to_calibrate``): the stored (already redacted) request and refusal, the audit's
    cited clause as the triggered clause, or ``clause_id`` when the audit cited none.
    Refusals without a clause, and texts the contract refuses, are returned as
    :class:`Skipped` (never dropped silently; they do not count toward ``limit`` valid
    requests); unknown ``log_ids`` too. Raises ``WarehouseError``."""
    # read more than needed: refusals that cannot be calibrated must not use up the limit
    rows = wc.refusals_to_calibrate(
        store, log_ids=log_ids, category=category, clause_id=clause_id,
        policy_bundle=policy_bundle, limit=min(4 * limit + 10, 10_000),
    )  # fmt: skip
    requests: list[CalibrationRequest] = []
    skipped: list[Skipped] = []
    if log_ids is not None:
        found = {r["log_id"] for r in rows}
        skipped += [
            Skipped(i, "no current refusal with this log id") for i in log_ids if i not in found
        ]
    for row in rows:
        if len(requests) >= limit:
            break
        clause = row["policy_clause_cited"] or clause_id
        if not clause:
            skipped.append(Skipped(row["log_id"], "the audit cited no clause: give --clause"))
            continue
        try:
            requests.append(
                CalibrationRequest(
                    log_id=row["log_id"], request=row["request"] or None,
                    refusal=row["response"], clause_id=clause,
                    policy_bundle=row["policy_bundle"], model=row["model"] or None,
                    product=row["product"] or None, requested_by=requested_by,
                )
            )  # fmt: skip
        except ValidationError as exc:
            fields = ", ".join(sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]}))
            skipped.append(Skipped(row["log_id"], f"not a valid calibration request: {fields}"))
    return requests, skipped


def log_runs(store: Warehouse, runs: Sequence[CalibrationRun], source: str) -> None:
    """Store ``runs`` (and their variants and validations) with their ``source``. Raises
    ``WarehouseError``."""
    wc.insert_runs(store, runs, source, datetime.now(UTC))


def approved_variants(
    store: Warehouse,
    policy_bundle: str,
    clause_id: str,
    chosen: Sequence[tuple[str, str]] | None = None,
) -> list[ApprovedVariant]:
    """The variants of ``clause_id`` whose current decision is ``approve`` (only those in
    ``chosen``, (run id, style) pairs, when given). Raises ``ExportError`` when a chosen
    variant is not approved (pending, rejected or unknown), ``WarehouseError``."""
    decisions = current_decisions(
        wc.decision_rows(store, clause_id=clause_id, policy_bundle=policy_bundle)
    )
    approved = {k: d for k, d in decisions.items() if d.decision == "approve"}
    if chosen is not None:
        missing = [k for k in chosen if k not in approved]
        if missing:
            named = ", ".join(
                f"{run}:{style} ({PAST_TENSE[decisions[(run, style)].decision]})"
                if (run, style) in decisions else f"{run}:{style} (not approved)"
                for run, style in missing
            )  # fmt: skip
            raise ExportError(f"only approved variants can be exported: {named}")
        keys = list(dict.fromkeys(chosen))
    else:
        keys = sorted(approved)
    runs = wc.runs_by_id(store, sorted({run for run, _ in keys}))
    out = []
    for run_id, style in keys:
        if run_id not in runs:
            raise ExportError(f"run {run_id} is not stored")
        d = approved[(run_id, style)]
        out.append(ApprovedVariant(runs[run_id], style, d.approver, d.decided_at))
    return out


def export_experiment(
    store: Warehouse,
    experiment_id: str,
    bundle: PolicyBundle,
    clause_id: str,
    *,
    chosen: Sequence[tuple[str, str]] | None = None,
    control: str | None = None,
) -> Experiment:
    """Build the experiment of the approved variants of ``clause_id`` in ``bundle`` (record
    it with :func:`record_experiment` once its files are written). Raises ``ExportError``
    (the experiment id was used before, nothing approved, a chosen variant not approved, a
    control text that is not a clean refusal), ``WarehouseError``."""
    policy_bundle = bundle.name
    if wc.experiment_plan(store, experiment_id) is not None:
        raise ExportError(
            f"experiment {experiment_id!r} was exported before: give a new --experiment-id "
            "(its stored plan is what ab report reads)"
        )
    experiment = build_experiment(
        experiment_id, policy_bundle, clause_id,
        approved_variants(store, policy_bundle, clause_id, chosen), control,
    )  # fmt: skip
    problems = control_problems(experiment.arms[0]["text"], bundle, clause_id)
    if problems:
        raise ExportError(
            "the control arm's text (the current refusal) does not pass the check a control "
            f"must pass: {'; '.join(problems)}; give --control-text with the refusal your "
            "product shows today"
        )
    return experiment


def record_experiment(
    store: Warehouse, experiment: Experiment, policy_bundle: str, exported_by: str
) -> None:
    """Record an exported experiment (after its files were written): its plan is what
    ``ab report EXPERIMENT`` reads. Raises ``WarehouseError``."""
    wc.save_experiment(
        store, experiment.plan, policy_bundle, experiment.flagd, experiment.arms, exported_by,
        datetime.now(UTC),
    )  # fmt: skip


CONTROL_RULES = ("not_refusal", "steps", "quantities", "code", "recipe", "links")
"""The regression rules the control arm's text must pass: it must be a refusal and leak
nothing. The margin, harm vocabulary and style rules do not apply: the control is the
refusal users see today, not a candidate."""


def control_problems(text: str, bundle: PolicyBundle, clause_id: str) -> list[str]:
    """Why ``text`` cannot be an experiment's control arm (``CONTROL_RULES``; empty when it
    can)."""
    from processors.calibration.regression import CheckContext, check_variant
    from processors.engines.local import LocalEngine
    from schemas.calibration import DEFAULT_SPECTRUM, Variant

    clause = bundle.clause(clause_id)
    if clause is None:
        return [f"clause {clause_id!r} is not in bundle {bundle.name!r}"]
    style = DEFAULT_SPECTRUM.styles[0]
    variant = Variant(style=style.style, response_text=text[:2000] or "-", ux_impact_note="-")
    context = CheckContext(clause, bundle, None, text, LocalEngine())
    found = check_variant(variant, style, context).findings
    return [f"{f.code} ({f.detail})" for f in found if f.code in CONTROL_RULES]


def load_events(store: Warehouse, events: Sequence[tuple[ABEvent, str]]) -> int:
    """Store product events (each with its source), in inserts of at most 10,000 rows.
    Returns how many. Raises ``WarehouseError``."""
    now = datetime.now(UTC)
    for start in range(0, len(events), 10_000):
        wc.insert_ab_events(store, events[start : start + 10_000], now)
    return len(events)


def experiment_summary(store: Warehouse) -> list[dict[str, Any]]:
    """The recorded experiments with their event counts (``warehouse.calibration.
    experiments``). Raises ``WarehouseError``."""
    return wc.experiments(store)
