"""``refusal-audit calibrate run`` and ``refusal-audit ab simulate|report`` (``refusal_audit.cli``
registers them; docs/calibration.md).

Exit codes: ``calibrate run``: 0 every run passed, 1 some variant failed its checks or a
run was escalated (all are printed), 2 usage or configuration error. ``ab report``: 0 the
report was made, 1 some event lines were invalid (listed on stderr, left out), 2 usage
error (the invalid lines are listed first when there are some). ``ab simulate``: 0, or 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table

from refusal_audit.cli_common import (
    EXIT_FAILURES,
    as_utc,
    console,
    err,
    fail_usage,
    open_store,
    settings,
)
from refusal_audit.config import ConfigError, Settings

if TYPE_CHECKING:
    from refusal_audit.calibration.starter import VerifiedStarter
    from refusal_audit.calibration.store import Skipped
    from schemas.calibration import CalibrationRequest, CalibrationRun, Spectrum
    from warehouse.store import Warehouse

calibrate_app = typer.Typer(
    help="Refusal-style calibration: refusal variants per tone style, each safety-checked.",
    no_args_is_help=True,
)
ab_app = typer.Typer(
    help="A/B analysis of refusal-variant arms from the product's events.",
    no_args_is_help=True,
)


@calibrate_app.command("run")
def calibrate_run(
    file: Path | None = typer.Option(
        None, "--file", help="JSONL of calibration requests (schemas/json/calibration_request)."
    ),
    log_ids: list[str] | None = typer.Option(
        None, "--log-id", help="Calibrate this refusal of the warehouse (repeatable)."
    ),
    category: str | None = typer.Option(
        None, "--category", help="Calibrate the warehouse's refusals of this audit category."
    ),
    clause: str | None = typer.Option(
        None,
        "--clause",
        help="Calibrate the warehouse's refusals citing this clause (also the clause of "
        "refusals whose audit cited none).",
    ),
    bundle: str | None = typer.Option(None, "--bundle", help="Only refusals of this bundle."),
    limit: int = typer.Option(
        5, "--limit", min=1, max=1000, help="At most this many warehouse refusals, newest first."
    ),
    engine: str | None = typer.Option(
        None, "--engine", help="Variant engine local|openai (default: calibrate_engine)."
    ),
    spectrum_file: Path | None = typer.Option(
        None,
        "--spectrum",
        help="A spectrum for every request: JSON, or Markdown with a calibration-spectrum block.",
    ),
    started_by: str | None = typer.Option(
        None,
        "--started-by",
        help="The review-app account starting the runs (default: $USER), verified by its "
        "password (asked on a terminal, else the first line of stdin) or an API token; it "
        "may not approve them.",
    ),
    token_file: Path | None = typer.Option(
        None,
        "--token-file",
        help="A file holding an API token of the starting account (review token create); "
        "default: the calibration_token setting (REFUSAL_AUDIT_CALIBRATION_TOKEN), else "
        "the password.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the runs as a JSON array."),
) -> None:
    """Generate one refusal variant per style of the spectrum for each refusal (from FILE,
    or from the warehouse by --log-id, --category or --clause), run the safety regression
    check (and the team's suite) on every variant, log every run to the warehouse and print
    them; exit 1 when a variant failed or a run was escalated. The starter is a review-app
    account, verified first (password or API token): exit 2 when it cannot be."""
    from processors.calibration.base import CalibrationInputError
    from refusal_audit.calibration.runs import run_calibrations

    from_store = bool(log_ids) or category is not None or clause is not None
    if (file is not None) == from_store:
        raise fail_usage("give --file, or warehouse filters (--log-id, --category, --clause)")
    cfg = settings()
    store = open_store(cfg)
    starter = verified_starter(store, cfg, started_by, token_file)
    who = starter.name
    filters = _WarehouseFilters(log_ids, category, clause, bundle, limit)
    spectrum, requests, skipped, source = _calibration_requests(
        cfg, store, file, spectrum_file, filters, who
    )
    for s in skipped:
        err.print(f"[yellow]{escape(s.log_id)}:[/yellow] {escape(s.reason)} (not calibrated)")
    if not requests:
        raise fail_usage("no calibration request" + (f" in {file}" if file else " matched"))
    try:
        runs = run_calibrations(cfg, requests, engine, started_by=who, spectrum=spectrum,
                                starter_verified_by=starter.method)  # fmt: skip
    except (ConfigError, CalibrationInputError) as exc:
        raise fail_usage(f"calibrate: {exc}") from exc
    logged = _log_and_print(store, runs, source, as_json)
    if any(r.status != "passed" for r in runs) or skipped or not logged:
        raise typer.Exit(EXIT_FAILURES)


@dataclass(frozen=True)
class _WarehouseFilters:
    """``calibrate run``'s choice of the warehouse's refusals (``--log-id``, ``--category``,
    ``--clause``, ``--bundle``, ``--limit``)."""

    log_ids: list[str] | None
    category: str | None
    clause: str | None
    bundle: str | None
    limit: int


def _calibration_requests(
    cfg: Settings,
    store: Warehouse,
    file: Path | None,
    spectrum_file: Path | None,
    filters: _WarehouseFilters,
    who: str,
) -> tuple[Spectrum | None, list[CalibrationRequest], list[Skipped], str]:
    """``calibrate run``'s spectrum (``--spectrum``, else None), its requests, the warehouse
    refusals skipped (with their reason) and the runs' source (``file:<path>`` or
    ``warehouse``): from ``file`` (redacted as configured) when given, else from the
    warehouse by ``filters``, requested by ``who``. Raises ``typer.Exit`` (usage, exit 2)
    when a file cannot be read or the warehouse cannot be."""
    from refusal_audit.audit.engine_setup import configured_redactor
    from refusal_audit.calibration.runs import InputFileError, read_requests, read_spectrum
    from refusal_audit.calibration.store import requests_from_warehouse
    from warehouse.client import WarehouseError

    log_ids, category, clause = filters.log_ids, filters.category, filters.clause
    bundle, limit = filters.bundle, filters.limit
    skipped: list[Skipped] = []
    try:
        spectrum = read_spectrum(spectrum_file) if spectrum_file is not None else None
        if file is not None:
            if not file.is_file():
                raise fail_usage(f"input file not found (or not a file): {file}")
            redactor = configured_redactor(cfg)
            requests = read_requests(file, redactor)
            source = f"file:{file}"
        else:
            _check_filters(cfg, clause, category, bundle)
            requests, skipped = requests_from_warehouse(
                store, log_ids=log_ids or None, category=category, clause_id=clause,
                policy_bundle=bundle, limit=limit, requested_by=who,
            )  # fmt: skip
            source = "warehouse"
    except (OSError, InputFileError, ValueError) as exc:
        raise fail_usage(str(exc)) from exc
    except WarehouseError as exc:
        raise fail_usage(f"cannot read the warehouse: {exc}") from exc
    return spectrum, requests, skipped, source


def _log_and_print(
    store: Warehouse, runs: list[CalibrationRun], source: str, as_json: bool
) -> bool:
    """Log ``runs`` to the warehouse (from ``source``) and print them (a JSON array with
    ``as_json``, else one table each); False when they could not be logged (said on
    stderr; they are printed all the same)."""
    from refusal_audit.calibration.runs import dumps
    from refusal_audit.calibration.store import log_runs
    from warehouse.client import WarehouseError

    logged = True
    try:
        log_runs(store, runs, source)
    except WarehouseError as exc:  # the runs are printed below all the same
        logged = False
        err.print(f"[red]error:[/red] the runs could not be logged to the warehouse: {exc}")
    if as_json:
        console.file.write(dumps([r.model_dump(mode="json") for r in runs]) + "\n")
    else:
        for run in runs:
            print_run(run)
    return logged


def verified_starter(
    store: Warehouse, cfg: Settings, started_by: str | None, token_file: Path | None
) -> VerifiedStarter:
    """The ``VerifiedStarter`` of ``calibrate run``: the account of the API token
    (``token_file``, else the ``calibration_token`` setting; ``started_by``, when given, must
    name it), else ``started_by`` (default ``$USER``) verified by its password, asked on a
    terminal or read from the first line of stdin. Exits 2 when it cannot be verified."""
    import os
    import sys

    from refusal_audit.calibration.starter import (
        StarterError,
        read_token_file,
        starter_by_password,
        starter_by_token,
    )
    from warehouse.client import WarehouseError

    try:
        token = read_token_file(token_file) if token_file is not None else None
        if token is None and cfg.calibration_token is not None:
            token = cfg.calibration_token.get_secret_value()
        if token is not None:
            return starter_by_token(store, token, started_by)
        name = started_by or os.environ.get("USER") or ""
        if not name:
            raise fail_usage("name the starting review-app account: --started-by NAME")
        if sys.stdin.isatty():
            import getpass

            password = getpass.getpass(f"Password of review-app account {name}: ")
        else:
            password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise fail_usage(
                f"no password for {name!r}: type it, send it on stdin, or use an API token "
                "(--token-file, REFUSAL_AUDIT_CALIBRATION_TOKEN)"
            )
        return starter_by_password(store, name, password)
    except StarterError as exc:
        raise fail_usage(str(exc)) from exc
    except WarehouseError as exc:
        raise fail_usage(f"cannot read the review-app accounts: {exc}") from exc


def _check_filters(
    cfg: Settings, clause: str | None, category: str | None, bundle: str | None
) -> None:
    """Exit 2 naming the filter when the configured bundles (or ``bundle``) have no such
    clause or category: a typo must not read as "no refusal matched"."""
    from refusal_audit.bundles import load_bundles

    try:
        bundles = load_bundles(cfg.policy_bundles, cfg.data_dir)
    except ConfigError as exc:
        raise fail_usage(str(exc)) from exc
    if bundle is not None:
        if bundle not in bundles:
            raise fail_usage(f"unknown policy bundle {bundle!r} (configured: {sorted(bundles)})")
        bundles = {bundle: bundles[bundle]}
    if clause is not None and not any(b.clause(clause) for b in bundles.values()):
        raise fail_usage(f"clause {clause!r} is not in the policy bundle(s) {sorted(bundles)}")
    if category is not None and not any(category in b.category_codes() for b in bundles.values()):
        raise fail_usage(
            f"category {category!r} is not in the refusal taxonomy of {sorted(bundles)}"
        )


def print_run(run: object) -> None:
    """Print one ``CalibrationRun``: its status, escalation, and a table of the variants with
    their UX notes and check results."""
    from schemas.calibration import CalibrationRun

    assert isinstance(run, CalibrationRun)
    colour = {"passed": "green", "failed_checks": "yellow", "escalated": "red"}[run.status]
    console.print(
        f"[bold]{run.calibration_run_id}[/bold]  {run.clause_id} {run.clause_title}  "
        f"engine {run.engine}/{run.engine_model}  [{colour}]{run.status}[/{colour}]"
    )
    if run.escalation is not None:
        console.print(f"  escalated ({run.escalation.reason}): {'; '.join(run.escalation.errors)}")
    if run.output is None:
        return
    table = Table(show_lines=True)
    for column in ("style", "variant", "UX impact", "checks"):
        table.add_column(column, overflow="fold")
    for variant, check in zip(run.output.variants, run.validations, strict=True):
        verdict = (
            "[green]pass[/green]"
            if check.passed
            else "[red]fail[/red]: " + "; ".join(f"{f.code} ({f.detail})" for f in check.findings)
        )
        table.add_row(variant.style, variant.response_text, variant.ux_impact_note, verdict)
    console.print(table)


@ab_app.command("simulate")
def ab_simulate(
    scenario: str = typer.Option(
        "real_effect", "--scenario", help="no_effect | real_effect | srm | permissive."
    ),
    out: Path = typer.Option(..., "--out", help="Write the events here (JSONL)."),
    plan_out: Path | None = typer.Option(
        None, "--plan-out", help="Also write the experiment plan (JSON) here."
    ),
    experiment: str = typer.Option("exp-sim", "--experiment-id", help="Experiment id."),
    seed: int = typer.Option(13, "--seed", min=0, help="Random seed (same seed, same events)."),
    units: int | None = typer.Option(
        None, "--units", min=10, help="Users (default: the scenario's, 15,000)."
    ),
    days: float | None = typer.Option(None, "--days", min=0.1, help="Days (default 14)."),
    start: datetime = typer.Option(
        datetime(2026, 3, 2, tzinfo=UTC),
        "--start",
        formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d"],
        help="Time of the first possible exposure.",
    ),
    arms: str | None = typer.Option(
        None,
        "--arms",
        help="Name the scenario's three arms, control first, e.g. the arm ids of an exported "
        "experiment: control,policy_citing,empathetic_warm (default: control,b,c).",
    ),
) -> None:
    """Write a simulated event stream with a known effect (and its plan) for ab report."""
    from processors.calibration.ab_sim import SCENARIOS, plan_for, renamed, scaled, simulate
    from refusal_audit.calibration.runs import write_jsonl

    chosen = SCENARIOS.get(scenario)
    if chosen is None:
        raise fail_usage(f"unknown scenario {scenario!r} (one of {sorted(SCENARIOS)})")
    if days is not None:
        chosen = scaled(chosen, days=days)
    if arms is not None:
        try:
            chosen = renamed(chosen, [a.strip() for a in arms.split(",")])
        except ValueError as exc:
            raise fail_usage(str(exc)) from exc
    begin = as_utc(start)
    assert begin is not None
    events = simulate(chosen, experiment, begin, seed, units)
    try:
        write_jsonl(out, events)
        if plan_out is not None:
            plan_out.parent.mkdir(parents=True, exist_ok=True)
            plan_out.write_text(plan_for(chosen, experiment).model_dump_json(indent=2) + "\n")
    except OSError as exc:
        raise fail_usage(f"cannot write: {exc}") from exc
    err.print(f"{len(events)} events of scenario {scenario} (seed {seed}) written to {out}")


EXIT_SAFETY_REGRESSION = 3
"""``ab report --fail-on-safety-regression``: an arm is flagged as a safety regression."""


@ab_app.command("report")
def ab_report(
    experiment: str | None = typer.Argument(
        None, help="Experiment id: its events and exported plan from the warehouse."
    ),
    events_file: Path | None = typer.Option(
        None, "--events", help="JSONL of product events (instead of the warehouse)."
    ),
    plan_file: Path | None = typer.Option(
        None,
        "--plan",
        help="Experiment plan (JSON; default: the exported plan of EXPERIMENT, else arms "
        "from the exposures with equal weights).",
    ),
    control: str = typer.Option("control", "--control", help="Control arm without a plan."),
    as_of: datetime | None = typer.Option(
        None,
        "--as-of",
        formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d"],
        help="End of the observation (default: the last event's time).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    fail_on_safety_regression: bool = typer.Option(
        False,
        "--fail-on-safety-regression",
        help=f"Exit {EXIT_SAFETY_REGRESSION} when an arm is flagged as a safety regression "
        "(for pipelines that gate a rollout on the report).",
    ),
) -> None:
    """Per arm: users, exposures, re-request and escalation rates (score test, Newcombe
    intervals), mean satisfaction (Welch), Holm-corrected; sample-ratio mismatch, the safety
    guardrail and the decision. Reads EXPERIMENT from the warehouse (events loaded with
    ab load or ab consume), or a file with --events. Exit 1 when event lines were left out;
    with --fail-on-safety-regression, exit 3 when an arm is a safety regression (before 1)."""
    from processors.calibration.ab import analyse
    from refusal_audit.calibration.runs import BadLine, dumps, plan_from_events, read_plan

    if (experiment is None) == (events_file is None):
        raise fail_usage("give an EXPERIMENT id (warehouse) or --events FILE")
    bad: list[BadLine] = []
    stored_plan = None
    if events_file is not None:
        events, bad = read_events_listed(events_file)  # listed also when no report is made
    else:
        assert experiment is not None
        events, stored_plan = _stored_experiment(experiment)
    try:
        if plan_file is not None:
            plan = read_plan(plan_file)
        else:
            plan = stored_plan or plan_from_events(events, control)
    except (OSError, ValueError) as exc:
        lines = "line" if len(bad) == 1 else "lines"
        left_out = f" ({len(bad)} invalid event {lines} left out, listed above)" if bad else ""
        raise fail_usage(f"{exc}{left_out}") from exc
    if experiment is not None and plan.experiment_id != experiment:
        raise fail_usage(f"the plan is of experiment {plan.experiment_id!r}, not {experiment!r}")
    report = analyse(events, plan, as_utc(as_of))
    if as_json:
        data = report.to_dict()
        data["invalid_lines"] = [{"line": b.line, "reason": b.reason} for b in bad]
        console.file.write(dumps(data) + "\n")
    else:
        _print_report(report)
    if fail_on_safety_regression and any(g.safety_regression for g in report.guardrails):
        raise typer.Exit(EXIT_SAFETY_REGRESSION)
    if bad:
        raise typer.Exit(EXIT_FAILURES)


def read_events_listed(events_file: Path) -> tuple[list[Any], list[Any]]:
    """The events and invalid lines of a JSONL file
    (``refusal_audit.calibration.runs.read_events``),
    the invalid ones listed on stderr (the first 20, then a count); exit 2 when the file
    cannot be read."""
    from refusal_audit.calibration.runs import read_events

    if not events_file.is_file():
        raise fail_usage(f"events file not found (or not a file): {events_file}")
    try:
        events, bad = read_events(events_file)
    except OSError as exc:
        raise fail_usage(str(exc)) from exc
    for b in bad[:20]:
        err.print(f"[yellow]{escape(str(events_file))}:{b.line}:[/yellow] {escape(b.reason)} "
                  "(left out)")  # fmt: skip
    if len(bad) > 20:
        err.print(f"... and {len(bad) - 20} more invalid lines")
    return events, bad


def _stored_experiment(experiment: str) -> tuple[list[Any], Any]:
    """The stored events and exported plan (or None) of ``experiment``; exit 2 when the
    warehouse holds neither."""
    from warehouse.calibration import ab_events, experiment_plan
    from warehouse.client import WarehouseError

    store = open_store(settings())
    try:
        events, plan = ab_events(store, experiment), experiment_plan(store, experiment)
    except WarehouseError as exc:
        raise fail_usage(f"cannot read the warehouse: {exc}") from exc
    if not events and plan is None:
        raise fail_usage(f"the warehouse has no events and no exported plan of {experiment!r}")
    if not events:
        raise fail_usage(f"no events of {experiment!r} yet (load them: ab load or ab consume)")
    return events, plan


def _fmt(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _print_report(report: object) -> None:
    from processors.calibration.ab import ABReport

    assert isinstance(report, ABReport)
    colour = {"invalid": "red", "too_early": "yellow", "winner": "green", "no_winner": "white"}
    c = colour[report.status]
    winner = f": {report.winner}" if report.winner else ""
    console.print(
        f"[bold]{report.experiment_id}[/bold]  [{c}]{report.status}{winner}[/{c}]  "
        f"({report.duration_days:.1f} days, control arm: {report.control_arm})"
    )
    for reason in report.reasons:
        console.print(f"  - {reason}")
    arms = Table(title="arms (rates are shares of exposed users)")
    for column in (
        "arm", "users (planned)", "exposures", "re-request", "escalation", "circumvention",
        "satisfaction (n)",
    ):  # fmt: skip
        arms.add_column(column)
    for a in report.arms:
        arms.add_row(
            a.arm_id, f"{a.units} ({a.planned_units})", str(a.exposures),
            _fmt(a.re_request_rate), _fmt(a.escalation_rate), _fmt(a.circumvention_rate),
            f"{_fmt(a.satisfaction_mean, 3)} ({a.satisfaction_units})",
        )  # fmt: skip
    console.print(arms)
    comps = Table(title="against control (Holm-adjusted across arms and metrics)")
    for column in ("arm", "metric", "difference", "95% CI", "p", "p (Holm)", "result"):
        comps.add_column(column)
    for cmp in report.comparisons:
        comps.add_row(
            cmp.arm_id, cmp.metric, _fmt(cmp.difference),
            f"[{_fmt(cmp.ci_low)}, {_fmt(cmp.ci_high)}]", _fmt(cmp.p_value, 4),
            _fmt(cmp.p_adjusted, 4), cmp.direction,
        )  # fmt: skip
    console.print(comps)
    for g in report.guardrails:
        flag = "[red]SAFETY REGRESSION[/red]" if g.safety_regression else "[green]ok[/green]"
        console.print(
            f"guardrail {g.arm_id}: circumvention {_fmt(g.circumvention_difference)} vs control "
            f"(one-sided p {_fmt(g.p_value)}): {flag}"
        )
    s = report.sample_ratio
    console.print(
        "sample ratio (users per arm): "
        + ", ".join(f"{arm} {n}" for arm, n in s.observed.items())
        + f"; chi-square p {_fmt(s.p_value, 4)}"
        + (" [red]MISMATCH[/red]" if s.mismatch else "")
    )
    d = report.data
    console.print(
        f"data: {d.events} events, {d.duplicate_events} repeated event ids "
        f"({d.conflicting_events} with different contents), {d.after_as_of} after --as-of, "
        f"{d.orphan_events} orphan follow-ups, {d.unknown_arm_exposures} exposures of arms "
        f"not in the plan, {d.units_in_several_arms} users in several arms (excluded)"
    )
