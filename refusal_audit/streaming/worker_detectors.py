"""The detectors inside the worker: a timer pass on the group's leader, and trend baselines.

Leadership: the worker that owns partition 0 of the input topic runs the detectors (exactly
one member of the consumer group owns it; faust's own leader topic is disabled). A pass
(``refusal_audit.alerts.publisher.run_detectors``) reads ClickHouse aggregates, so it needs no
in-memory state and a restarted or new leader computes the same alerts with the same ids;
``AlertPublisher`` sends and stores each id once. Every worker also refreshes the trend
baselines its pipeline puts into batch summaries.

A pass runs off the event loop and under the worker's I/O lock (no window is being stored
meanwhile: the embedded chDB store is one process and one writer). A failed pass is logged
and counted, never fatal: the next pass recomputes everything, and no input offset depends
on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from datetime import UTC, datetime

from refusal_audit.alerts.drift import DriftConfig, bundle_baselines
from refusal_audit.alerts.publisher import AlertPublisher, DetectorRun, run_detectors
from refusal_audit.audit.pipeline import AuditPipeline
from refusal_audit.config import Settings
from schemas.alerts import Alert
from streams.alert_log import read_alerts
from streams.metrics import WorkerMetrics
from streams.producer import TopicWriter, make_producer
from streams.topics import Topics
from warehouse.store import Warehouse

log = logging.getLogger("refusal_audit.alerts")


def record_findings(metrics: WorkerMetrics, result: DetectorRun) -> None:
    """Set ``refusal_audit_detector_findings`` to the pass's findings counted by detector,
    status and resolution (the windows its tested period spans; for ``insufficient_data``
    the coarsest period looked at), so a dashboard tells "no alert" from "could not look"
    and sees at which resolution each scope was tested (issue 28). The previous pass's
    series are cleared first."""
    metrics.detector_findings.clear()
    counts: Counter[tuple[str, str, str]] = Counter(
        (f.kind, f.status, str(f.resolution))
        for evaluation in result.evaluations
        for f in evaluation.evaluation.findings
    )
    for (kind, status, resolution), n in counts.items():
        metrics.detector_findings.labels(kind, status, resolution).set(n)


class DetectorRunner:
    """Runs detector passes for the worker; see the module docstring.

    Has its own producer, so confirming alerts never confirms (or swallows the failures of)
    a window's outputs.
    """

    def __init__(
        self,
        cfg: Settings,
        warehouse: Warehouse,
        topics: Topics,
        metrics: WorkerMetrics,
        pipeline: AuditPipeline,
    ) -> None:
        self.cfg = cfg
        self.topics = topics
        self.metrics = metrics
        self.pipeline = pipeline
        writer = TopicWriter(make_producer(cfg.kafka()))
        self.publisher = AlertPublisher(warehouse, writer, topics, self.read_topics)

    def read_topics(self) -> list[Alert]:
        """Every alert on the alert topics (blocking). Raises ``KafkaException``/``KeyError``."""
        return read_alerts(self.cfg.kafka(), self.topics.alert_topics())

    def reconcile(self) -> int:
        """Store alerts that reached the topics but not the table (blocking; at start-up).

        Raises ``confluent_kafka.KafkaException``/``KeyError`` (no broker, no alert topic)
        and warehouse errors.
        """
        stored = self.publisher.recover()
        if stored:
            log.warning(
                "alerts found on the topics but not in the warehouse were stored",
                extra={"alerts": stored},
            )
        return stored

    def refresh_baselines(self, now: datetime) -> None:
        """Replace the pipeline's trend baselines with the current ones (blocking)."""
        store = self.publisher.warehouse
        config = DriftConfig.from_settings(self.cfg)
        self.pipeline.baselines = bundle_baselines(store.client, store.database, config, now=now)

    def run_once(self, now: datetime) -> DetectorRun:
        """One detector pass with metrics (blocking). Raises what the pass raises."""
        started = time.perf_counter()
        result = run_detectors(self.cfg, self.publisher, now=now)
        self.metrics.detector_seconds.observe(time.perf_counter() - started)
        record_findings(self.metrics, result)
        for alert in result.published:
            self.metrics.alerts_published.labels(alert.kind, alert.severity).inc()
        return result

    async def tick(self, is_leader: bool, io_lock: asyncio.Lock) -> DetectorRun | None:
        """Refresh baselines and, on the leader, run a pass; never raises (logs instead)."""
        now = datetime.now(UTC)
        async with io_lock:
            try:
                await asyncio.to_thread(self.refresh_baselines, now)
                if not is_leader:
                    return None
                result = await asyncio.to_thread(self.run_once, now)
            except Exception as exc:  # the next pass recomputes everything
                self.metrics.detector_runs.labels("failed").inc()
                log.error("detector pass failed: %s", exc, exc_info=exc)
                return None
        self.metrics.detector_runs.labels("ok").inc()
        if result.published:
            log.info("detector pass published alerts", extra={"alerts": len(result.published)})
        return result
