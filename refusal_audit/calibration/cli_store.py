"""``refusal-audit calibrate list|show|export`` and ``refusal-audit ab load``: calibration
with the warehouse (registered on the apps of ``refusal_audit.calibration.cli``;
docs/calibration.md).

Exit codes: 0 done; 1 ``ab load`` stored the valid events but some lines were invalid
(listed); 2 usage error, nothing to export (no approved variant, a chosen variant not
approved) or the warehouse cannot be read or written.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from refusal_audit.calibration.cli import ab_app, calibrate_app, print_run, read_events_listed
from refusal_audit.cli_common import EXIT_FAILURES, console, err, fail_usage, open_store, settings
from refusal_audit.config import ConfigError


@calibrate_app.command("list")
def calibrate_list(
    clause: str | None = typer.Option(None, "--clause", help="Only runs of this clause."),
    status: str | None = typer.Option(
        None, "--status", help="Only runs with this status: passed | failed_checks | escalated."
    ),
    limit: int = typer.Option(50, "--limit", min=1, max=10_000),
) -> None:
    """The logged calibration runs, newest first."""
    from warehouse.calibration import list_runs
    from warehouse.client import WarehouseError

    try:
        rows = list_runs(open_store(settings()), clause_id=clause, status=status, limit=limit)
    except WarehouseError as exc:
        raise fail_usage(f"cannot read the warehouse: {exc}") from exc
    table = Table(title=f"{len(rows)} calibration runs")
    for column in ("run", "created", "started by", "clause", "engine", "status", "passing"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(
            r["calibration_run_id"], f"{r['created_at']:%Y-%m-%d %H:%M}", r["started_by"] or "-",
            r["clause_id"], f"{r['engine']}/{r['engine_model']}", r["status"],
            f"{len(r['passing_styles'])}/{len(r['styles'])}",
        )  # fmt: skip
    console.print(table)


@calibrate_app.command("show")
def calibrate_show(
    run_id: str = typer.Argument(..., help="A calibration_run_id."),
    as_json: bool = typer.Option(False, "--json", help="Print the run as JSON."),
) -> None:
    """One logged run: its variants, UX notes, checks and the approvers' decisions."""
    from processors.calibration.approval import PAST_TENSE, current_decisions
    from refusal_audit.calibration.runs import dumps
    from warehouse.calibration import decision_rows, get_run
    from warehouse.client import WarehouseError

    store = open_store(settings())
    try:
        run = get_run(store, run_id)
        decisions = decision_rows(store, calibration_run_id=run_id)
    except WarehouseError as exc:
        raise fail_usage(f"cannot read the warehouse: {exc}") from exc
    if run is None:
        raise fail_usage(f"no calibration run {run_id!r}")
    if as_json:
        data = run.model_dump(mode="json")
        data["decisions"] = [{**d, "decided_at": d["decided_at"].isoformat()} for d in decisions]
        console.file.write(dumps(data) + "\n")
        return
    print_run(run)
    for (_, style), d in sorted(current_decisions(decisions).items()):
        said = PAST_TENSE.get(d.decision, d.decision)
        console.print(
            f"  {style}: [bold]{said}[/bold] by {escape(d.approver)} "
            f"{d.decided_at:%Y-%m-%d %H:%M} ({escape(d.note)})"
        )


def _pair(text: str) -> tuple[str, str]:
    run, sep, style = text.rpartition(":")
    if not sep or not run or not style:
        raise fail_usage(f"--variant takes RUN_ID:STYLE, not {text!r}")
    return run, style


