"""The ``refusal-audit`` command line (typer + rich).

Exit codes: 0 success; 1 some records or batches failed (they are in the dead-letter table);
2 usage or configuration error.
"""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path

import orjson
import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from refusal_audit.alerts import cli as cli_alerts
from refusal_audit.audit.batch import BatchOptions, run_batch
from refusal_audit.audit.run_report import print_eval, print_report, report_json
from refusal_audit.calibration import cli as cli_calibrate
from refusal_audit.clarification import cli as cli_clarify
from refusal_audit.cli_common import (
    EXIT_FAILURES,
    State,
    console,
    err,
    fail_usage,
    open_store,
    settings,
)
from refusal_audit.config import ConfigError
from refusal_audit.encoders import cli as cli_encoders
from refusal_audit.llm import cli as cli_llm
from refusal_audit.output import OutputFormat, render
from refusal_audit.review import cli as cli_review
from refusal_audit.review import cli_tokens as cli_review_tokens
from refusal_audit.training import cli as cli_train
from warehouse.client import WarehouseError, redact_dsn

AUDIT_PANEL = "Audit log files (start here)"
STREAMING_PANEL = "Streaming: Kafka workers and the warehouse sink"
REVIEW_PANEL = "Human review and alerts"
COMPANIONS_PANEL = "Clarification and refusal-style calibration"
SETUP_PANEL = "Models, encoders, local LLM and configuration"

app = typer.Typer(
    help="Audit the refusals of production LLMs against your own policies. Start here: "
    "`refusal-audit audit FILE` audits a log into the embedded warehouse (`make demo` does it "
    "with the example log), then `query`, `report` and `review serve` read the results.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def input_options(
    files: list[Path],
    input_format: str | None,
    mapping: str | None,
    event_time: datetime | None,
    model: str | None,
    product: str | None,
) -> BatchOptions:
    """Check the input files exist and the input options are valid; exit 2 otherwise."""
    for path in files:
        if not path.is_file():
            raise fail_usage(f"input file not found (or not a file): {path}")
    try:
        return BatchOptions.build(input_format, mapping, event_time, model, product)
    except ValueError as exc:
        raise fail_usage(str(exc)) from exc


@app.callback()
def main(
    config: Path | None = typer.Option(
        None,
        "--config",
        "-c",
        help="TOML config file (default: $REFUSAL_AUDIT_CONFIG or "
        "./refusal-audit.toml when present).",
    ),
) -> None:
    """Audit the refusals of production LLMs against your own policies."""
    State.config_file = config


@app.command(rich_help_panel=AUDIT_PANEL)
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
            cfg, files, options, engine_name=engine, sink=sink, progress_factory=_progress
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


@app.command("eval", rich_help_panel=AUDIT_PANEL)
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
    from refusal_audit.audit.evaluate import run_eval

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


@app.command(rich_help_panel=AUDIT_PANEL)
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


class _Count(MofNCompleteColumn):
    """``done/total`` when the total is known, else just ``done`` (never ``done/?``)."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text(str(int(task.completed)), style="progress.download")
        return super().render(task)


def _progress() -> Progress:
    """The record counter of ``audit`` and ``produce`` (on stderr)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        _Count(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )


@app.command(rich_help_panel=AUDIT_PANEL)
def query(
    name: str | None = typer.Argument(None, help="Named query; omit to list them."),
    since: datetime | None = typer.Option(None, formats=["%Y-%m-%d"], help="First day."),
    until: datetime | None = typer.Option(None, formats=["%Y-%m-%d"], help="Last day."),
    model: str | None = typer.Option(None, help="Only this model."),
    product: str | None = typer.Option(None, help="Only this product."),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o"),
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
        )
    except (KeyError, UnsupportedFilterError, WarehouseError) as exc:
        raise fail_usage(str(exc)) from exc
    if name == "cost":
        result = with_costs(result, cfg.price_table)
    render(result.columns, result.rows, output, console, title=name)


def _day(value: datetime | None) -> date | None:
    return value.date() if value is not None else None


@app.command(rich_help_panel=AUDIT_PANEL)
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


@app.command(rich_help_panel=STREAMING_PANEL)
def migrate() -> None:
    """Create the warehouse database and apply pending DDL migrations."""
    from warehouse.connect import connect
    from warehouse.migrate import migrate as apply

    cfg = settings()
    password = cfg.warehouse_password.get_secret_value() if cfg.warehouse_password else None
    try:
        client = connect(cfg.resolved_warehouse_dsn, cfg.warehouse_database, password)
        applied = apply(client, cfg.warehouse_database)
    except WarehouseError as exc:
        raise fail_usage(f"cannot migrate the warehouse: {exc}") from exc
    console.print(f"applied: {', '.join(applied) if applied else 'nothing (up to date)'}")


