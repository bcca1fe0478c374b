"""The audit commands: ``audit``, ``eval``, ``reaudit``, ``query``, ``sql`` and ``gaps``
(registered on the root app by :mod:`refusal_audit.cli`).

Exit codes: 0 success; 1 some records or batches failed (they are in the dead-letter table);
2 usage or configuration error.
"""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path

import orjson
import typer

from refusal_audit.audit.batch import run_batch
from refusal_audit.audit.run_report import print_eval, print_report, report_json
from refusal_audit.cli_common import (
    EXIT_FAILURES,
    batch_progress,
    console,
    err,
    fail_usage,
    input_options,
    open_store,
    settings,
)
from refusal_audit.config import ConfigError
from refusal_audit.output import OutputFormat, render
from warehouse.client import WarehouseError


def audit(
    files: list[Path] = typer.Argument(
        ..., metavar="FILE", help="Refusal log files (JSONL, OpenAI logs, CSV)."
    ),
    input_format: str | None = typer.Option(
        None,
        "--format",
        "-f",
        help="jsonl | mapped-jsonl | openai | xstest-csv (default: detected per file).",
    ),
    mapping: str | None = typer.Option(
        None,
        "--map",
        help="Field mapping for other JSONL layouts, e.g. "
        "request=prompt,response=response,log_id=id (implies --format mapped-jsonl).",
    ),
    event_time: datetime | None = typer.Option(
        None,
        "--event-time",
        formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d"],
        help="Event time for records without one (default: the file's modification time).",
    ),
    model: str | None = typer.Option(
        None, help="Model id for formats that may lack one (not native jsonl)."
    ),
    product: str | None = typer.Option(
        None, help="Product for formats that may lack one (not native jsonl)."
    ),
    engine: str | None = typer.Option(None, help="Audit engine (default: setting engine)."),
    out: Path | None = typer.Option(
        None, "--out", help="Write the full run result as JSON here (see docs/batch.md)."
    ),
) -> None:
    """Audit log files end to end without Kafka and store the results in the warehouse."""
    cfg = settings()
    options = input_options(files, input_format, mapping, event_time, model, product)
    if out is not None:
        try:  # its folder is made, like data_dir's, so `--out out/result.json` just works
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise fail_usage(f"--out {out}: cannot create its folder: {exc.strerror}") from exc
        if out.is_dir():
            raise fail_usage(f"--out {out}: is a directory, not a file path")
    try:
        sink = open_store(cfg)
        report = run_batch(
            cfg, files, options, engine_name=engine, sink=sink, progress_factory=batch_progress
        )
    except ConfigError as exc:
        raise fail_usage(str(exc)) from exc
    except WarehouseError as exc:
        err.print(f"[red]storage failed, run stopped:[/red] {exc}")
        raise typer.Exit(EXIT_FAILURES) from exc
    print_report(report, console)
    if out is not None:
        out.write_bytes(report_json(report))
        console.print(f"full result written to {out}")
    if report.failed:
        raise typer.Exit(EXIT_FAILURES)