@calibrate_app.command("export")
def calibrate_export(
    clause: str = typer.Option(..., "--clause", help="The policy clause whose variants to test."),
    bundle: str = typer.Option("default", "--bundle", help="Its policy bundle."),
    experiment_id: str = typer.Option(..., "--experiment-id", help="Id of the new experiment."),
    out: Path = typer.Option(..., "--out", help="Write the flagd flag definition (JSON) here."),
    arms_out: Path = typer.Option(
        ..., "--arms-out", help="Write the arms (ids, texts, run ids) as JSON here."
    ),
    plan_out: Path | None = typer.Option(
        None, "--plan-out", help="Also write the experiment plan (JSON) here."
    ),
    variants: list[str] | None = typer.Option(
        None,
        "--variant",
        help="Export only this approved variant, RUN_ID:STYLE (repeatable; default: every "
        "approved variant of the clause).",
    ),
    control_text: str | None = typer.Option(
        None, "--control-text", help="The current refusal (default: the runs' refusal)."
    ),
    exported_by: str | None = typer.Option(None, "--exported-by", help="Default: $USER."),
) -> None:
    """Write the approved variants of one clause as an experiment: an OpenFeature flagd flag
    (control = the current refusal, one arm per approved variant) and the arm list; the
    plan is recorded for ab report EXPERIMENT. Unapproved variants are never exported."""
    from processors.calibration.export import ExportError
    from refusal_audit.bundles import load_bundles
    from refusal_audit.calibration.runs import dumps
    from refusal_audit.calibration.store import export_experiment, record_experiment
    from warehouse.client import WarehouseError

    chosen = [_pair(v) for v in variants] if variants else None
    cfg = settings()
    try:
        policy = load_bundles(cfg.policy_bundles, cfg.data_dir).get(bundle)
    except ConfigError as exc:
        raise fail_usage(str(exc)) from exc
    if policy is None:
        raise fail_usage(f"unknown policy bundle {bundle!r}")
    store = open_store(cfg)
    try:
        experiment = export_experiment(
            store, experiment_id, policy, clause, chosen=chosen, control=control_text
        )
    except ExportError as exc:
        raise fail_usage(f"export: {exc}") from exc
    except WarehouseError as exc:
        raise fail_usage(f"cannot use the warehouse: {exc}") from exc
    arms = {
        "experiment_id": experiment_id, "policy_bundle": bundle, "clause_id": clause,
        "flag_key": experiment.flag_key, "control_arm": experiment.plan.control_arm,
        "arms": experiment.arms,
    }  # fmt: skip
    try:  # the files first: an experiment is recorded only once it was written out
        for path, text in (
            (out, dumps(experiment.flagd)),
            (arms_out, dumps(arms)),
            *([(plan_out, experiment.plan.model_dump_json(indent=2))] if plan_out else []),
        ):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise fail_usage(f"cannot write: {exc} (nothing recorded)") from exc
    try:
        record_experiment(
            store, experiment, bundle, exported_by or os.environ.get("USER") or "unknown"
        )
    except WarehouseError as exc:
        raise fail_usage(
            f"the files are written but the experiment is not recorded: {exc}"
        ) from exc
    n = len(experiment.arms) - 1
    err.print(
        f"experiment {experiment_id}: {len(experiment.arms)} arms (control + {n} approved "
        f"variant{'s' if n != 1 else ''}), flag {experiment.flag_key}, "
        f"written to {out} and {arms_out}"
    )


@ab_app.command("load")
def ab_load(
    events_file: Path = typer.Option(..., "--events", help="JSONL of product events."),
) -> None:
    """Store the product's A/B events of a file in the warehouse (the same table ab consume
    fills; an event id stored twice counts once). Invalid lines are listed and left out."""
    from refusal_audit.calibration.store import load_events
    from warehouse.client import WarehouseError

    events, bad = read_events_listed(events_file)
    # the line number of each valid event, for its source column
    lines = _valid_lines(events_file, {b.line for b in bad})
    try:
        stored = load_events(
            open_store(settings()),
            [(e, f"file:{events_file}:{n}") for e, n in zip(events, lines, strict=True)],
        )
    except WarehouseError as exc:
        raise fail_usage(f"cannot store the events: {exc}") from exc
    experiments = sorted({e.experiment_id for e in events})
    err.print(f"{stored} events stored (experiments: {', '.join(experiments) or 'none'})")
    if bad:
        raise typer.Exit(EXIT_FAILURES)


def _valid_lines(path: Path, bad: set[int]) -> list[int]:
    with path.open("rb") as fh:
        return [n for n, line in enumerate(fh, start=1) if line.strip() and n not in bad]
