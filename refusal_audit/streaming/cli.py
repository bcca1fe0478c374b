"""The scale-out commands (issue 14): ``refusal-audit worker --outputs topics`` (a
transactional worker: results to topics, exactly once per window) and ``refusal-audit
sink`` (the result topics into the warehouse). docs/streaming.md, "Scale-out".

Exit codes: 0 stopped by SIGTERM/SIGINT (the windows or block in hand are finished or left
uncommitted: they are consumed again); 2 usage or configuration error, a topic missing, the
worker's web port taken; 70 the producer was fenced or failed fatally, an unexpected error
in the pipeline, or the warehouse failed after its retries (nothing of the windows or block
in hand was committed).
"""

from __future__ import annotations

import gc
import logging
import logging.config
import os
import sys
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from refusal_audit.cli_common import (
    EXIT_FAILURES,
    batch_progress,
    console,
    err,
    fail_usage,
    input_options,
    settings,
)
from refusal_audit.config import ConfigError, Settings
from refusal_audit.output import OutputFormat, render
from streams.clients import KafkaException
from warehouse.client import WarehouseError

EXIT_CRASH = 70


def _stop_on_signals(name: str) -> threading.Event:
    """An event set by the first SIGTERM/SIGINT (the second one ends the process at once)."""
    from streams.group_consumer import stop_on_signals

    stop = threading.Event()
    stop_on_signals(stop.set, name, logging.getLogger("refusal_audit"), "stopping")
    return stop


def _logging(loglevel: str) -> None:
    from streams.logs import json_logging_config

    logging.config.dictConfig(json_logging_config(loglevel.upper()))


def run_topics_worker(cfg: Settings, loglevel: str) -> None:
    """Run a transactional worker until a signal; exit 70 when it cannot go on (a fenced or
    failed producer, or an unexpected error in the pipeline: nothing of the windows in hand
    is committed, they are consumed again)."""
    from refusal_audit.streaming.transactional_worker import TransactionalWorker
    from refusal_audit.streaming.worker_web import WorkerWeb
    from streams.metrics import WorkerMetrics
    from streams.topics import TopicError

    _logging(loglevel)
    metrics = WorkerMetrics()
    started: list[TransactionalWorker] = []  # /health answers "starting" until joined

    def health() -> dict[str, object]:
        return started[0].health() if started else {"ok": False, "starting": True}

    try:  # the port first: a worker that cannot serve it never joins the group
        web = WorkerWeb(cfg.worker_web_host, cfg.worker_web_port, metrics, health)
    except OSError as exc:
        raise fail_usage(
            f"worker not started: cannot serve /metrics on {cfg.worker_web_host}:"
            f"{cfg.worker_web_port} ({exc}); give each worker on a host its own "
            "REFUSAL_AUDIT_WORKER_WEB_PORT (0: any free port)"
        ) from exc
    try:
        worker = TransactionalWorker.start(cfg, metrics=metrics)
    except (TopicError, ConfigError) as exc:
        web.close()
        raise fail_usage(f"worker not started: {exc}") from exc
    except KafkaException as exc:
        web.close()
        raise fail_usage(f"worker not started: the broker refused its producer: {exc}") from exc
    started.append(worker)
    # what start-up built (bundles, clause indexes, compiled scanners, modules) lives as long
    # as the process: frozen out of the cyclic collector's sight, its full collections do not
    # walk it again for every window (~5-10% of the CPU per event, shared 2-core machine)
    gc.freeze()
    logging.getLogger("refusal_audit.worker").info(
        "metrics and health on http://%s:%d/metrics", cfg.worker_web_host, web.port
    )
    stop = _stop_on_signals("worker")
    crashed = False
    try:
        stats = worker.run(stop)
    except Exception as exc:  # TransactionFatal, or a bug: nothing in hand was committed
        logging.getLogger("refusal_audit.worker").exception("worker stopping")
        crashed = True
        err.print(f"[red]worker: stopping, nothing of the windows in hand committed:[/red] "
                  f"{escape(str(exc) or type(exc).__name__)}")  # fmt: skip
        raise typer.Exit(EXIT_CRASH) from exc
    finally:
        web.close()
        worker.close()
        if crashed:
            _exit_if_stuck(worker, EXIT_CRASH)
    err.print(f"worker: {stats.windows} window(s), {stats.records} record(s) committed, "
              f"{stats.aborted} aborted and redone")  # fmt: skip
    _exit_if_stuck(worker, 0)


def _exit_if_stuck(worker: Any, code: int) -> None:
    """End the process with ``code`` at once when an abandoned producer is still inside a
    librdkafka call (``streams.txn_producer``): destroying it at interpreter exit would wait
    for that call for ever."""
    if worker.stream.txn.stuck():
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)