GAPS_NOTE = (
    "Each gap is named after its most common flag description; first/last_event are the "
    "event times (UTC) of its flagged refusals, as in the report and the gap alerts."
)


@app.command(rich_help_panel=AUDIT_PANEL)
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


topics_app = typer.Typer(help="Provision and list the Kafka topics.", no_args_is_help=True)
app.add_typer(topics_app, name="topics", rich_help_panel=STREAMING_PANEL)


@topics_app.command("create")
def topics_create() -> None:
    """Create the missing topics (idempotent: existing topics are left as they are)."""
    from streams.topics import TopicError, admin_client, create_topics, topic_specs

    cfg = settings()
    specs = topic_specs(
        cfg.kafka_topic_prefix, cfg.kafka_topic_partitions, cfg.kafka_replication_factor
    )
    try:
        status = create_topics(admin_client(cfg.kafka()), specs)
    except TopicError as exc:
        raise fail_usage(str(exc)) from exc
    render(
        ["topic", "role", "status", "partitions", "config"],
        [(s.name, s.role, status[s.name], s.partitions, dict(s.config)) for s in specs],
        OutputFormat.table,
        console,
    )


@app.command(rich_help_panel=STREAMING_PANEL)
def worker(
    loglevel: str = typer.Option("info", help="Log level (logs are JSON lines on stderr)."),
    outputs: str = typer.Option(
        "topics",
        "--outputs",
        help="topics (default): a transactional worker writing only to the result topics, "
        "exactly once per window, for any number of workers (`refusal-audit sink` loads them "
        "into the warehouse); warehouse: one process that stores into ClickHouse itself and "
        "publishes (the faust worker; one worker per embedded store, no sink).",
    ),
) -> None:
    """Run the streaming worker: consume refusal events, audit them, and write the results
    to the result topics (default) or straight into the warehouse."""
    from refusal_audit.streaming.worker import run_worker
    from streams.topics import TopicError

    if outputs not in ("warehouse", "topics"):
        raise fail_usage(f"--outputs must be warehouse or topics, not {outputs!r}")
    cfg = settings()
    if outputs == "topics":
        from refusal_audit.streaming.cli import run_topics_worker

        run_topics_worker(cfg, loglevel)
        return
    try:
        run_worker(cfg, loglevel)
    except (TopicError, WarehouseError, ConfigError) as exc:
        raise fail_usage(f"worker not started: {exc}") from exc


@app.command(rich_help_panel=STREAMING_PANEL)
def produce(
    files: list[Path] = typer.Argument(..., metavar="FILE", help="Refusal log files to replay."),
    input_format: str | None = typer.Option(None, "--format", "-f", help="As for `audit`."),
    mapping: str | None = typer.Option(None, "--map", help="As for `audit`."),
    event_time: datetime | None = typer.Option(
        None, "--event-time", formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d"], help="As for `audit`."
    ),
    model: str | None = typer.Option(None, help="Model id for records without one."),
    product: str | None = typer.Option(None, help="Product for records without one."),
    raw: bool = typer.Option(False, help="Send JSON Lines records byte for byte, unvalidated."),
) -> None:
    """Replay log files into the input topic (key: conversation id, else log id)."""
    from refusal_audit.audit.batch import file_source, record_total
    from refusal_audit.streaming.replay import replay
    from streams.producer import TopicWriter, make_producer
    from streams.topics import TopicError, Topics, admin_client, require_topic

    cfg = settings()
    options = input_options(files, input_format, mapping, event_time, model, product)
    try:
        sources = [file_source(path, options, cfg) for path in files]
    except ConfigError as exc:
        raise fail_usage(str(exc)) from exc
    topic = Topics.from_prefix(cfg.kafka_topic_prefix).input
    try:
        require_topic(admin_client(cfg.kafka()), topic)
    except TopicError as exc:
        raise fail_usage(str(exc)) from exc
    writer = TopicWriter(make_producer(cfg.kafka()))
    with _progress() as progress:
        task = progress.add_task(f"producing to {topic}", total=record_total(files, sources))
        report = replay(sources, writer, topic, raw=raw, on_record=lambda: progress.advance(task))
    console.print(
        f"sent {report.sent}, delivered {report.delivered}, undelivered {report.undelivered} "
        f"(failed {report.failed}, unconfirmed {report.unconfirmed}), "
        f"rejected {len(report.rejected)}"
    )
    for failure in report.rejected[:20]:
        console.print(
            f"  {failure.source} {failure.location}: {failure.reason_code}: {failure.reason}"
        )
    for error in report.delivery_errors:
        err.print(f"[red]delivery failed:[/red] {error}")
    if report.rejected or report.undelivered:
        raise typer.Exit(EXIT_FAILURES)


