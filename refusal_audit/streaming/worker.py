"""The streaming worker: a faust-streaming app on the aiokafka transport (``kafka://``).

One agent (concurrency 1) consumes the input topic with ``noack_take(worker_take_max,
within=worker_take_within_seconds)``: a window closes when it holds ``worker_take_max``
records or after ``within`` seconds, whichever comes first; the shared pipeline then splits
it into audit batches per policy bundle by count and token budget. Each window is decoded,
redacted, pre-filtered, audited and stored by ``refusal_audit.audit.pipeline.AuditPipeline`` (the
batch-mode code path) into a ``ResultWriter`` (ClickHouse, then the output topics).

At-least-once: ``noack_take`` leaves acking to us, and we ack a window's events only after
the pipeline stored everything and ``TopicWriter.confirm`` saw every output acknowledged by
the broker, so faust commits no offset past an unstored event. If a window can be neither
stored nor dead-lettered (ClickHouse down after retries, broker refusing outputs), the
worker exits at once with status 70 without acking: a supervisor restarts it and the
window is redelivered; dedup on write makes the redelivery harmless. One window is in
flight at a time, and faust pauses fetching when its stream buffer is full (backpressure).

The pipeline does not run on faust's event loop: intake (decode, redaction, pre-filter) and
the local engine's audit are CPU work that would stall ``/health``, ``/metrics``, the lag
timer and aiokafka's heartbeats (a long window could cost a session timeout and a
rebalance). Each window's ``AuditPipeline.run`` is submitted to one long-lived event loop in
a thread of its own (``PipelineLoop``), created at start-up, and awaited from the agent.
The loop lives as long as the worker because the openai engine's ``AsyncOpenAI``/httpx
client binds to the loop it first runs on. The pipeline's own ``asyncio.to_thread`` sink
calls run in that loop's default executor.

On an embedded (chDB path) warehouse the worker owns the store's lock; it serves the store to
other commands (``refusal-audit sql``, ``query``, ...) over the owner channel, a
``POST /_owner/warehouse`` page on its web server (``refusal_audit.streaming.owner``).
"""

from __future__ import annotations

import asyncio
import logging
import logging.config
import os
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import faust
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from processors.adapters import DecodeOptions, SourceRecord
from refusal_audit.audit.batch import build_pipeline
from refusal_audit.audit.engine_setup import close_engine
from refusal_audit.audit.pipeline import AuditPipeline, InputSource, RunReport, Sink
from refusal_audit.config import ConfigError, Settings
from refusal_audit.streaming.owner import MAX_REQUEST_BYTES, UNAUTHORIZED, OwnerSlot
from refusal_audit.streaming.worker_detectors import DetectorRunner
from refusal_audit.streaming.worker_loop import PipelineLoop
from refusal_audit.streaming.worker_web import record_metrics
from streams.dead_letters import kafka_location, window_originals
from streams.logs import json_logging_config
from streams.membership import AssignmentWatch, group_instance_id, leave_group
from streams.metrics import WorkerMetrics
from streams.producer import TopicWriter, make_producer
from streams.result_writer import ResultWriter
from streams.topics import Topics, admin_client, require_topic
from warehouse.client import ping
from warehouse.private import make_private_dir
from warehouse.remote.server import OWNER_PATH
from warehouse.store import Warehouse

log = logging.getLogger("refusal_audit.worker")

EXIT_CRASH = 70

_T = TypeVar("_T")