def eval_command(
    files: list[Path] = typer.Argument(
        ..., metavar="FILE", help="Labelled log files (XSTest CSV, CoCoNot, ...)."
    ),
    input_format: str | None = typer.Option(None, "--format", "-f", help="As for `audit`."),
    mapping: str | None = typer.Option(None, "--map", help="As for `audit`."),
    event_time: datetime | None = typer.Option(
        None, "--event-time", formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d"], help="As for `audit`."
    ),
    engine: str | None = typer.Option(None, help="Audit engine (default: setting engine)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
    limit: int | None = typer.Option(
        None, "--limit", min=1, help="Read only the first N records of each file."
    ),
) -> None:
    """Measure the pre-filter and an engine against the labels of labelled files (no storage)."""
    from refusal_audit.audit.evaluation import run_eval

    cfg = settings()
    options = input_options(files, input_format, mapping, event_time, None, None)
    try:
        figures = run_eval(cfg, files, options, engine, limit)
    except ConfigError as exc:
        raise fail_usage(str(exc)) from exc
    trained = [
        name
        for name, on in (
            ("refusal pre-filter", cfg.prefilter_enabled and cfg.prefilter_model == "trained"),
            ("category model", cfg.local_category_model == "trained"),
        )
        if on
    ]
    if trained:
        err.print(
            f"note: the trained {' and '.join(trained)} learned from ../shared/data: on those "
            "files these figures are in-sample; held-out figures: docs/evaluation.md"
        )
    if as_json:
        console.file.write(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    print_eval(figures, console)


def reaudit(
    since: datetime | None = typer.Option(None, formats=["%Y-%m-%d"], help="First day recorded."),
    until: datetime | None = typer.Option(None, formats=["%Y-%m-%d"], help="Last day recorded."),
    dead_letter_id: list[str] = typer.Option(
        [], "--id", help="Only these dead letters (repeatable)."
    ),
    engine: str | None = typer.Option(None, help="Audit engine (default: setting engine)."),
) -> None:
    """Audit again the events of failed audits (dead letters of stage audit)."""
    from refusal_audit.audit.reaudit import run_reaudit

    cfg = settings()
    store = open_store(cfg)
    try:
        letters, report = run_reaudit(cfg, store, _day(since), _day(until), dead_letter_id, engine)
    except ConfigError as exc:
        raise fail_usage(str(exc)) from exc
    console.print(
        f"{letters} dead letter(s), {report.events} event(s) re-audited: "
        f"{len(report.assessments)} assessed, {report.failed} failed again"
    )
    if report.failed:
        raise typer.Exit(EXIT_FAILURES)


def query(
    name: str | None = typer.Argument(None, help="Named query; omit to list them."),
    since: datetime | None = typer.Option(None, formats=["%Y-%m-%d"], help="First day."),
    until: datetime | None = typer.Option(None, formats=["%Y-%m-%d"], help="Last day."),
    model: str | None = typer.Option(None, help="Only this model."),
    product: str | None = typer.Option(None, help="Only this product."),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o"),
    full: bool = typer.Option(
        False, "--all", help="Every row of a listing that shows its newest rows only."
    ),
) -> None:
    """Run a named trend query over the warehouse (current assessments only)."""
    from warehouse.queries import NAMED_QUERIES, UnsupportedFilterError, run_named, with_costs

    if name is None:
        render(
            ["name", "description"],
            [(n, q.description) for n, q in NAMED_QUERIES.items()],
            output,
            console,
        )
        return
    cfg = settings()
    store = open_store(cfg)
    try:
        result = run_named(
            store.client,
            cfg.warehouse_database,
            name,
            since=_day(since),
            until=_day(until),
            model=model,
            product=product,
            full=full,
        )
    except (KeyError, UnsupportedFilterError, WarehouseError) as exc:
        raise fail_usage(str(exc)) from exc
    if name == "cost":
        result = with_costs(result, cfg.price_table)
    render(result.columns, result.rows, output, console, title=name)


def _day(value: datetime | None) -> date | None:
    return value.date() if value is not None else None


def sql(
    statement: str = typer.Argument(..., help="A single read-only statement (SELECT, ...)."),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o"),
) -> None:
    """Run an ad hoc read-only SQL query against the warehouse."""
    from warehouse.queries import ReadOnlyViolation, run_readonly

    cfg = settings()
    store = open_store(cfg)
    try:
        result = run_readonly(store.client, statement)
    except (ReadOnlyViolation, WarehouseError) as exc:
        raise fail_usage(str(exc)) from exc
    render(result.columns, result.rows, output, console)


GAPS_NOTE = (
    "Each gap is named after its most common flag description; first/last_event are the "
    "event times (UTC) of its flagged refusals, as in the report and the gap alerts."
)


def gaps(
    bundle: str | None = typer.Option(None, "--bundle", "-b", help="Only this policy bundle."),
    since: datetime | None = typer.Option(
        None, formats=["%Y-%m-%d"], help="Only gaps last seen on or after this day (UTC)."
    ),
    limit: int = typer.Option(100, min=1, help="At most this many gaps (most reported first)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON lines, one gap per line."),
) -> None:
    """List the open policy gaps (grouped policy-gap flags) with counts and example log ids."""
    from datetime import UTC

    from refusal_audit.alerts.gaps import list_open_gaps, track_configured_gaps

    cfg = settings()
    store = open_store(cfg)
    try:
        # group the flags audited since the last run first (idempotent; alerts are left to
        # the worker or `alerts evaluate --store/--publish`)
        track_configured_gaps(store, cfg, now=datetime.now(UTC))
        found = list_open_gaps(
            store, bundle, since.replace(tzinfo=UTC) if since is not None else None, limit
        )
    except WarehouseError as exc:
        raise fail_usage(str(exc)) from exc
    if as_json:
        for gap in found:
            console.file.write(orjson.dumps(gap.as_dict()).decode() + "\n")
        return
    if not found:
        console.print("no open policy gaps")
        return
    columns = ["bundle", "gap_id", "log_ids", "batches", "first_event", "last_event"]
    rows = [
        (
            g.policy_bundle,
            g.gap_id,
            g.log_ids,
            g.batches,
            g.first_seen,
            g.last_seen,
            g.description,
            ", ".join(g.example_log_ids[:5]) + (" ..." if g.log_ids > 5 else ""),
        )
        for g in found
    ]
    render([*columns, "description", "examples"], rows, OutputFormat.table, console)
    console.print(GAPS_NOTE)
