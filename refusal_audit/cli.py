"""The ``refusal-audit`` command line (typer + rich).

Exit codes: 0 success; 1 some records or batches failed (they are in the dead-letter table);
2 usage or configuration error.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import typer

from refusal_audit.alerts import cli as cli_alerts
from refusal_audit.audit import cli as cli_audit
from refusal_audit.calibration import cli as cli_calibrate
from refusal_audit.clarification import cli as cli_clarify
from refusal_audit.cli_common import (
    State,
    console,
    settings,
)
from refusal_audit.encoders import cli as cli_encoders
from refusal_audit.llm import cli as cli_llm
from refusal_audit.review import cli as cli_review
from refusal_audit.review import cli_tokens as cli_review_tokens
from refusal_audit.streaming import cli as cli_streaming
from refusal_audit.training import cli as cli_train
from warehouse.client import redact_dsn

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

app.command("migrate", rich_help_panel=STREAMING_PANEL)(cli_streaming.migrate)
app.command("refresh-daily", rich_help_panel=STREAMING_PANEL)(cli_streaming.refresh_daily)
app.add_typer(cli_streaming.topics_app, name="topics", rich_help_panel=STREAMING_PANEL)
app.command("worker", rich_help_panel=STREAMING_PANEL)(cli_streaming.worker)
app.command("produce", rich_help_panel=STREAMING_PANEL)(cli_streaming.produce)
app.command("sink", rich_help_panel=STREAMING_PANEL)(cli_streaming.sink)


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

app.command("report", rich_help_panel=AUDIT_PANEL)(cli_report.report)

alerts_app.command("list")(cli_alerts.alerts_list)
alerts_app.command("evaluate")(cli_alerts.alerts_evaluate)
alerts_app.command("tail")(cli_alerts.alerts_tail)


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