@dataclass
class WorkerContext:
    """Everything the agent needs, built once at start-up by ``build_context``.

    ``pipeline_loop`` is the loop (in its own thread) every ``pipeline.run`` executes on;
    ``detectors`` runs the drift and policy-gap detectors on a timer; ``io_lock`` (faust's
    loop) serialises a window's storage with a detector pass; ``assignment`` logs why a
    start waits for partitions, and what each rebalance assigned; ``owner`` serves an
    embedded store to other processes (None for a server warehouse).
    """

    settings: Settings
    topics: Topics
    pipeline: AuditPipeline
    writer: TopicWriter
    warehouse: Warehouse
    metrics: WorkerMetrics
    decode: DecodeOptions
    next_offsets: dict[int, int]
    pipeline_loop: PipelineLoop
    detectors: DetectorRunner
    io_lock: asyncio.Lock
    assignment: AssignmentWatch
    owner: OwnerSlot | None = None


def faust_data_dir(cfg: Settings) -> Path:
    """Create (parents included) and return the worker's faust directory, ``data_dir/faust``.

    faust keeps its table state there and fails deep inside its start-up when the directory
    is missing, so it is made before anything else. Raises ``ConfigError`` naming the path
    when it cannot be created (read-only file system, a file in the way, no permission).
    """
    path = cfg.data_dir / "faust"
    try:
        make_private_dir(path, "worker's data directory")  # 0700 (warehouse.private)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the worker's data directory {path.resolve()} "
            f"(setting data_dir): {exc.strerror or exc}"
        ) from exc
    return path


def worker_instance_id(cfg: Settings) -> str | None:
    """The worker's ``group.instance.id`` from its settings (``streams.membership``)."""
    return group_instance_id(cfg.kafka_static_membership, cfg.kafka_group_instance_id, cfg.data_dir)


