"""``refusal-audit calibrate run`` and ``refusal-audit ab simulate|report`` (``refusal_audit.cli``
registers them; docs/calibration.md).

Exit codes: ``calibrate run``: 0 every run passed, 1 some variant failed its checks or a
run was escalated (all are printed), 2 usage or configuration error. ``ab report``: 0 the
report was made, 1 some event lines were invalid (listed on stderr, left out), 2 usage
error (the invalid lines are listed first when there are some). ``ab simulate``: 0, or 2.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from refusal_audit.cli_common import EXIT_FAILURES, as_utc, console, err, fail_usage, settings
from refusal_audit.config import ConfigError

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
    file: Path = typer.Option(
        ..., "--file", help="JSONL of calibration requests (schemas/json/calibration_request)."
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
        None, "--started-by", help="Who starts the runs (default: $USER)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the runs as a JSON array."),
) -> None:
    """Generate one refusal variant per style of the spectrum for each refusal in FILE, run
    the safety regression check (and the team's suite, calibrate_suite_command) on every
    variant and print the runs; exit 1 when a variant failed or a run was escalated."""
    import os

    from processors.calibration.base import CalibrationInputError
    from processors.redaction import Redactor
    from refusal_audit.calibrate import (
        InputFileError,
        dumps,
        read_requests,
        read_spectrum,
        run_calibrations,
    )

    if not file.is_file():
        raise fail_usage(f"input file not found (or not a file): {file}")
    cfg = settings()
    redactor = Redactor(cfg.redaction_kinds) if cfg.redaction_enabled else None
    try:
        requests = read_requests(file, redactor)
        spectrum = read_spectrum(spectrum_file) if spectrum_file is not None else None
    except (OSError, InputFileError, ValueError) as exc:
        raise fail_usage(str(exc)) from exc
    if not requests:
        raise fail_usage(f"{file}: no calibration request")
    try:
        runs = run_calibrations(
            cfg, requests, engine, started_by=started_by or os.environ.get("USER"),
            spectrum=spectrum,
        )  # fmt: skip
    except (ConfigError, CalibrationInputError) as exc:
        raise fail_usage(f"calibrate: {exc}") from exc
    if as_json:
        console.file.write(dumps([r.model_dump(mode="json") for r in runs]) + "\n")
    else:
        for run in runs:
            _print_run(run)
    if any(r.status != "passed" for r in runs):
        raise typer.Exit(EXIT_FAILURES)


def _print_run(run: object) -> None:
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
    seed: int = typer.Option(13, "--seed", help="Random seed (same seed, same events)."),
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
) -> None:
    """Write a simulated event stream with a known effect (and its plan) for ab report."""
    from processors.calibration.ab_sim import SCENARIOS, plan_for, scaled, simulate
    from refusal_audit.calibrate import write_jsonl

    chosen = SCENARIOS.get(scenario)
    if chosen is None:
        raise fail_usage(f"unknown scenario {scenario!r} (one of {sorted(SCENARIOS)})")
    if days is not None:
        chosen = scaled(chosen, days=days)
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


@ab_app.command("report")
def ab_report(
    events_file: Path = typer.Option(..., "--events", help="JSONL of product events."),
    plan_file: Path | None = typer.Option(
        None,
        "--plan",
        help="Experiment plan (JSON; default: arms from the exposures, equal weights).",
    ),
    control: str = typer.Option("control", "--control", help="Control arm without --plan."),
    as_of: datetime | None = typer.Option(
        None,
        "--as-of",
        formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d"],
        help="End of the observation (default: the last event's time).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Per arm: users, exposures, re-request and escalation rates (score test, Newcombe
    intervals), mean satisfaction (Welch), Holm-corrected; sample-ratio mismatch, the safety
    guardrail and the decision."""
    from processors.calibration.ab import analyse
    from refusal_audit.calibrate import dumps, plan_from_events, read_events, read_plan

    if not events_file.is_file():
        raise fail_usage(f"events file not found (or not a file): {events_file}")
    try:
        events, bad = read_events(events_file)
    except OSError as exc:
        raise fail_usage(str(exc)) from exc
    for b in bad[:20]:  # listed in every mode, also when no report can be made
        err.print(f"[yellow]{escape(str(events_file))}:{b.line}:[/yellow] {escape(b.reason)} "
                  "(left out)")  # fmt: skip
    if len(bad) > 20:
        err.print(f"... and {len(bad) - 20} more invalid lines")
    try:
        plan = read_plan(plan_file) if plan_file is not None else plan_from_events(events, control)
    except (OSError, ValueError) as exc:
        lines = "line" if len(bad) == 1 else "lines"
        left_out = f" ({len(bad)} invalid event {lines} left out, listed above)" if bad else ""
        raise fail_usage(f"{exc}{left_out}") from exc
    report = analyse(events, plan, as_utc(as_of))
    if as_json:
        data = report.to_dict()
        data["invalid_lines"] = [{"line": b.line, "reason": b.reason} for b in bad]
        console.file.write(dumps(data) + "\n")
    else:
        _print_report(report)
    if bad:
        raise typer.Exit(EXIT_FAILURES)


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
        f"({report.duration_days:.1f} days, control {report.control_arm})"
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
        f"sample ratio: {s.observed}, chi-square p {_fmt(s.p_value, 4)}"
        + (" [red]MISMATCH[/red]" if s.mismatch else "")
    )
    d = report.data
    console.print(
        f"data: {d.events} events, {d.duplicate_events} duplicates, {d.orphan_events} orphan "
        f"follow-ups, {d.units_in_several_arms} users in several arms (excluded)"
    )