review_app = typer.Typer(
    help="Human review: the review app, verdicts and agreement.", no_args_is_help=True
)
app.add_typer(review_app, name="review", rich_help_panel=REVIEW_PANEL)
review_app.command("export")(cli_review.review_export)
review_app.command("import")(cli_review.review_import)
review_app.command("labels")(cli_review.review_labels)
review_app.command("clarification-labels")(cli_review.review_clarification_labels)
review_app.command("stats")(cli_review.review_stats)
review_app.command("serve")(cli_review.review_serve)
review_app.command("add-reviewer")(cli_review.review_add_reviewer)
review_app.command("remove-reviewer")(cli_review.review_remove_reviewer)
review_app.command("reviewers")(cli_review.review_reviewers)
review_app.add_typer(cli_review_tokens.token_app, name="token")

alerts_app = typer.Typer(help="Tail, list and evaluate alerts.", no_args_is_help=True)
app.add_typer(alerts_app, name="alerts", rich_help_panel=REVIEW_PANEL)
app.add_typer(cli_clarify.clarify_app, name="clarify", rich_help_panel=COMPANIONS_PANEL)
app.add_typer(cli_calibrate.calibrate_app, name="calibrate", rich_help_panel=COMPANIONS_PANEL)
app.add_typer(cli_calibrate.ab_app, name="ab", rich_help_panel=COMPANIONS_PANEL)
app.add_typer(cli_llm.llm_app, name="llm", rich_help_panel=SETUP_PANEL)
app.add_typer(cli_encoders.encoders_app, name="encoders", rich_help_panel=SETUP_PANEL)
# imported for their side effect: they register more commands on calibrate_app and ab_app
import refusal_audit.calibration.cli_kafka  # noqa: E402
import refusal_audit.calibration.cli_store  # noqa: E402, F401
from refusal_audit.report import cli as cli_report  # noqa: E402
from refusal_audit.streaming import cli as cli_scale  # noqa: E402

app.command("sink", rich_help_panel=STREAMING_PANEL)(cli_scale.sink)
app.command("report", rich_help_panel=AUDIT_PANEL)(cli_report.report)

alerts_app.command("list")(cli_alerts.alerts_list)
alerts_app.command("evaluate")(cli_alerts.alerts_evaluate)


@alerts_app.command("tail")
def alerts_tail(
    kind: list[str] = typer.Option(
        ["drift", "policy-gap"], "--kind", "-k", help="Alert kind(s): drift, policy-gap."
    ),
    from_beginning: bool = typer.Option(False, help="Start at the oldest retained alert."),
    max_messages: int | None = typer.Option(None, "--max", min=1, help="Stop after N alerts."),
    idle_timeout: float | None = typer.Option(
        None, min=0.0, help="Stop after this many seconds without an alert."
    ),
) -> None:
    """Print alerts from the alert topics as JSON lines (for piping into a pager).

    Exit codes: 0 stopped by --max or --idle-timeout; 1 the broker was lost while tailing
    (unreachable for 30 s, or when the idle timeout ran out); 2 usage error, the broker
    cannot be reached at the start (10 s), or an alert topic does not exist.
    """
    from streams.tail import TailError, alert_consumer, tail
    from streams.topics import Topics

    cfg = settings()
    try:
        topic_names = Topics.from_prefix(cfg.kafka_topic_prefix).alert_topics(tuple(kind))
    except ValueError as exc:
        raise fail_usage(str(exc)) from exc
    try:
        consumer = alert_consumer(cfg.kafka(), topic_names, from_beginning, quiet=True)
    except TailError as exc:
        raise fail_usage(str(exc)) from exc
    try:
        for item in tail(consumer, max_messages, idle_timeout):
            console.file.write(orjson.dumps(item).decode() + "\n")
            console.file.flush()
    except TailError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(EXIT_FAILURES) from exc


app.command("train", rich_help_panel=SETUP_PANEL)(cli_train.train)

config_app = typer.Typer(help="Inspect the configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config", rich_help_panel=SETUP_PANEL)


@config_app.command("show")
def config_show() -> None:
    """Print the effective settings as JSON (secrets masked)."""
    cfg = settings()
    data = cfg.model_dump(mode="json")
    data["warehouse_dsn"] = redact_dsn(cfg.warehouse_dsn) if cfg.warehouse_dsn else None
    data["resolved_warehouse_dsn"] = redact_dsn(cfg.resolved_warehouse_dsn)
    data["resolved_engine"] = cfg.resolved_engine
    console.file.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


@config_app.command("reference")
def config_reference() -> None:
    """Print the configuration reference as a Markdown table (docs/configuration.md)."""
    from refusal_audit.config import settings_reference

    console.file.write(settings_reference() + "\n")


if __name__ == "__main__":
    app()
