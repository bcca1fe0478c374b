"""Prometheus metrics of the streaming worker (served on ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from schemas.events import DISAGREEMENT_DIRECTIONS


class WorkerMetrics:
    """The worker's metrics, in their own registry (so tests can make fresh ones).

    Units: seconds for latencies; counts otherwise. Batch size buckets follow the default
    ``batch_max_events`` range.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._add_event_metrics(r)
        self._add_engine_metrics(r)
        self._add_window_metrics(r)
        self._add_output_metrics(r)
        self._add_detector_metrics(r)

    def _add_event_metrics(self, r: CollectorRegistry) -> None:
        """The intake: records consumed, refusals audited, non-refusals, the platform classifier's
        disagreements, the cascade encoder's decisions."""
        self.events_consumed = Counter(
            "refusal_audit_events_consumed_total",
            "Records consumed from the input topic.",
            registry=r,
        )
        self.refusals_audited = Counter(
            "refusal_audit_refusals_audited_total", "Refusals with a stored assessment.", registry=r
        )
        self.non_refusals = Counter(
            "refusal_audit_non_refusals_total",
            "Events the pre-filter judged not refusals.",
            registry=r,
        )
        self.refusal_disagreements = Counter(
            "refusal_audit_refusal_disagreements_total",
            "Events whose platform classifier refusal verdict and our refusal detection "
            "differ, by direction (classifier_refusal_detector_not, "
            "detector_refusal_classifier_not).",
            ["direction"],
            registry=r,
        )
        for direction in DISAGREEMENT_DIRECTIONS:
            self.refusal_disagreements.labels(direction)  # both series exist from the start
        self.encoder_decided = Counter(
            "refusal_audit_cascade_encoder_decisions_total",
            "Events whose refusal decision the refusal cascade's encoder head made (their "
            "pre-filter score fell in prefilter_cascade_band); stays 0 with the cascade off.",
            registry=r,
        )

    def _add_engine_metrics(self, r: CollectorRegistry) -> None:
        """The audit batches and the engine: outcomes, sizes, latency, events by step, calls."""
        self.batches = Counter(
            "refusal_audit_batches_total", "Audit batches by outcome.", ["outcome"], registry=r
        )
        self.batch_size = Histogram(
            "refusal_audit_batch_size_events",
            "Events per audit batch.",
            buckets=(1, 2, 5, 10, 25, 50, 100, 200),
            registry=r,
        )
        self.engine_latency = Histogram(
            "refusal_audit_engine_latency_seconds", "Engine call latency per batch.", registry=r
        )
        self.engine_events = Counter(
            "refusal_audit_engine_events_total",
            "Events of an LLM engine's batches by the step that resolved them (first, split, "
            "retry, reaudit) or unresolved.",
            ["step"],
            registry=r,
        )
        self.engine_calls = Counter(
            "refusal_audit_engine_calls_total",
            "Model calls of an LLM engine (first calls, retries, re-audits, splits).",
            registry=r,
        )

    def _add_window_metrics(self, r: CollectorRegistry) -> None:
        """The consumed windows: time per window, a transactional worker's transactions and
        windows in flight."""
        self.window_seconds = Histogram(
            "refusal_audit_window_seconds",
            "Time to process one consumed window (audit, store, confirm outputs).",
            registry=r,
        )
        self.transactions = Counter(
            "refusal_audit_window_transactions_total",
            "Windows of a transactional worker by outcome (committed, aborted: redone).",
            ["outcome"],
            registry=r,
        )
        self.windows_in_flight = Gauge(
            "refusal_audit_windows_in_flight",
            "Windows a transactional worker holds: read, being audited or waiting to commit.",
            registry=r,
        )

    def _add_output_metrics(self, r: CollectorRegistry) -> None:
        """Where the results go: warehouse write latency and retries, dead letters, consumer lag
        and unreadable committed offsets."""
        self.warehouse_write_seconds = Histogram(
            "refusal_audit_warehouse_write_seconds",
            "ClickHouse insert latency.",
            ["table"],
            registry=r,
        )
        self.warehouse_retries = Counter(
            "refusal_audit_warehouse_retries_total",
            "ClickHouse insert retries.",
            ["table"],
            registry=r,
        )
        self.dead_letters = Counter(
            "refusal_audit_dead_letters_total",
            "Dead letters by reason code.",
            ["reason_code"],
            registry=r,
        )
        self.consumer_lag = Gauge(
            "refusal_audit_consumer_lag_events",
            "High watermark minus the group's committed offset, per assigned partition.",
            ["partition"],
            registry=r,
        )
        self.committed_offsets_unreadable = Gauge(
            "refusal_audit_committed_offsets_unreadable_partitions",
            "Assigned partitions whose committed offset the consumer group would not give at "
            "the last lag reading (a pending transactional offset commit, or the broker away): "
            "their lag is unknown, not 0.",
            registry=r,
        )

    def _add_detector_metrics(self, r: CollectorRegistry) -> None:
        """The detectors on the leader: alerts published, passes, pass time, findings."""
        self.alerts_published = Counter(
            "refusal_audit_alerts_published_total",
            "Alerts sent to their topic and stored (each alert id once).",
            ["kind", "severity"],
            registry=r,
        )
        self.detector_runs = Counter(
            "refusal_audit_detector_runs_total",
            "Detector passes by outcome (ok, failed) on the leader.",
            ["outcome"],
            registry=r,
        )
        self.detector_seconds = Histogram(
            "refusal_audit_detector_seconds", "Time of one detector pass.", registry=r
        )
        self.detector_findings = Gauge(
            "refusal_audit_detector_findings",
            "Findings of the last detector pass by detector, status (alert, no_change, "
            "insufficient_data) and resolution: the windows the tested period spans (1, 6, 24, "
            "168 with hourly windows; for insufficient_data, the coarsest period looked at).",
            ["kind", "status", "resolution"],
            registry=r,
        )
