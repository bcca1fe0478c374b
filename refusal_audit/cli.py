"""The ``refusal-audit`` command line (typer + rich).

Exit codes: 0 success; 1 some records or batches failed (they are in the dead-letter table);
2 usage or configuration error.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import orjson
import typer

from refusal_audit.alerts import cli as cli_alerts
from refusal_audit.audit import cli as cli_audit
from refusal_audit.calibration import cli as cli_calibrate
from refusal_audit.clarification import cli as cli_clarify
from refusal_audit.cli_common import (
    EXIT_FAILURES,
    State,
    batch_progress,
    console,
    err,
    fail_usage,
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


app.command("audit", rich_help_panel=AUDIT_PANEL)(cli_audit.audit)
app.command("eval", rich_help_panel=AUDIT_PANEL)(cli_audit.eval_command)
app.command("reaudit", rich_help_panel=AUDIT_PANEL)(cli_audit.reaudit)
app.command("query", rich_help_panel=AUDIT_PANEL)(cli_audit.query)
app.command("sql", rich_help_panel=AUDIT_PANEL)(cli_audit.sql)
app.command("gaps", rich_help_panel=AUDIT_PANEL)(cli_audit.gaps)


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
    options = cli_audit.input_options(files, input_format, mapping, event_time, model, product)
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
    with batch_progress() as progress:
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