def check_web_port(cfg: Settings) -> None:
    """Fail early, with ``ConfigError``, when the worker's web port cannot be bound (faust
    would only find out after joining the consumer group)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((cfg.worker_web_host, cfg.worker_web_port))
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {cfg.worker_web_host}:{cfg.worker_web_port} "
                f"(worker_web_host/worker_web_port): {exc.strerror or exc}"
            ) from exc


def build_context(cfg: Settings, wrap_sink: Callable[[Sink], Sink] | None = None) -> WorkerContext:
    """Check the input topic, open the warehouse and build the pipeline.

    ``wrap_sink`` wraps the warehouse (tests use it to inject storage faults). Starts the
    ``PipelineLoop`` thread last. Raises ``streams.topics.TopicError`` (no broker / no input
    topic), ``WarehouseError`` and ``ConfigError`` (also for a data directory that cannot be
    created).
    """
    faust_data_dir(cfg)
    check_web_port(cfg)
    topics = Topics.from_prefix(cfg.kafka_topic_prefix)
    admin = admin_client(cfg.kafka())
    for name in (
        topics.input,
        topics.assessments,
        topics.review_queue,
        topics.policy_gap_alerts,
        topics.drift_alerts,
        topics.dead_letters,
    ):
        require_topic(admin, name)
    metrics = WorkerMetrics()
    # an embedded store: owned here, or followed through the process that owns it (e.g. the
    # review server), and taken over when that process stops
    store = Warehouse.open(cfg)
    owner = OwnerSlot.attach(cfg, store.client, cfg.worker_web_host, cfg.worker_web_port)
    store.on_retry = lambda table: metrics.warehouse_retries.labels(table).inc()
    writer = TopicWriter(make_producer(cfg.kafka()))
    inner: Sink = wrap_sink(store) if wrap_sink is not None else store
    sink = ResultWriter(
        inner,
        writer,
        topics,
        lambda table, seconds: metrics.warehouse_write_seconds.labels(table).observe(seconds),
    )
    pipeline = build_pipeline(cfg, sink)
    # One flush (one insert per table) per window: a window of W records holds at most 2W
    # pending rows (an event row or a dead letter per record, an assessment per refusal),
    # and its size already bounds the memory. Each chDB insert costs ~5-20 ms whatever its
    # size, so flushing mid-window would only add inserts.
    pipeline.flush_every = max(pipeline.flush_every, 2 * cfg.worker_take_max + 1)
    decode = DecodeOptions(max_record_bytes=cfg.max_record_bytes, max_text_chars=cfg.max_text_chars)
    detectors = DetectorRunner(cfg, store, topics, metrics, pipeline)
    detectors.reconcile()
    return WorkerContext(
        cfg,
        topics,
        pipeline,
        writer,
        store,
        metrics,
        decode,
        {},
        PipelineLoop(),
        detectors,
        asyncio.Lock(),
        AssignmentWatch(
            topics.input,
            cfg.kafka_consumer_group,
            worker_instance_id(cfg),
            cfg.kafka_session_timeout_seconds,
        ),
        owner,
    )


def window_records(events: Sequence[Any]) -> list[SourceRecord]:
    """faust events to source records (topic, ``partition P offset O``, raw value bytes);
    a null value (tombstone) becomes ``b""`` with ``tombstone`` set."""
    return [
        SourceRecord(
            e.message.topic,
            kafka_location(e.message.partition, e.message.offset),
            e.message.value if e.message.value is not None else b"",
            tombstone=e.message.value is None,
        )
        for e in events
    ]


def window_partitions(events: Sequence[Any]) -> list[dict[str, int]]:
    """Per partition of a window of faust events, its offset range and record count.

    Returns ``[{"partition", "first_offset", "last_offset", "records"}, ...]`` sorted by
    partition (first/last are the lowest/highest offset of that partition in the window);
    an empty list for an empty window.
    """
    ranges: dict[int, dict[str, int]] = {}
    for e in events:
        partition, offset = e.message.partition, e.message.offset
        seen = ranges.get(partition)
        if seen is None:
            ranges[partition] = {
                "partition": partition,
                "first_offset": offset,
                "last_offset": offset,
                "records": 1,
            }
        else:
            seen["first_offset"] = min(seen["first_offset"], offset)
            seen["last_offset"] = max(seen["last_offset"], offset)
            seen["records"] += 1
    return [ranges[p] for p in sorted(ranges)]


def describe_window(topic: str, partitions: Sequence[dict[str, int]]) -> str:
    """A human-readable window, e.g. ``t [partition 0 offsets 5-9 (5 records), ...]``."""
    parts = ", ".join(
        f"partition {p['partition']} offsets {p['first_offset']}-{p['last_offset']} "
        f"({p['records']} records)"
        for p in partitions
    )
    return f"{topic} [{parts}]"


def window_topic(events: Sequence[Any]) -> str:
    """The topic of a window's records (comma-separated if, unexpectedly, several)."""
    return ",".join(sorted({e.message.topic for e in events}))


def crash(reason: str, exc: BaseException, events: Sequence[Any] = ()) -> None:
    """Log and exit at once (status 70) without acking: the window will be redelivered.

    The CRITICAL log line names the window (``events``): its topic and, for every
    partition, the first and last offset and the record count (also as the JSON fields
    ``topic`` and ``partitions``, see ``window_partitions``). Does not return.
    """
    topic, partitions = window_topic(events), window_partitions(events)
    log.critical(
        "stopping without acking the window %s: %s: %s",
        describe_window(topic, partitions),
        reason,
        exc,
        exc_info=exc,
        extra={"topic": topic, "partitions": partitions, "records": len(events)},
    )
    logging.shutdown()
    sys.stderr.flush()
    os._exit(EXIT_CRASH)