def detector_pass(cfg: Settings, store: Any) -> Callable[[datetime], object]:
    """A function running one detector pass (``refusal_audit.alerts.publisher.run_detectors``) that
    publishes new drift and policy-gap alerts to their topics and stores them, then
    publishes each policy bundle's trend baseline to ``drift-baselines`` for the workers'
    batch summaries (``streams.baselines``); alerts that reached the topics but not the
    table are stored first (at start-up). Raises ``KafkaException`` when the alert topics
    cannot be read."""
    from refusal_audit.alerts.drift import DriftConfig, bundle_baselines
    from refusal_audit.alerts.publisher import AlertPublisher, run_detectors
    from streams.alert_log import read_alerts
    from streams.baselines import BaselinePublisher
    from streams.producer import TopicWriter, make_producer
    from streams.topics import Topics

    topics = Topics.from_prefix(cfg.kafka_topic_prefix)
    writer = TopicWriter(make_producer(cfg.kafka()))
    publisher = AlertPublisher(
        store, writer, topics,
        lambda: read_alerts(cfg.kafka(), topics.alert_topics()),
    )  # fmt: skip
    publisher.recover()
    baselines = BaselinePublisher(writer, topics.drift_baselines)
    drift = DriftConfig.from_settings(cfg)

    def one_pass(now: datetime) -> object:
        result = run_detectors(cfg, publisher, now=now)
        baselines.publish(bundle_baselines(store.client, store.database, drift, now=now), now)
        return result

    return one_pass


def sink(
    max_rows: int = typer.Option(
        50_000, "--max-rows", min=1, help="Largest block (records over all result topics)."
    ),
    max_wait: float = typer.Option(
        2.0, "--max-wait", min=0.05, help="Seconds a block waits for more after its first record."
    ),
    owner_port: int = typer.Option(
        0,
        "--owner-port",
        min=0,
        max=65535,
        help="Loopback port serving an embedded store to the other commands (0: any free one).",
    ),
    loglevel: str = typer.Option("info", help="Log level (JSON lines on stderr)."),
) -> None:
    """Load the transactional workers' result topics (stored events, assessments, audit
    batches, dead letters; read_committed) into the warehouse in large deduplicated blocks;
    offsets are committed after each block is stored."""
    from refusal_audit.streaming.owner import OwnerServer
    from refusal_audit.streaming.warehouse_sink import WarehouseSink
    from streams.blocks import BlockLimits
    from streams.topics import TopicError
    from warehouse.client import WarehouseError
    from warehouse.store import Warehouse

    cfg = settings()
    _logging(loglevel)
    try:
        # in this process, never through another owner: one sink per embedded store (a
        # second one would join the group under the same instance name and fence the first)
        store = Warehouse.open(cfg, via_owner=False)
    except WarehouseError as exc:
        raise fail_usage(f"cannot open the warehouse (one sink per embedded store): {exc}") from exc
    owner = None
    try:
        try:
            owner = OwnerServer.start(cfg, store, owner_port)
            loader = WarehouseSink.start(cfg, store, BlockLimits(max_rows=max_rows,
                                                                 max_wait=max_wait))  # fmt: skip
            loader.detectors = detector_pass(cfg, store)
            loader.detector_interval = cfg.alerts_interval_seconds
        except (TopicError, WarehouseError, OSError, KafkaException) as exc:
            raise fail_usage(f"sink not started: {exc}") from exc
        stop = _stop_on_signals("sink")
        try:
            stats = loader.run(stop)
        except (WarehouseError, KafkaException) as exc:
            err.print(f"[red]sink: stopping, the block in hand is not committed:[/red] "
                      f"{escape(str(exc))}")  # fmt: skip
            raise typer.Exit(EXIT_CRASH) from exc
        finally:
            loader.close()
        rows = ", ".join(f"{t} {n}" for t, n in sorted(stats.rows.items()))
        err.print(f"sink: {stats.blocks} block(s) stored ({rows or 'no rows'})")
    finally:
        if owner is not None:
            owner.close()
        store.close()


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


def refresh_daily(
    max_days: int = typer.Option(0, help="recompute at most this many days (0: every dirty day)"),
) -> None:
    """Recompute the daily aggregates' dirty days (warehouse.daily; the writers do it too,
    a bounded number per stored block, and queries compute dirty days live meanwhile)."""
    from warehouse import daily
    from warehouse.connect import connect

    cfg = settings()
    password = cfg.warehouse_password.get_secret_value() if cfg.warehouse_password else None
    try:
        client = connect(cfg.resolved_warehouse_dsn, cfg.warehouse_database, password)
        if max_days:
            days = daily.refresh(client, cfg.warehouse_database, max_days)
        else:
            days = daily.refresh_all(client, cfg.warehouse_database)
    except WarehouseError as exc:
        raise fail_usage(f"cannot refresh the daily aggregates: {exc}") from exc
    console.print(f"recomputed {len(days)} day(s)" + (f": {days[0]} .. {days[-1]}" if days else ""))


topics_app = typer.Typer(help="Provision and list the Kafka topics.", no_args_is_help=True)


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
    if outputs not in ("warehouse", "topics"):
        raise fail_usage(f"--outputs must be warehouse or topics, not {outputs!r}")
    cfg = settings()
    if outputs == "topics":
        from refusal_audit.streaming.cli import run_topics_worker

        run_topics_worker(cfg, loglevel)
        return
    # the faust worker, imported only for it: a topics worker never loads faust
    from refusal_audit.streaming.worker import run_worker
    from streams.topics import TopicError

    try:
        run_worker(cfg, loglevel)
    except (TopicError, WarehouseError, ConfigError) as exc:
        raise fail_usage(f"worker not started: {exc}") from exc


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
