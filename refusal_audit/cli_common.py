"""What every ``refusal-audit`` command shares: consoles, exit codes, settings, the store.

Exit codes: 0 success; 1 some records or batches failed (they are in the dead-letter table);
2 usage or configuration error.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from refusal_audit.config import ConfigError, Settings, load_settings
from warehouse.client import WarehouseError
from warehouse.store import Warehouse

if TYPE_CHECKING:
    from refusal_audit.audit.batch import BatchOptions

# Outside a terminal (CI logs, pipes) rich would wrap at 80 columns and cut table cells.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True)

EXIT_FAILURES = 1
EXIT_USAGE = 2


class State:
    """Per-invocation state: the config file named with ``--config``."""

    config_file: Path | None = None


def settings(**overrides: object) -> Settings:
    """Load the settings, exiting with code 2 and a clear message when they are invalid."""
    try:
        return load_settings(State.config_file, **overrides)
    except ConfigError as exc:
        err.print(f"[red]configuration error:[/red] {exc}")
        raise typer.Exit(EXIT_USAGE) from exc


def default_of(setting: str) -> str:
    """``"(default: VALUE, setting NAME)"`` for a command's help: the setting's built-in
    default (a config file or environment variable may change it). Raises ``KeyError`` for
    an unknown setting."""
    return f"(default: {Settings.model_fields[setting].default}, setting {setting})"


def open_store(cfg: Settings) -> Warehouse:
    """Open the configured warehouse; exit 2 with the reason when it cannot be opened."""
    try:
        return Warehouse.open(cfg)
    except WarehouseError as exc:
        raise fail_usage(f"cannot open the warehouse: {exc}") from exc


def fail_usage(message: str) -> typer.Exit:
    """Print a usage error; return the Exit(2) to raise."""
    err.print(f"[red]error:[/red] {message}")
    return typer.Exit(EXIT_USAGE)


def as_utc(value: datetime | None) -> datetime | None:
    """A command-line time as aware UTC (a naive time is taken as UTC); None stays None."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def service_logging() -> None:
    """Log lines of a long-running service on stderr at INFO; httpx's one line per request
    (the owner channel: each warehouse call of a process that reaches the store through its
    owner, and the listening probe) only as warnings."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)


class _Count(MofNCompleteColumn):
    """``done/total`` when the total is known, else just ``done`` (never ``done/?``)."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text(str(int(task.completed)), style="progress.download")
        return super().render(task)


def batch_progress() -> Progress:
    """The record counter of ``audit`` and ``produce`` (on stderr)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        _Count(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )


def input_options(
    files: list[Path],
    input_format: str | None,
    mapping: str | None,
    event_time: datetime | None,
    model: str | None,
    product: str | None,
) -> BatchOptions:
    """Check the input files exist and the input options are valid (``audit``, ``eval``,
    ``produce``); exit 2 otherwise."""
    from refusal_audit.audit.batch import BatchOptions

    for path in files:
        if not path.is_file():
            raise fail_usage(f"input file not found (or not a file): {path}")
    try:
        return BatchOptions.build(input_format, mapping, event_time, model, product)
    except ValueError as exc:
        raise fail_usage(str(exc)) from exc
