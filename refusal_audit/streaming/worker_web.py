"""Metrics of one window's report, and the transactional worker's ``/metrics`` and
``/health`` endpoints (issue 14).

The faust worker serves both from faust's web server; the transactional worker
(``refusal_audit.streaming.transactional_worker``) has none, so :class:`WorkerWeb` serves them from
a
stdlib ``ThreadingHTTPServer`` in a daemon thread, on ``worker_web_host:worker_web_port``
(loopback by default; port 0 picks a free one). Nothing private is served: Prometheus
counters and a health summary without settings or secrets.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from refusal_audit.audit.pipeline import RunReport
from streams.metrics import WorkerMetrics

log = logging.getLogger("refusal_audit.worker")


def record_metrics(metrics: WorkerMetrics, report: RunReport) -> None:
    """Update the counters and histograms from one window's report."""
    metrics.events_consumed.inc(report.records)
    metrics.refusals_audited.inc(len(report.assessments))
    metrics.non_refusals.inc(report.non_refusals)
    for direction, n in report.disagreements.items():
        metrics.refusal_disagreements.labels(direction).inc(n)
    metrics.encoder_decided.inc(report.encoder_decided)
    metrics.batches.labels("stored").inc(report.batches - report.failed_batches)
    metrics.batches.labels("dead_lettered").inc(report.failed_batches)
    for batch in report.batch_records:
        metrics.batch_size.observe(len(batch.log_ids))
        metrics.engine_latency.observe(batch.usage.latency_ms / 1000.0)
    for code, n in report.failure_counts().items():
        metrics.dead_letters.labels(code).inc(n)
    for step, n in report.engine_steps.items():
        metrics.engine_events.labels(step).inc(n)
    metrics.engine_calls.inc(report.engine_calls)


class WorkerWeb:
    """``GET /metrics`` (Prometheus text format) and ``GET /health`` (JSON from
    ``health()``; status 200 when its ``ok`` is true, else 503); anything else 404.

    Raises ``OSError`` from the constructor when the address cannot be bound.
    """

    def __init__(
        self, host: str, port: int, metrics: WorkerMetrics, health: Callable[[], dict[str, Any]]
    ) -> None:
        self.metrics = metrics
        self.health = health
        web = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(web.metrics.registry), CONTENT_TYPE_LATEST)
                elif path == "/health":
                    try:
                        status = web.health()
                    except Exception as exc:  # reported, not raised
                        status = {"ok": False, "error": str(exc)}
                    code = 200 if status.get("ok") else 503
                    self._send(code, orjson.dumps(status), "application/json")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up
                    log.debug("web: client gone before the answer")

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("web: " + format, *args)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="refusal-audit-worker-web", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self.server.server_address[1])

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
