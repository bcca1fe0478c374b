"""The workers' dashboard: the audit workers' Prometheus metrics (``streams.metrics.
WorkerMetrics``, served on ``/metrics``, scraped by the compose file's Prometheus).

Every expression filters on ``instance=~"$instance"``; rates use Grafana's
``$__rate_interval``. Latencies are histogram quantiles in seconds.
"""

from __future__ import annotations

from refusal_audit.dashboards.model import (
    Json,
    dashboard,
    prom_target,
    prom_variable,
    row,
)
from refusal_audit.dashboards.model import panel as make_panel

_SEL = 'instance=~"$instance"'
_RATE = "$__rate_interval"


def _rate(metric: str, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}{{{_SEL}}}[{_RATE}]))"


def _quantile(q: float, metric: str, by: str = "") -> str:
    labels = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({labels}) (rate({metric}_bucket{{{_SEL}}}[{_RATE}])))"


def _quantiles(metric: str, by: str = "") -> list[Json]:
    suffix = f" {{{{{by}}}}}" if by else ""
    return [
        prom_target(_quantile(q, metric, by), f"p{int(q * 100)}{suffix}", ref_id=ref)
        for q, ref in ((0.5, "A"), (0.95, "B"), (0.99, "C"))
    ]


def _input_panels() -> list[Json]:
    """The input row: consumer lag, throughput, classifier disagreements."""
    lag = f"sum by (instance, partition) (refusal_audit_consumer_lag_events{{{_SEL}}})"
    return [
        row("Input"),
        make_panel(
            "timeseries",
            "Consumer lag (events)",
            [prom_target(lag, "{{instance}} p{{partition}}")],
            width=12,
            description="High watermark minus the next offset to process.",
        ),
        make_panel(
            "timeseries",
            "Throughput (events/s)",
            [
                prom_target(_rate("refusal_audit_events_consumed_total"), "consumed", "A"),
                prom_target(_rate("refusal_audit_refusals_audited_total"), "refusals audited", "B"),
                prom_target(_rate("refusal_audit_non_refusals_total"), "non-refusals", "C"),
            ],
            unit="ops",
            width=12,
        ),
        make_panel(
            "timeseries",
            "Platform classifier vs our refusal detection: disagreements by direction",
            [
                prom_target(
                    f"sum by (direction) (increase("
                    f"refusal_audit_refusal_disagreements_total{{{_SEL}}}[{_RATE}]))",
                    "{{direction}}",
                )
            ],
            stacked=True,
            width=24,
            description="Events whose classifier.is_refusal verdict and our detection differ "
            "(the verdict decided; `refusal-audit query refusal_disagreement_events --all` "
            "lists them).",
        ),
    ]


def _audit_panels() -> list[Json]:
    """The audit row: batches, engine latency, batch size, dead letters, windows."""
    return [
        row("Audit"),
        make_panel(
            "timeseries",
            "Batches by outcome (/s)",
            [prom_target(_rate("refusal_audit_batches_total", "outcome"), "{{outcome}}")],
            unit="ops",
            width=8,
        ),
        make_panel(
            "timeseries",
            "Engine latency per batch",
            _quantiles("refusal_audit_engine_latency_seconds"),
            unit="s",
            width=8,
        ),
        make_panel(
            "timeseries",
            "Batch size (events), p50/p95/p99",
            _quantiles("refusal_audit_batch_size_events"),
            width=8,
        ),
        make_panel(
            "timeseries",
            "Dead letters by reason",
            [
                prom_target(
                    f"sum by (reason_code) (increase("
                    f"refusal_audit_dead_letters_total{{{_SEL}}}[{_RATE}]))",
                    "{{reason_code}}",
                )
            ],
            stacked=True,
            width=12,
        ),
        make_panel(
            "timeseries",
            "Window processing time",
            _quantiles("refusal_audit_window_seconds"),
            unit="s",
            width=12,
        ),
    ]


def _transaction_panels() -> list[Json]:
    """The transactions and warehouse row: window transactions, writes."""
    return [
        row("Transactions and warehouse"),
        make_panel(
            "timeseries",
            "Window transactions by outcome (/s)",
            [
                prom_target(
                    _rate("refusal_audit_window_transactions_total", "outcome"), "{{outcome}}"
                )
            ],
            unit="ops",
            width=8,
        ),
        make_panel(
            "timeseries",
            "Windows in flight",
            [
                prom_target(
                    f"sum by (instance) (refusal_audit_windows_in_flight{{{_SEL}}})", "{{instance}}"
                )
            ],
            width=8,
        ),
        make_panel(
            "timeseries",
            "Warehouse write latency p95 and retries by table (one-process worker)",
            [
                prom_target(
                    _quantile(0.95, "refusal_audit_warehouse_write_seconds", "table"),
                    "{{table}}",
                    "A",
                ),
                prom_target(
                    _rate("refusal_audit_warehouse_retries_total", "table"),
                    "retries/s {{table}}",
                    "B",
                ),
            ],
            unit="s",
            width=8,
        ),
    ]


def _detector_panels() -> list[Json]:
    """The detectors and alerts row (one-process worker)."""
    return [
        row("Detectors and alerts (one-process worker --outputs warehouse)"),
        make_panel(
            "timeseries",
            "Alerts published by kind",
            [
                prom_target(
                    f"sum by (kind, severity) (increase("
                    f"refusal_audit_alerts_published_total{{{_SEL}}}[{_RATE}]))",
                    "{{kind}} {{severity}}",
                )
            ],
            width=8,
        ),
        make_panel(
            "timeseries",
            "Detector passes by outcome (/s)",
            [
                prom_target(
                    _rate("refusal_audit_detector_runs_total", "outcome"), "{{outcome}}", "A"
                )
            ],
            unit="ops",
            width=8,
        ),
        make_panel(
            "timeseries",
            "Detector pass time and findings",
            [
                *_quantiles("refusal_audit_detector_seconds")[:2],
                prom_target(
                    f"sum by (kind, status) (refusal_audit_detector_findings{{{_SEL}}})",
                    "{{kind}} {{status}}",
                    "C",
                ),
            ],
            width=8,
        ),
    ]


def panels() -> list[Json]:
    """Lag, throughput, dead letters, latencies, transactions and detector panels."""
    return [*_input_panels(), *_audit_panels(), *_transaction_panels(), *_detector_panels()]


def workers_dashboard() -> Json:
    """The Prometheus dashboard ``refusal-audit-workers`` (variable ``instance``)."""
    variable = prom_variable(
        "instance", "Worker", "label_values(refusal_audit_events_consumed_total, instance)"
    )
    return dashboard(
        "refusal-audit-workers",
        "refusal-audit: workers",
        panels(),
        [variable],
        time_from="now-6h",
        description="The audit workers' Prometheus metrics (streams/metrics.py).",
    )