async def process_window(ctx: WorkerContext, events: Sequence[Any]) -> RunReport:
    """Audit and store one window; return its report. Crashes the process when it cannot.

    The pipeline runs on ``ctx.pipeline_loop`` (not the calling loop, which stays free for
    the web views, timers and heartbeats); the outputs are then confirmed on the broker.
    Only after both succeed does this return, so the caller may ack ``events``.
    """
    records = window_records(events)
    if isinstance(ctx.pipeline.sink, ResultWriter):  # dead-letter copies keep key and headers
        ctx.pipeline.sink.use_originals(window_originals(events))
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        async with ctx.io_lock:
            report = await ctx.pipeline_loop.run(
                ctx.pipeline.run([InputSource(records, "jsonl", ctx.decode)])
            )
            await asyncio.to_thread(ctx.writer.confirm)
    except Exception as exc:  # any failure here must stop the worker unacked
        crash("window could not be stored or dead-lettered", exc, events)
        raise  # unreachable; keeps type checkers honest
    ctx.metrics.window_seconds.observe(loop.time() - started)
    record_metrics(ctx.metrics, report)
    for e in events:
        ctx.next_offsets[e.message.partition] = e.message.offset + 1
    log.info(
        "window stored",
        extra={
            "topic": window_topic(events),
            "partitions": window_partitions(events),
            "records": report.records,
            "refusals": report.refusals,
            "dead_letters": len(report.failures),
            "batches": report.batches,
            "identical_copies": report.identical_copies,
            "refusal_disagreements": sum(report.disagreements.values()),
            "encoder_decided": report.encoder_decided,
        },
    )
    if report.retired:
        log.warning(
            "%d event(s) stored as refusals were judged non-refusals this time (the "
            "pre-filter or its settings changed); their assessments no longer count",
            len(report.retired),
            extra={"log_ids": report.retired[:100]},
        )
    for failure in report.failures:
        log.warning(
            "dead letter: %s",
            failure.reason,
            extra={
                "topic": failure.source,
                "location": failure.location,
                "reason_code": failure.reason_code,
            },
        )
    return report


