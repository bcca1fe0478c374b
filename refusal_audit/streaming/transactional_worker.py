"""The transactional audit worker: windows in, results out, exactly once per window (issue 14).

One worker process: consume a window of refusal events (``streams.transactional``), run it
through the shared ``AuditPipeline`` (the batch-mode code path) into :class:`TopicOutputs`,
then commit the window's outputs and its input offsets in one Kafka transaction. It needs no
warehouse: ``refusal-audit sink`` loads the result topics into ClickHouse. Any number of
workers, on one host or many, share the input topic's partitions in one consumer group.

Pipelining: the pipeline runs on a ``PipelineLoop`` (an event loop in its own thread, as in
the faust worker; the openai engine's client keeps that one loop). This module's thread
polls and commits; up to ``worker_windows_in_flight`` windows are in hand at once: while the
oldest is audited (or waits to commit), the next ones are consumed, decoded and audited on
the loop, each into its own :class:`TopicOutputs`, and the pipeline keeps up to
``openai_max_concurrency`` LLM batches in flight over all of them. Windows commit strictly
in order, each in its own transaction, so offsets only advance past events whose results
are committed. Aborted windows (a failed transaction, a rebalance before the commit,
``before_commit`` raising in tests) leave nothing visible; the consumer is rewound to the
committed offsets and the windows in hand behind the aborted one are dropped: all are
consumed again. A fenced or fatal producer stops the worker (exit status 70 from the CLI).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from processors.adapters import DecodeOptions, SourceRecord
from refusal_audit.audit.batch import build_pipeline
from refusal_audit.audit.engine_setup import close_engine
from refusal_audit.audit.pipeline import AuditPipeline, InputSource, RunReport
from refusal_audit.config import Settings
from refusal_audit.streaming.window_outputs import TopicOutputs
from refusal_audit.streaming.worker_loop import PipelineLoop
from refusal_audit.streaming.worker_web import record_metrics
from streams.baselines import BaselineReader
from streams.dead_letters import kafka_location, original_record
from streams.membership import group_instance_id, leave_group
from streams.metrics import WorkerMetrics
from streams.topics import Topics, admin_client, await_broker, existing_topics, require_topics
from streams.transactional import (
    StreamConfig,
    TransactionalStream,
    Window,
    WindowAborted,
)

log = logging.getLogger("refusal_audit.worker")


def worker_identity(cfg: Settings) -> str:
    """This worker's stable instance name: ``kafka_group_instance_id``, else derived from
    the host and ``data_dir`` (``streams.membership.group_instance_id``). Its transactional
    id is ``<consumer group>.<instance>``: a restarted worker fences its predecessor; two
    live workers need distinct names (distinct data directories, or the setting)."""
    name = group_instance_id(True, cfg.kafka_group_instance_id, cfg.data_dir)
    return name or f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class WorkerStats:
    """What a worker did: windows committed and aborted, records, output messages."""

    windows: int = 0
    aborted: int = 0
    records: int = 0
    messages: int = 0
    reports: list[RunReport] = field(default_factory=list, repr=False)


@dataclass
class _InHand:
    """A window read and submitted to the pipeline loop: its outputs collect apart."""

    window: Window
    outputs: TopicOutputs
    report: concurrent.futures.Future[RunReport]


class TransactionalWorker:
    """One worker (module docstring). Build with :meth:`start`; :meth:`run` until ``stop``;
    :meth:`close`. Raises ``TopicError`` (a topic missing), ``ConfigError`` and
    ``KafkaException`` from :meth:`start`."""

    def __init__(
        self,
        cfg: Settings,
        pipeline: AuditPipeline,
        topics: Topics,
        stream: TransactionalStream,
        decode: DecodeOptions,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.cfg = cfg
        self.pipeline = pipeline
        self.topics = topics
        self.stream = stream
        self.decode = decode
        self.depth = cfg.worker_windows_in_flight
        self.metrics = metrics or WorkerMetrics()
        self.loop = PipelineLoop("refusal-audit-tx-pipeline")
        self.stats = WorkerStats()
        self.last_commit = time.monotonic()
        self._lag_read = 0.0
        self._lag_labels: set[str] = set()  # partitions the lag gauge shows
        self._unreadable_logged = 0.0  # when the unreadable-offsets warning was last logged
        self.lag_total = 0  # over the assigned partitions when last read; -1 unknown
        self.baselines: BaselineReader | None = None
        self._baselines_read = 0.0

    @classmethod
    def start(
        cls,
        cfg: Settings,
        instance: str | None = None,
        metrics: WorkerMetrics | None = None,
    ) -> TransactionalWorker:
        """Check the topics, build the pipeline and join the consumer group: a static member
        (``group.instance.id`` = the instance name, KIP-345) when ``kafka_static_membership``
        is on, so a restarted worker takes its partitions back without a rebalance. A broker
        restart is ridden through (``TransactionalStream.recover``) for up to
        ``worker_recovery_seconds``, and a broker that does not answer at start (still
        starting) is waited for as long. Raises ``TopicError`` (a topic missing, or the broker
        away that long) or ``KafkaException`` (the producer refused)."""
        topics = Topics.from_prefix(cfg.kafka_topic_prefix)
        admin = admin_client(cfg.kafka())
        existing = await_broker(lambda: existing_topics(admin), cfg.worker_recovery_seconds)
        require_topics(existing, (topics.input, topics.stored_events, topics.assessments,
                                  topics.audit_batches, topics.review_queue,
                                  topics.dead_letters))  # fmt: skip
        pipeline = build_pipeline(cfg, TopicOutputs(topics))  # each window brings its own
        # one flush per window: the window bounds the memory held
        pipeline.flush_every = max(pipeline.flush_every, 2 * cfg.worker_take_max + 1)
        name = instance or worker_identity(cfg)
        stream_cfg = StreamConfig(
            bootstrap_servers=cfg.kafka(),
            group_id=cfg.kafka_consumer_group,
            topics=[topics.input],
            transactional_id=f"{cfg.kafka_consumer_group}.{name}",
            take_max=cfg.worker_take_max,
            take_within=cfg.worker_take_within_seconds,
            group_instance_id=name if cfg.kafka_static_membership else None,
            consumer_extra={"session.timeout.ms": int(cfg.kafka_session_timeout_seconds * 1000)},
            recovery_seconds=cfg.worker_recovery_seconds,
        )
        stream = TransactionalStream(stream_cfg)
        decode = DecodeOptions(max_record_bytes=cfg.max_record_bytes,
                               max_text_chars=cfg.max_text_chars)  # fmt: skip
        log.info("transactional worker %s joined group %s", name, cfg.kafka_consumer_group)
        worker = cls(cfg, pipeline, topics, stream, decode, metrics)
        worker.baselines = BaselineReader(cfg.kafka(), topics.drift_baselines)
        worker.baselines.catch_up()
        pipeline.baselines = dict(worker.baselines.baselines)
        return worker

    def submit(self, window: Window) -> _InHand:
        """Start auditing ``window`` on the pipeline loop, into outputs of its own."""
        records, originals = [], {}
        for msg in window.records:
            topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
            value = msg.value()
            location = kafka_location(partition, offset)
            records.append(SourceRecord(topic, location, value if value is not None else b"",
                                        tombstone=value is None))  # fmt: skip
            originals[(topic, location)] = original_record(msg.key(), msg.headers(), value)
        outputs = TopicOutputs(self.topics)
        outputs.use_originals(originals)
        source = InputSource(records, "jsonl", self.decode)
        return _InHand(window, outputs, self.loop.submit(self.pipeline.run([source], sink=outputs)))

    def run(
        self,
        stop: threading.Event,
        before_commit: Callable[[Window], None] | None = None,
        max_windows: int | None = None,
    ) -> WorkerStats:
        """Process windows until ``stop`` is set (or ``max_windows`` were committed), then
        finish and commit the windows in hand. Raises ``TransactionFatal`` (the caller
        exits) and whatever the pipeline raises (a bug: the windows in hand stay
        uncommitted and are consumed again after a restart)."""
        in_hand: deque[_InHand] = deque()
        try:
            while True:
                done = max_windows is not None and self.stats.windows >= max_windows
                if (stop.is_set() or done) and not in_hand:
                    break
                if in_hand and (in_hand[0].report.done() or stop.is_set() or done
                                or len(in_hand) >= self.depth):  # fmt: skip
                    self._commit_oldest(in_hand, before_commit)
                    continue
                self._refresh_baselines()
                self._update_lag()
                try:
                    window = self.stream.next_window(
                        stop, until=(lambda: in_hand[0].report.done()) if in_hand else None
                    )
                except WindowAborted as exc:  # the consumer was renewed: all read again
                    log.warning("windows in hand dropped: %s", exc)
                    self._drop(in_hand)
                    continue
                if window is not None:
                    in_hand.append(self.submit(window))
                self.metrics.windows_in_flight.set(len(in_hand))
        finally:
            self._drop(in_hand)
        return self.stats

    def _commit_oldest(
        self, in_hand: deque[_InHand], before_commit: Callable[[Window], None] | None
    ) -> None:
        """Wait for the oldest window's audit and commit it; on an abort, drop every window
        in hand (the consumer was rewound: they are all consumed again)."""
        item = in_hand[0]
        started = time.monotonic()
        report = item.report.result()  # raises what the pipeline raised
        messages = item.outputs.take()
        try:
            self.stream.commit(item.window, messages, before_commit)
        except WindowAborted as exc:
            self.stats.aborted += 1
            self.metrics.transactions.labels("aborted").inc()
            log.warning("window of %d records aborted: %s", len(item.window), exc)
            self._drop(in_hand)
            return
        in_hand.popleft()
        self.last_commit = time.monotonic()
        self.stats.windows += 1
        self.stats.records += len(item.window)
        self.stats.messages += len(messages)
        self.metrics.transactions.labels("committed").inc()
        self.metrics.window_seconds.observe(self.last_commit - item.window.read_at)
        record_metrics(self.metrics, report)
        self._update_lag()
        log.info(
            "window committed",
            extra={"records": len(item.window), "messages": len(messages),
                   "refusals": report.refusals, "dead_letters": len(report.failures),
                   "refusal_disagreements": sum(report.disagreements.values()),
                   "encoder_decided": report.encoder_decided,
                   "in_hand": len(in_hand), "commit_seconds": round(self.last_commit - started, 3),
                   "seconds": round(self.last_commit - item.window.read_at, 3)},
        )  # fmt: skip

    def _drop(self, in_hand: deque[_InHand]) -> None:
        """Cancel and forget the windows in hand (nothing of them was committed)."""
        for item in in_hand:
            item.report.cancel()
        for item in in_hand:
            # cancelled, failed or still stuck: it is consumed again either way
            with contextlib.suppress(Exception):
                item.report.result(timeout=30)
        in_hand.clear()
        self.metrics.windows_in_flight.set(0)

    def _refresh_baselines(self, every: float = 1.0) -> None:
        """Take the newest trend baselines the sink published (``streams.baselines``), at most
        every ``every`` seconds; windows submitted from then on use them."""
        now = time.monotonic()
        if self.baselines is None or now - self._baselines_read < every:
            return
        self._baselines_read = now
        if self.baselines.poll():
            self.pipeline.baselines = dict(self.baselines.baselines)
            log.info("trend baselines updated", extra={"bundles": sorted(self.pipeline.baselines)})

    def _update_lag(self, every: float = 5.0) -> None:
        """Refresh the consumer-lag gauge (the group's committed offsets against the high
        watermarks, ``TransactionalStream.lag``), at most every ``every`` seconds."""
        now = time.monotonic()
        if now - self._lag_read < every:
            return
        self._lag_read = now
        lags = self.stream.lag()
        shown = {str(partition) for _topic, partition in self.stream.assigned}
        for label in self._lag_labels - shown:  # revoked: another member reports it now
            with contextlib.suppress(KeyError):  # never set
                self.metrics.consumer_lag.remove(label)
        self._lag_labels = shown
        for (_topic, partition), lag in lags.items():
            self.metrics.consumer_lag.labels(str(partition)).set(lag)
        unreadable = self.stream.offsets_unreadable
        self.metrics.committed_offsets_unreadable.set(len(unreadable))
        if unreadable and self.stream.offsets_unreadable_since is not None:
            seconds = time.monotonic() - self.stream.offsets_unreadable_since
            if seconds >= 60 and now - self._unreadable_logged >= 60:
                self._unreadable_logged = now
                log.warning(
                    "committed offsets of %d partition(s) unreadable for %.0f s (a pending "
                    "transactional offset commit?): their lag is unknown; docs/streaming.md, "
                    "'Known defect', says how to inspect the group",
                    len(unreadable), seconds,
                    extra={"partitions": [f"{t}[{p}]" for t, p in unreadable]},
                )  # fmt: skip
        # -1: not readable (the broker is away), which /health counts as possible lag; with
        # nothing assigned (a session lost in an outage, or more workers than partitions)
        # the lag is 0 only while the broker answers
        if self.stream.assigned:
            # a partition whose committed offset is unknown makes the total unknown: its lag
            # is not 0 (a consumer waiting on a pending offset commit reads nothing)
            self.lag_total = sum(lags.values()) if lags and not unreadable else -1
        else:
            self.lag_total = 0 if self.stream.reachable() else -1

    def health(self) -> dict[str, Any]:
        """Whether the worker committed recently (within ``10 x worker_take_within_seconds``
        + 60 s) or has nothing to do (no consumer lag when last read), with its assigned
        partitions, seconds since its last commit, the lag (-1: unknown, also while a
        partition's committed offset cannot be read) and how many partitions' committed
        offsets are unreadable and for how long. Reads only what the polling
        thread recorded: the consumer is not touched from the web thread (confluent-kafka
        makes a second thread wait for the one in ``consume``)."""
        since = time.monotonic() - self.last_commit
        # -1: unknown (the broker did not answer, or the stream is recovering from its loss:
        # the polling thread waits in the recovery meanwhile), maybe behind
        lag = -1 if self.stream.recovering else self.lag_total
        stalled = lag != 0 and since > 10 * self.cfg.worker_take_within_seconds + 60
        since_unreadable = self.stream.offsets_unreadable_since
        return {"ok": not stalled, "assigned_partitions": len(self.stream.assigned),
                "seconds_since_commit": round(since, 1), "consumer_lag": lag,
                "committed_offsets_unreadable": len(self.stream.offsets_unreadable),
                "committed_offsets_unreadable_seconds": (
                    round(time.monotonic() - since_unreadable, 1)
                    if since_unreadable is not None else 0.0),
                "windows": self.stats.windows}  # fmt: skip

    def close(self) -> None:
        """Leave the group, close the engine and the pipeline loop."""
        try:
            self.stream.close()
            if self.baselines is not None:
                self.baselines.close()
            instance = self.stream.cfg.group_instance_id
            if instance is not None and self.stream.generation > 0:  # it had joined
                # a static member does not leave on close: hand its partitions over now
                asyncio.run(leave_group(self.cfg.kafka_bootstrap_servers,
                                        self.cfg.kafka_consumer_group, instance))  # fmt: skip
        finally:
            try:
                self.loop.run_sync(close_engine(self.pipeline.engine))
            finally:
                self.loop.close()
