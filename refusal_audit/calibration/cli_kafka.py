"""``refusal-audit calibrate consume|produce`` and ``refusal-audit ab consume|produce``: the
Kafka paths of refusal-style calibration (``refusal_audit.calibration.consumers``; registered on
``calibration.cli.calibrate_app`` and ``calibration.cli.ab_app`` when ``refusal_audit.cli``
imports this module).

Exit codes of ``consume``: 0 stopped (SIGTERM/SIGINT, ``--idle-timeout``,
``--max-messages``) with every handled message committed; 2 usage or configuration error
(a topic missing, the broker unreachable at the start, the warehouse cannot be opened, an
unknown engine); 70 a batch could not be stored after the retries, or the broker did not
confirm its outputs or dead letters, or its offsets could not be committed: nothing of that
batch was committed (run it under a supervisor that restarts it; the batch is redelivered).
``produce``: 0 every line sent and delivered; 1 some lines were not valid (listed, not sent)
or not delivered; 2 usage error (a file or the topic missing).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from refusal_audit.calibration.cli import ab_app, calibrate_app
from refusal_audit.cli_common import (
    EXIT_FAILURES,
    console,
    err,
    fail_usage,
    service_logging,
    settings,
)
from refusal_audit.config import ConfigError, Settings

if TYPE_CHECKING:
    from refusal_audit.calibration.consumers import WarehouseConsumer
    from refusal_audit.streaming.owner import OwnerServer
    from warehouse.store import Warehouse

_BATCH_WAIT = typer.Option(
    1.0, "--batch-wait", min=0.05, help="Seconds a batch waits for more messages."
)
_IDLE = typer.Option(
    None,
    "--idle-timeout",
    min=0.0,
    help="Stop (exit 0) after this many seconds without a message (default: run until stopped).",
)
_MAX = typer.Option(None, "--max-messages", min=1, help="Stop (exit 0) after this many messages.")
_OWNER_PORT = typer.Option(
    0,
    "--owner-port",
    min=0,
    max=65535,
    help="Loopback port serving an embedded warehouse to the other commands (0: any free port).",
)
_ATTEMPTS = typer.Option(
    3, "--store-attempts", min=1, max=20, help="Attempts of each warehouse call before exit 70."
)


def _open(cfg: Settings, owner_port: int) -> tuple[Warehouse, OwnerServer | None]:
    from refusal_audit.streaming.owner import OwnerServer
    from warehouse.client import WarehouseError
    from warehouse.store import Warehouse

    try:
        store = Warehouse.open(cfg)
    except WarehouseError as exc:
        raise fail_usage(f"cannot open the warehouse: {exc}") from exc
    try:
        return store, OwnerServer.start(cfg, store, owner_port)
    except (WarehouseError, OSError) as exc:
        store.close()
        raise fail_usage(f"cannot serve the embedded warehouse: {exc}") from exc


def _topics(cfg: Settings, roles: list[str]) -> None:
    from refusal_audit.calibration.consumers import check_topics
    from streams.topics import TopicError

    try:
        check_topics(cfg, roles)
    except TopicError as exc:
        raise fail_usage(str(exc)) from exc


def _consume(name: str, loop: WarehouseConsumer) -> None:
    """Run ``loop`` with SIGTERM/SIGINT stopping it after the message in hand (a second
    signal ends the process at once, uncommitted); exit 70 on ``ConsumeError``."""
    from refusal_audit.calibration.consumers import EXIT_CRASH, ConsumeError
    from streams.group_consumer import stop_on_signals

    stop_on_signals(loop.stop, name, logging.getLogger("refusal_audit.calibrate"))
    try:
        stats = loop.run()
    except ConsumeError as exc:
        s = loop.stats
        err.print(f"[red]{name}: stopped without committing the batch in hand:[/red] "
                  f"{escape(str(exc))} ({s.messages} message(s) committed before)")  # fmt: skip
        raise typer.Exit(EXIT_CRASH) from exc
    codes = ", ".join(f"{c} {n}" for c, n in sorted(stats.codes.items()))
    again = (f"{stats.republished} already stored (published again), "
             if name.startswith("calibrate") else "")  # fmt: skip
    err.print(
        f"{name}: {stats.messages} message(s) committed: {stats.stored} stored, "
        f"{again}{stats.dead_letters} dead letter(s){f' ({codes})' if codes else ''}"
    )


@calibrate_app.command("consume")
def calibrate_consume(
    engine: str | None = typer.Option(
        None, "--engine", help="Variant engine local|openai (default: calibrate_engine)."
    ),
    batch_size: int = typer.Option(
        10, "--batch-size", min=1, max=1000, help="Most requests per batch (one commit each)."
    ),
    batch_wait: float = _BATCH_WAIT,
    idle_timeout: float | None = _IDLE,
    max_messages: int | None = _MAX,
    owner_port: int = _OWNER_PORT,
    store_attempts: int = _ATTEMPTS,
) -> None:
    """Consume calibration requests from <prefix>calibrate.requests (consumer group
    <prefix>calibrate): calibrate each with the configured engine and suite, store the run
    and publish it on <prefix>calibrate.runs, then commit (at least once; a redelivered
    request keeps its run). Bad requests go to <prefix>dead-letters with their reason."""
    from refusal_audit.calibration.calibrator import Calibrator
    from refusal_audit.calibration.consumers import CalibrateConsumer, LoopOptions

    service_logging()
    cfg = settings()
    _topics(cfg, ["calibrate_requests", "calibrate_runs", "dead_letters"])
    try:
        calibrator = Calibrator(cfg, engine)
    except ConfigError as exc:
        raise fail_usage(f"calibrate consume: {exc}") from exc
    try:
        store, owner = _open(cfg, owner_port)
        try:
            options = LoopOptions(batch_size, batch_wait, idle_timeout, max_messages,
                                  store_attempts)  # fmt: skip
            _consume("calibrate consume", CalibrateConsumer(cfg, store, calibrator, options))
        finally:
            if owner is not None:
                owner.close()
            store.close()
    finally:
        calibrator.close()


@ab_app.command("consume")
def ab_consume(
    batch_size: int = typer.Option(
        500, "--batch-size", min=1, max=100_000, help="Most events per batch (one insert)."
    ),
    batch_wait: float = _BATCH_WAIT,
    idle_timeout: float | None = _IDLE,
    max_messages: int | None = _MAX,
    owner_port: int = _OWNER_PORT,
    store_attempts: int = _ATTEMPTS,
) -> None:
    """Consume the product's A/B events from <prefix>ab.events (consumer group <prefix>ab)
    and store them in the warehouse's ab_event_log table, one insert per batch, then commit (at
    least once; a redelivered event counts once). Invalid events go to <prefix>dead-letters
    with their reason."""
    from refusal_audit.calibration.consumers import ABConsumer, LoopOptions

    service_logging()
    cfg = settings()
    _topics(cfg, ["ab_events", "dead_letters"])
    store, owner = _open(cfg, owner_port)
    try:
        options = LoopOptions(batch_size, batch_wait, idle_timeout, max_messages, store_attempts)
        _consume("ab consume", ABConsumer(cfg, store, options))
    finally:
        if owner is not None:
            owner.close()
        store.close()


def _produce(files: list[Path], role: str, raw: bool, what: str) -> None:
    from refusal_audit.calibration.produce_files import event_key, produce_file, request_key
    from streams.producer import TopicWriter, make_producer
    from streams.topics import Topics

    for path in files:
        if not path.is_file():
            raise fail_usage(f"input file not found (or not a file): {path}")
    cfg = settings()
    _topics(cfg, [role])
    topic = getattr(Topics.from_prefix(cfg.kafka_topic_prefix), role)
    key_of = request_key if role == "calibrate_requests" else event_key
    writer = TopicWriter(make_producer(cfg.kafka()))
    failed = False
    for path in files:
        try:
            report = produce_file(path, writer, topic, key_of, raw=raw)
        except OSError as exc:
            raise fail_usage(f"cannot read {path}: {exc}") from exc
        console.print(
            f"{escape(str(path))}: sent {report.sent} {what} to {topic}, delivered "
            f"{report.delivered}, undelivered {report.undelivered}, rejected {len(report.rejected)}"
        )
        for lineno, reason in report.rejected[:20]:
            err.print(f"[yellow]{escape(str(path))}:{lineno}:[/yellow] {escape(reason)} (not sent)")
        if len(report.rejected) > 20:
            err.print(f"... and {len(report.rejected) - 20} more invalid lines")
        for error in report.delivery_errors:
            err.print(f"[red]delivery failed:[/red] {escape(error)}")
        failed = failed or bool(report.rejected or report.undelivered)
    if failed:
        raise typer.Exit(EXIT_FAILURES)


@calibrate_app.command("produce")
def calibrate_produce(
    files: list[Path] = typer.Argument(..., metavar="FILE", help="JSONL of calibration requests."),
    raw: bool = typer.Option(
        False, "--raw", help="Send invalid lines too (unkeyed), for the consumer to dead-letter."
    ),
) -> None:
    """Send each line of FILE (a CalibrationRequest JSON object) to <prefix>calibrate.requests
    byte for byte, keyed by its log id; invalid lines are listed and not sent."""
    _produce(files, "calibrate_requests", raw, "request(s)")


@ab_app.command("produce")
def ab_produce(
    files: list[Path] = typer.Argument(..., metavar="FILE", help="JSONL of A/B events."),
    raw: bool = typer.Option(
        False, "--raw", help="Send invalid lines too (unkeyed), for the consumer to dead-letter."
    ),
) -> None:
    """Send each line of FILE (an A/B event JSON object) to <prefix>ab.events byte for byte,
    keyed by its event id; invalid lines are listed and not sent."""
    _produce(files, "ab_events", raw, "event(s)")