def create_app(ctx: WorkerContext) -> faust.App:
    """The faust app: the audit agent, ``/health``, ``/metrics``, the owner channel (when
    ``ctx.owner``), the detector timer (every ``alerts_interval_seconds``) and a
    consumer-lag timer."""
    cfg = ctx.settings
    app = _faust_app(ctx)
    topic_name = ctx.topics.input
    topic = app.topic(
        topic_name,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
    )

    @app.agent(topic, concurrency=1)
    async def audit_refusals(stream: Any) -> None:
        async for events in stream.noack_take(
            cfg.worker_take_max, within=cfg.worker_take_within_seconds
        ):
            await process_window(ctx, events)
            for event in events:
                await stream.ack(event)

    _add_pages(app, ctx)

    @app.timer(interval=cfg.alerts_interval_seconds)  # type: ignore[untyped-decorator]
    async def detect() -> None:
        await ctx.detectors.tick(is_leader(app, ctx.topics.input), ctx.io_lock)

    @app.on_partitions_assigned.connect
    def on_assigned(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        assigned = args[0] if args else kwargs.get("assigned", ())
        ctx.assignment.assigned(sorted(tp.partition for tp in assigned if tp.topic == topic_name))

    @app.timer(interval=5.0)  # type: ignore[untyped-decorator]
    async def update_lag() -> None:
        consumer = app.consumer
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            if highwater is None:
                continue
            position = ctx.next_offsets.get(tp.partition)
            if position is None:  # nothing processed yet here: the fetch position
                position = await consumer.position(tp) or 0
            ctx.metrics.consumer_lag.labels(str(tp.partition)).set(max(0, highwater - position))

    return app


def _faust_app(ctx: WorkerContext) -> faust.App:
    """The faust app of the worker's settings: the consumer group (a static member:
    ``ctx.assignment.instance``), raw keys and values, no topic declared, the web server
    on ``worker_web_host:worker_web_port``."""
    cfg = ctx.settings
    app = faust.App(
        cfg.kafka_consumer_group,
        broker=f"kafka://{cfg.kafka_bootstrap_servers}",
        store="memory://",
        key_serializer="raw",
        value_serializer="raw",
        topic_allow_declare=False,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=1.0,
        web_enabled=True,
        web_bind=cfg.worker_web_host,
        web_port=cfg.worker_web_port,
        autodiscover=False,
        datadir=str(faust_data_dir(cfg)),
        consumer_group_instance_id=ctx.assignment.instance,
        broker_session_timeout=cfg.kafka_session_timeout_seconds,
        broker_request_timeout=max(90.0, cfg.kafka_session_timeout_seconds + 30.0),
        web_application_options={"client_max_size": MAX_REQUEST_BYTES},
    )
    return app


def _add_pages(app: faust.App, ctx: WorkerContext) -> None:
    """``/metrics``, ``/health`` and, when ``ctx.owner``, the owner channel's page."""

    @app.page("/metrics")
    async def metrics_view(web: Any, request: Any) -> Any:
        body = generate_latest(ctx.metrics.registry)
        return web.bytes(body, content_type=CONTENT_TYPE_LATEST.split(";")[0])

    @app.page("/health")
    async def health_view(web: Any, request: Any) -> Any:
        status = await asyncio.to_thread(check_health, ctx)
        return web.json(status, status=200 if status["ok"] else 503)

    if ctx.owner is not None:
        owner: OwnerSlot = ctx.owner

        @app.page(OWNER_PATH)
        class OwnerView(faust.web.View):
            async def post(self, request: Any) -> Any:
                authorization = request.headers.get("Authorization")
                if owner.owns and not owner.authorized(authorization):  # body left unread
                    status, body = 401, UNAUTHORIZED
                else:
                    status, body = await owner.handle(authorization, await request.read())
                return self.bytes(body, content_type="application/json", status=status)


def is_leader(app: faust.App, input_topic: str) -> bool:
    """Whether this worker owns partition 0 of the input topic (it runs the detectors)."""
    return any(tp.topic == input_topic and tp.partition == 0 for tp in app.consumer.assignment())


def check_health(ctx: WorkerContext) -> dict[str, Any]:
    """Broker and warehouse reachability (blocking; run off the loop)."""
    status: dict[str, Any] = {}
    try:
        topics = admin_client(ctx.settings.kafka()).list_topics(timeout=3)
        status["broker"] = {"ok": ctx.topics.input in topics.topics}
    except Exception as exc:  # reported, not raised
        status["broker"] = {"ok": False, "error": str(exc)}
    try:
        ping(ctx.warehouse.client)
        status["warehouse"] = {"ok": True}
    except Exception as exc:  # reported, not raised
        status["warehouse"] = {"ok": False, "error": str(exc)}
    status["ok"] = all(v["ok"] for v in status.values() if isinstance(v, dict))
    return status


def run_worker(
    cfg: Settings, loglevel: str = "info", wrap_sink: Callable[[Sink], Sink] | None = None
) -> None:
    """Build the context and run the worker until it is stopped (blocks; does not return)."""
    logging.config.dictConfig(json_logging_config(loglevel))
    ctx = build_context(cfg, wrap_sink)
    app = create_app(ctx)
    log.info(
        "worker starting",
        extra={
            "topic": ctx.topics.input,
            "group": cfg.kafka_consumer_group,
            "engine": ctx.pipeline.engine.name,
        },
    )
    ctx.assignment.start()
    if ctx.owner is not None:
        ctx.owner.announce_when_listening()
    worker = faust.Worker(
        app,
        loglevel=loglevel,
        quiet=True,
        redirect_stdouts=False,
        override_logging=False,
    )
    try:
        worker.execute_from_commandline()
    finally:  # close the engine's client on the loop it ran on, then stop that loop
        if ctx.owner is not None:  # other commands stop coming here first
            ctx.owner.close()
        engine = ctx.pipeline.engine
        ctx.pipeline_loop.close(lambda: close_engine(engine))
        instance = ctx.assignment.instance
        if instance is not None and ctx.assignment.joined:  # hand the partitions over now
            asyncio.run(
                leave_group(cfg.kafka_bootstrap_servers, cfg.kafka_consumer_group, instance)
            )
