"""Refusal-style calibration in ClickHouse (migration 0017; docs/calibration.md).

- ``calibration_runs`` / ``calibration_variants``: every run and each of its variants with
  the regression result (:func:`insert_runs`, :func:`get_run`, :func:`list_runs`,
  :func:`approval_items`);
- ``calibration_decisions``: the approvers' decisions, a log (:func:`insert_decision`,
  :func:`decision_rows`);
- ``calibration_experiments``: exported experiments and their plans (:func:`save_experiment`,
  :func:`experiment_plan`);
- ``ab_event_log``: the product's A/B events (:func:`insert_ab_events`, :func:`ab_events`);
- :func:`refusals_to_calibrate`: refusals of the audit, by log id, category or cited clause.

Every table is a ``ReplacingMergeTree`` on its natural id, read with ``FINAL``: a run, a
decision or an event stored twice counts once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from processors.calibration.ab import EventError, parse_event
from schemas.calibration import (
    ABEvent,
    CalibrationRun,
    ExperimentPlan,
    ExposureEvent,
    ReRequestEvent,
    SatisfactionEvent,
)
from warehouse.store import Warehouse, to_utc

RUN_COLUMNS = (
    "calibration_run_id", "created_at", "started_by", "log_id", "request_sha256",
    "policy_bundle", "bundle_version", "clause_id", "clause_title", "spectrum_source", "styles",
    "engine", "engine_model", "engine_version", "prompt_version", "status", "passing_styles",
    "escalation_reason", "attempts", "input_tokens", "output_tokens", "source", "run",
    "recorded_at",
)  # fmt: skip
VARIANT_COLUMNS = (
    "calibration_run_id", "style", "base_style", "label", "created_at", "started_by",
    "policy_bundle", "clause_id", "response_text", "ux_impact_note", "passed", "reasons",
    "findings", "refusal_score", "suite_verdict", "recorded_at",
)  # fmt: skip
DECISION_COLUMNS = (
    "decision_id", "calibration_run_id", "style", "policy_bundle", "clause_id", "approver",
    "decision", "note", "decided_at",
)  # fmt: skip
EXPERIMENT_COLUMNS = (
    "experiment_id", "policy_bundle", "clause_id", "plan", "flagd", "arms", "exported_by",
    "exported_at",
)  # fmt: skip
AB_COLUMNS = (
    "event_id", "experiment_id", "event_sha256", "type", "occurred_at", "unit_id", "arm_id",
    "log_id", "exposure_id", "fulfilled", "score", "event", "source", "recorded_at",
)  # fmt: skip


def _run_row(run: CalibrationRun, source: str, recorded_at: datetime) -> list[Any]:
    return [
        run.calibration_run_id, to_utc(run.created_at), run.started_by or "", run.log_id or "",
        run.request_sha256 or "", run.policy_bundle, run.bundle_version, run.clause_id,
        run.clause_title, run.spectrum.source, run.spectrum.ids(), run.engine, run.engine_model,
        run.engine_version, run.prompt_version, run.status, run.passing_styles(),
        run.escalation.reason if run.escalation else "", min(run.attempts, 255),
        run.usage.prompt_tokens, run.usage.completion_tokens, source, run.model_dump_json(),
        to_utc(recorded_at),
    ]  # fmt: skip


def _variant_rows(run: CalibrationRun, recorded_at: datetime) -> list[list[Any]]:
    if run.output is None:
        return []
    rows = []
    for variant, check in zip(run.output.variants, run.validations, strict=True):
        style = run.spectrum.get(variant.style)
        suite = check.suite.verdict if check.suite is not None else ""
        rows.append([
            run.calibration_run_id, variant.style, style.base if style else "",
            style.label if style else variant.style, to_utc(run.created_at),
            run.started_by or "", run.policy_bundle, run.clause_id, variant.response_text,
            variant.ux_impact_note, check.passed, list(check.reasons),
            orjson.dumps([f.model_dump() for f in check.findings]).decode(),
            check.refusal_score, suite, to_utc(recorded_at),
        ])  # fmt: skip
    return rows


def insert_runs(
    store: Warehouse, runs: Sequence[CalibrationRun], source: str, recorded_at: datetime
) -> None:
    """Store runs and their variants (``source``: where the request came from, e.g.
    ``file:requests.jsonl``, ``warehouse``, ``kafka:<topic> partition P offset O``).
    The variants go in first, so a run row never exists without its variants. Raises
    ``WarehouseError``."""
    if not runs:
        return
    variants = [row for run in runs for row in _variant_rows(run, recorded_at)]
    if variants:
        store.insert_rows("calibration_variants", VARIANT_COLUMNS, variants)
    store.insert_rows(
        "calibration_runs", RUN_COLUMNS, [_run_row(r, source, recorded_at) for r in runs]
    )


def stored_run_ids(store: Warehouse, ids: Sequence[str]) -> set[str]:
    """Which of the run ids ``ids`` are stored. Raises ``WarehouseError``."""
    if not ids:
        return set()
    rows = store.select(
        "SELECT DISTINCT calibration_run_id AS id FROM {db:Identifier}.calibration_runs "
        "WHERE calibration_run_id IN {ids:Array(String)}",
        {"ids": list(ids)},
    )
    return {r["id"] for r in rows}


def get_run(store: Warehouse, calibration_run_id: str) -> CalibrationRun | None:
    """The stored run, or None. Raises ``WarehouseError``."""
    rows = store.select(
        "SELECT run FROM {db:Identifier}.calibration_runs FINAL "
        "WHERE calibration_run_id = {id:String}",
        {"id": calibration_run_id},
    )
    return CalibrationRun.model_validate_json(rows[0]["run"]) if rows else None


def list_runs(
    store: Warehouse,
    *,
    clause_id: str | None = None,
    policy_bundle: str | None = None,
    status: str | None = None,
    limit: int = 200,
) -> list[dict[str, Any]]:
    """Stored runs, newest first, without the ``run`` JSON (filters optional). Raises
    ``WarehouseError``."""
    where, params = _filters(clause_id=clause_id, policy_bundle=policy_bundle, status=status)
    cols = ", ".join(c for c in RUN_COLUMNS if c != "run")
    return store.select(
        f"SELECT {cols} FROM {{db:Identifier}}.calibration_runs FINAL {where} "
        "ORDER BY created_at DESC, calibration_run_id LIMIT {limit:UInt32}",
        {**params, "limit": limit},
    )


def _filters(**values: str | None) -> tuple[str, dict[str, Any]]:
    parts = [f"{k} = {{{k}:String}}" for k, v in values.items() if v is not None]
    params = {k: v for k, v in values.items() if v is not None}
    return ("WHERE " + " AND ".join(parts)) if parts else "", params


def variants_of(store: Warehouse, calibration_run_id: str) -> list[dict[str, Any]]:
    """The variant rows of one run, in spectrum order. Raises ``WarehouseError``."""
    rows = store.select(
        "SELECT v.*, r.styles AS styles FROM {db:Identifier}.calibration_variants AS v FINAL "
        "INNER JOIN (SELECT calibration_run_id, styles FROM {db:Identifier}.calibration_runs "
        "FINAL WHERE calibration_run_id = {id:String}) AS r USING (calibration_run_id) "
        "WHERE v.calibration_run_id = {id:String}",
        {"id": calibration_run_id},
    )
    for row in rows:
        row["findings"] = orjson.loads(row["findings"]) if row["findings"] else []
    return sorted(rows, key=lambda r: _rank(r["styles"], r["style"]))


def _rank(styles: Sequence[str], style: str) -> int:
    return styles.index(style) if style in styles else len(styles)


def approval_items(
    store: Warehouse, *, clause_id: str | None = None, limit: int = 500
) -> list[dict[str, Any]]:
    """The approval queue: every variant that passed its checks, of a stored run that was not
    escalated (variants whose run row is missing, e.g. after a failed insert, are left out),
    the pending ones first (so ``limit`` leaves out decided variants before pending ones),
    then oldest run first, with its current decision (``decision``, ``approver``,
    ``decided_at``: None while pending; ``decisions``: how many were taken). Raises
    ``WarehouseError``."""
    where = (
        "WHERE v.passed AND v.calibration_run_id IN (SELECT calibration_run_id FROM "
        "{db:Identifier}.calibration_runs FINAL WHERE status != 'escalated')"
        + (" AND v.clause_id = {clause:String}" if clause_id else "")
    )
    rows = store.select(
        "SELECT v.calibration_run_id AS calibration_run_id, v.style AS style, "
        "v.label AS label, v.base_style AS base_style, v.created_at AS created_at, "
        "v.started_by AS started_by, v.policy_bundle AS policy_bundle, "
        "v.clause_id AS clause_id, v.response_text AS response_text, "
        "v.ux_impact_note AS ux_impact_note, d.last_decision AS decision, "
        "d.last_approver AS approver, d.last_decided_at AS decided_at, d.n AS decisions "
        "FROM {db:Identifier}.calibration_variants AS v FINAL LEFT JOIN ("
        "  SELECT calibration_run_id, style, "
        "  argMax(decision, (decided_at, decision_id)) AS last_decision, "
        "  argMax(approver, (decided_at, decision_id)) AS last_approver, "
        "  max(decided_at) AS last_decided_at, count() AS n "
        "  FROM {db:Identifier}.calibration_decisions FINAL "
        "  GROUP BY calibration_run_id, style"
        ") AS d ON d.calibration_run_id = v.calibration_run_id AND d.style = v.style "
        f"{where} ORDER BY d.n > 0, v.created_at, v.calibration_run_id, v.style "
        "LIMIT {limit:UInt32}",
        {"clause": clause_id or "", "limit": limit},
    )
    for row in rows:  # an outer join fills a missing decision with defaults
        if not row["decisions"]:
            row.update(decision=None, approver=None, decided_at=None)
    return rows


def decision_id(run_id: str, style: str, approver: str, decision: str, note: str,
                nonce: str) -> str:  # fmt: skip
    """Deterministic id of a decision: the same form submitted twice (same ``nonce``, the
    form's token) is one row; a later decision (a new nonce) is a new row."""
    payload = orjson.dumps([run_id, style, approver, decision, note, nonce])
    return hashlib.sha256(payload).hexdigest()


def insert_decision(store: Warehouse, row: Mapping[str, Any]) -> None:
    """Store one decision (a ``DECISION_COLUMNS`` mapping, checked by the caller with
    ``processors.calibration.approval.check_decision``). Raises ``WarehouseError``."""
    values = [to_utc(row[c]) if c == "decided_at" else row[c] for c in DECISION_COLUMNS]
    store.insert_rows("calibration_decisions", DECISION_COLUMNS, [values])


def decision_rows(
    store: Warehouse,
    *,
    calibration_run_id: str | None = None,
    clause_id: str | None = None,
    policy_bundle: str | None = None,
) -> list[dict[str, Any]]:
    """Every stored decision (the log), oldest first, optionally of one run, clause or
    bundle. Raises ``WarehouseError``."""
    where, params = _filters(
        calibration_run_id=calibration_run_id, clause_id=clause_id, policy_bundle=policy_bundle
    )
    return store.select(
        f"SELECT * FROM {{db:Identifier}}.calibration_decisions FINAL {where} "
        "ORDER BY decided_at, decision_id",
        params,
    )


def runs_by_id(store: Warehouse, ids: Sequence[str]) -> dict[str, CalibrationRun]:
    """The stored runs with these ids (missing ids are left out). Raises
    ``WarehouseError``."""
    if not ids:
        return {}
    rows = store.select(
        "SELECT run FROM {db:Identifier}.calibration_runs FINAL "
        "WHERE calibration_run_id IN {ids:Array(String)}",
        {"ids": list(ids)},
    )
    runs = [CalibrationRun.model_validate_json(r["run"]) for r in rows]
    return {r.calibration_run_id: r for r in runs}


# -- experiments -------------------------------------------------------------------------------
def save_experiment(
    store: Warehouse,
    plan: ExperimentPlan,
    policy_bundle: str,
    flagd: Mapping[str, Any],
    arms: Sequence[Mapping[str, Any]],
    exported_by: str,
    exported_at: datetime,
) -> None:
    """Record an exported experiment (its plan is what ``ab report EXPERIMENT`` reads).
    Raises ``WarehouseError``."""
    store.insert_rows(
        "calibration_experiments",
        EXPERIMENT_COLUMNS,
        [[
            plan.experiment_id, policy_bundle, plan.clause_id or "", plan.model_dump_json(),
            orjson.dumps(flagd).decode(), orjson.dumps(list(arms)).decode(), exported_by,
            to_utc(exported_at),
        ]],
    )  # fmt: skip


def experiment_plan(store: Warehouse, experiment_id: str) -> ExperimentPlan | None:
    """The newest exported plan of ``experiment_id``, or None. Raises ``WarehouseError``."""
    rows = store.select(
        "SELECT plan FROM {db:Identifier}.calibration_experiments FINAL "
        "WHERE experiment_id = {id:String}",
        {"id": experiment_id},
    )
    return ExperimentPlan.model_validate_json(rows[0]["plan"]) if rows else None


# -- A/B events --------------------------------------------------------------------------------
def _ab_row(event: ABEvent, source: str, recorded_at: datetime) -> list[Any]:
    unit = event.unit_id if isinstance(event, ExposureEvent) else ""
    arm = event.arm_id if isinstance(event, ExposureEvent) else ""
    log_id = (event.log_id or "") if isinstance(event, ExposureEvent) else ""
    exposure = "" if isinstance(event, ExposureEvent) else event.exposure_id
    fulfilled = event.fulfilled if isinstance(event, ReRequestEvent) else False
    score = event.score if isinstance(event, SatisfactionEvent) else 0
    text = event.model_dump_json()
    return [
        event.event_id, event.experiment_id, hashlib.sha256(text.encode()).hexdigest(),
        event.type, to_utc(event.occurred_at), unit, arm, log_id, exposure, fulfilled, score,
        text, source, to_utc(recorded_at),
    ]  # fmt: skip


def insert_ab_events(
    store: Warehouse,
    events: Sequence[tuple[ABEvent, str]],
    recorded_at: datetime,
) -> None:
    """Store product events, each with its source (``file:<path>:<line>``, ``kafka:<topic>
    partition P offset O``), all in one insert. Raises ``WarehouseError``."""
    if events:
        store.insert_rows(
            "ab_event_log", AB_COLUMNS, [_ab_row(e, src, recorded_at) for e, src in events]
        )


def ab_events(store: Warehouse, experiment_id: str) -> list[ABEvent]:
    """Every stored event of ``experiment_id``, in time order: one per distinct content of
    an event id (an identical resend counts once; copies with different contents are all
    returned, for the report to flag). Raises ``WarehouseError``; a stored row that no
    longer parses raises ``EventError``."""
    rows = store.select(
        "SELECT event FROM {db:Identifier}.ab_event_log FINAL "
        "WHERE experiment_id = {id:String} ORDER BY occurred_at, event_id, event_sha256",
        {"id": experiment_id},
    )
    out = []
    for r in rows:
        try:
            out.append(parse_event(r["event"].encode("utf-8")))
        except EventError as exc:  # pragma: no cover - rows are validated before insert
            raise EventError(f"stored event is invalid: {exc}") from exc
    return out


def experiments(store: Warehouse) -> list[dict[str, Any]]:
    """Exported experiments with their event counts, newest first. Raises
    ``WarehouseError``."""
    return store.select(
        "SELECT e.experiment_id AS experiment_id, e.policy_bundle AS policy_bundle, "
        "e.clause_id AS clause_id, e.exported_by AS exported_by, e.exported_at AS exported_at, "
        "ifNull(n.events, 0) AS events "
        "FROM {db:Identifier}.calibration_experiments AS e FINAL LEFT JOIN ("
        "  SELECT experiment_id, count() AS events FROM {db:Identifier}.ab_event_log FINAL "
        "  GROUP BY experiment_id) AS n USING (experiment_id) "
        "ORDER BY e.exported_at DESC"
    )


# -- refusals of the audit ---------------------------------------------------------------------
def refusals_to_calibrate(
    store: Warehouse,
    *,
    log_ids: Sequence[str] | None = None,
    category: str | None = None,
    clause_id: str | None = None,
    policy_bundle: str | None = None,
    limit: int = 20,
) -> list[dict[str, Any]]:
    """Current refusals with their audit: ``log_id``, ``request``, ``response`` (the refusal,
    redacted as stored), ``policy_bundle``, ``model``, ``product``, ``category``,
    ``policy_clause_cited`` (None when the audit cited none), newest event first, at most
    ``limit``. Filters combine with AND; ``log_ids`` empty means none. Raises
    ``WarehouseError``."""
    parts, params = [], {"limit": limit}
    if log_ids is not None:
        parts.append("a.log_id IN {ids:Array(String)}")
        params["ids"] = list(log_ids)  # type: ignore[assignment]
    for name, value in (("category", category), ("policy_clause_cited", clause_id),
                        ("policy_bundle", policy_bundle)):  # fmt: skip
        if value is not None:
            parts.append(f"a.{name} = {{{name}:String}}")
            params[name] = value  # type: ignore[assignment]
    where = ("WHERE " + " AND ".join(parts)) if parts else ""
    return store.select(
        "SELECT a.log_id AS log_id, e.request AS request, e.response AS response, "
        "a.policy_bundle AS policy_bundle, a.model AS model, a.product AS product, "
        "a.category AS category, a.policy_clause_cited AS policy_clause_cited, "
        "a.event_time AS event_time "
        "FROM {db:Identifier}.current_assessments AS a "
        "INNER JOIN (SELECT log_id, request, response FROM {db:Identifier}.refusal_events FINAL"
        ") AS e USING (log_id) "
        f"{where} ORDER BY a.event_time DESC, a.log_id LIMIT {{limit:UInt32}}",
        params,
    )
