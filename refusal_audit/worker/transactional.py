"""The transactional audit worker: windows in, results out, exactly once per window (issue 14).

One worker process: consume a window of refusal events (``streams.transactional``), run it
through the shared ``AuditPipeline`` (the batch-mode code path) into :class:`TopicOutputs`,
then commit the window's outputs and its input offsets in one Kafka transaction. It needs no
warehouse: ``refusal-audit sink`` loads the result topics into ClickHouse. Any number of
workers, on one host or many, share the input topic's partitions in one consumer group.

The pipeline runs on a ``PipelineLoop`` (an event loop in its own thread, as in the faust
worker) so the openai engine's client keeps one loop; this module's thread polls, decodes
nothing itself, and commits. Aborted windows (a failed transaction, a rebalance before the
commit, ``before_commit`` raising in tests) leave nothing visible and are consumed again.
A fenced or fatal producer stops the worker (exit status 70 from the CLI).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from processors.adapters import DecodeOptions, SourceRecord
from refusal_audit.batch import build_pipeline
from refusal_audit.config import Settings
from refusal_audit.engines import close_engine
from refusal_audit.pipeline import AuditPipeline, InputSource, RunReport
from refusal_audit.worker.loop import PipelineLoop
from refusal_audit.worker.outputs import TopicOutputs
from streams.membership import group_instance_id
from streams.sink import kafka_location, original_record
from streams.topics import Topics, admin_client, require_topic
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


class TransactionalWorker:
    """One worker (module docstring). Build with :meth:`start`; :meth:`run` until ``stop``;
    :meth:`close`. Raises ``TopicError`` (a topic missing), ``ConfigError`` and
    ``KafkaException`` from :meth:`start`."""

    def __init__(
        self,
        cfg: Settings,
        pipeline: AuditPipeline,
        outputs: TopicOutputs,
        stream: TransactionalStream,
        decode: DecodeOptions,
    ) -> None:
        self.cfg = cfg
        self.pipeline = pipeline
        self.outputs = outputs
        self.stream = stream
        self.decode = decode
        self.loop = PipelineLoop("refusal-audit-tx-pipeline")
        self.stats = WorkerStats()

    @classmethod
    def start(cls, cfg: Settings, instance: str | None = None) -> TransactionalWorker:
        """Check the topics, build the pipeline and join the consumer group."""
        topics = Topics.from_prefix(cfg.kafka_topic_prefix)
        admin = admin_client(cfg.kafka_bootstrap_servers)
        for name in (topics.input, topics.stored_events, topics.assessments,
                     topics.audit_batches, topics.review_queue, topics.dead_letters):  # fmt: skip
            require_topic(admin, name)
        outputs = TopicOutputs(topics)
        pipeline = build_pipeline(cfg, outputs)
        # one flush per window: the window bounds the memory held
        pipeline.flush_every = max(pipeline.flush_every, 2 * cfg.worker_take_max + 1)
        name = instance or worker_identity(cfg)
        stream = TransactionalStream(
            StreamConfig(
                bootstrap_servers=cfg.kafka_bootstrap_servers,
                group_id=cfg.kafka_consumer_group,
                topics=[topics.input],
                transactional_id=f"{cfg.kafka_consumer_group}.{name}",
                take_max=cfg.worker_take_max,
                take_within=cfg.worker_take_within_seconds,
            )
        )
        decode = DecodeOptions(max_record_bytes=cfg.max_record_bytes,
                               max_text_chars=cfg.max_text_chars)  # fmt: skip
        log.info("transactional worker %s joined group %s", name, cfg.kafka_consumer_group)
        return cls(cfg, pipeline, outputs, stream, decode)

    def process(self, window: Window) -> RunReport:
        """Audit one window into collected output messages (not yet committed)."""
        records, originals = [], {}
        for msg in window.records:
            topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
            value = msg.value()
            location = kafka_location(partition, offset)
            records.append(SourceRecord(topic, location, value if value is not None else b"",
                                        tombstone=value is None))  # fmt: skip
            originals[(topic, location)] = original_record(msg.key(), msg.headers(), value)
        self.outputs.use_originals(originals)
        return self.loop.run_sync(self.pipeline.run([InputSource(records, "jsonl", self.decode)]))

    def run(
        self,
        stop: threading.Event,
        before_commit: Callable[[Window], None] | None = None,
        max_windows: int | None = None,
    ) -> WorkerStats:
        """Process windows until ``stop`` is set (or ``max_windows`` were committed). Raises
        ``TransactionFatal`` (the caller exits) and whatever the pipeline raises (a bug:
        the open window stays uncommitted and is consumed again after a restart)."""
        while not stop.is_set():
            if max_windows is not None and self.stats.windows >= max_windows:
                break
            window = self.stream.next_window(stop)
            if window is None:
                continue
            started = time.monotonic()
            try:
                report = self.process(window)
                messages = self.outputs.take()
                self.stream.commit(window, messages, before_commit)
            except WindowAborted as exc:
                self.outputs.discard()
                self.stats.aborted += 1
                log.warning("window of %d records aborted: %s", len(window), exc)
                continue
            self.stats.windows += 1
            self.stats.records += len(window)
            self.stats.messages += len(messages)
            log.info(
                "window committed",
                extra={"records": len(window), "messages": len(messages),
                       "refusals": report.refusals, "dead_letters": len(report.failures),
                       "seconds": round(time.monotonic() - started, 3)},
            )  # fmt: skip
        return self.stats

    def close(self) -> None:
        """Leave the group, close the engine and the pipeline loop."""
        try:
            self.stream.close()
        finally:
            try:
                self.loop.run_sync(close_engine(self.pipeline.engine))
            finally:
                self.loop.close()
