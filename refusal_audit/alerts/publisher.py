"""Publishing alerts exactly once: to their Kafka topic, then to the ClickHouse alerts table.

``AlertPublisher.publish`` drops alerts whose deterministic id is already in the warehouse,
sends the rest to the drift or policy-gap topic (keyed by scope, value = the alert JSON,
headers ``x-alert-id``/``x-alert-kind``/``x-severity``), waits for the broker's
acknowledgement and only then stores them. If the process dies between the broker's
acknowledgement and the insert, ``reconcile`` (run at start-up with the alerts read back
from the topics) stores them, so they are not sent again: an alert id reaches the topic and
the table once. ``run_detectors`` is one detector pass (drift windows + policy gaps).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from refusal_audit.alerts.drift import DriftConfig, WindowEvaluation, evaluate_windows
from refusal_audit.config import Settings
from schemas.alerts import Alert
from streams.producer import Headers, TopicWriter
from streams.topics import Topics
from warehouse.alerts import known_alert_ids
from warehouse.store import Warehouse

log = logging.getLogger("refusal_audit.alerts")


def alert_row(alert: Alert) -> dict[str, Any]:
    """The ``alerts`` table row of ``alert`` (payload = the alert as JSON)."""
    return {
        "alert_id": alert.alert_id,
        "kind": alert.kind,
        "severity": alert.severity,
        "created_at": alert.created_at,
        "policy_bundle": alert.scope.policy_bundle,
        "model": alert.scope.model,
        "product": alert.scope.product,
        "window_start": alert.window.start,
        "window_end": alert.window.end,
        "message": alert.summary,
        "payload": alert.model_dump_json(),
    }


def alert_message(alert: Alert) -> tuple[bytes, bytes, Headers]:
    """``(key, value, headers)`` of the alert's Kafka record."""
    headers: Headers = [
        ("x-alert-id", alert.alert_id.encode()),
        ("x-alert-kind", alert.kind.encode()),
        ("x-severity", alert.severity.encode()),
        ("x-schema-version", alert.schema_version.encode()),
    ]
    value = orjson.dumps(alert.model_dump(mode="json"))
    return alert.scope.key.encode("utf-8"), value, headers


@dataclass
class AlertPublisher:
    """Sends new alerts to their topic and stores them; see the module docstring.

    ``writer``/``topics`` None means no broker (batch mode): alerts are only stored.
    ``read_topics`` reads back every alert on the alert topics (``streams.alert_log``): after
    a publish failed part-way (some alerts on the topic, none stored), the alerts found on
    the topics are stored before anything else is sent, so none is sent twice.
    """

    warehouse: Warehouse
    writer: TopicWriter | None = None
    topics: Topics | None = None
    read_topics: Callable[[], list[Alert]] | None = None
    _dirty: bool = field(default=False, init=False)

    def known_ids(self, ids: Iterable[str]) -> set[str]:
        """Which of ``ids`` are already in the alerts table. Raises ClickHouse errors."""
        wanted = sorted(set(ids))
        if not wanted:
            return set()
        return known_alert_ids(self.warehouse, wanted)

    def topic_for(self, alert: Alert) -> str:
        """The policy-gap topic for ``policy_gap`` alerts, else the drift topic."""
        assert self.topics is not None
        return (
            self.topics.policy_gap_alerts
            if alert.kind == "policy_gap"
            else self.topics.drift_alerts
        )

    def publish(self, alerts: Sequence[Alert]) -> list[Alert]:
        """Send and store the alerts not yet emitted; return them (in input order).

        Raises ``streams.producer.DeliveryError`` (or ``KafkaException``) when the broker
        does not take or acknowledge them and ``WarehouseError`` when they cannot be stored;
        either way the alerts that did reach a topic are stored from the topics right away,
        or before the next publish (``recover``), and the rest are retried then.
        """
        if self._dirty:
            self.recover()
        unique: dict[str, Alert] = {}
        for alert in alerts:
            unique.setdefault(alert.alert_id, alert)
        known = self.known_ids(unique)
        new = [a for a in unique.values() if a.alert_id not in known]
        if not new:
            return []
        try:
            if self.writer is not None:
                for alert in new:
                    key, value, headers = alert_message(alert)
                    self.writer.send(self.topic_for(alert), value, key, headers)
                self.writer.confirm()
            self.warehouse.insert_alerts([alert_row(a) for a in new])
        except Exception:
            self._failed()
            raise
        for alert in new:
            log.info(
                "alert",
                extra={
                    "alert_id": alert.alert_id,
                    "kind": alert.kind,
                    "severity": alert.severity,
                    "scope": alert.scope.key,
                },
            )
        return new

    def _failed(self) -> None:
        """After a failed publish: settle what was queued, then store what reached a topic."""
        self._dirty = True
        if self.writer is not None:
            try:
                self.writer.confirm(timeout=30.0)
            except Exception as exc:  # the outcome is read back from the topics below
                log.warning("alerts not all acknowledged: %s", exc)
        try:
            self.recover()
        except Exception as exc:  # retried before the next publish
            log.warning("could not reconcile alerts from the topics yet: %s", exc)

    def recover(self) -> int:
        """Store the alerts found on the topics but not in the table; return how many.

        A no-op without ``read_topics``. Raises what reading the topics or storing raises
        (then the publisher stays in need of recovery).
        """
        stored = self.reconcile(self.read_topics()) if self.read_topics is not None else 0
        self._dirty = False
        return stored

    def reconcile(self, on_topics: Iterable[Alert]) -> int:
        """Store alerts found on the topics but missing from the table; return how many."""
        found = {a.alert_id: a for a in on_topics}
        missing = [a for i, a in found.items() if i not in self.known_ids(found)]
        if missing:
            self.warehouse.insert_alerts([alert_row(a) for a in missing])
        return len(missing)


@dataclass(frozen=True)
class DetectorRun:
    """What one detector pass found and published."""

    evaluations: list[WindowEvaluation]
    gap_alerts: list[Alert]
    published: list[Alert]


def run_detectors(
    cfg: Settings,
    publisher: AlertPublisher,
    *,
    now: datetime,
    windows: list[datetime] | None = None,
) -> DetectorRun:
    """One pass: evaluate drift windows, track policy gaps, publish what is new.

    Blocking (ClickHouse and the producer): run it off the event loop. Raises what
    ``evaluate_windows``, ``track_gaps`` and ``AlertPublisher.publish`` raise.
    """
    from refusal_audit.alerts.gaps import track_configured_gaps

    store = publisher.warehouse
    evaluations = evaluate_windows(
        store.client, store.database, DriftConfig.from_settings(cfg), now=now, windows=windows
    )
    gap_alerts = track_configured_gaps(store.client, cfg, now=now)
    drift_alerts = [a for e in evaluations for a in e.alerts]
    published = publisher.publish([*drift_alerts, *gap_alerts])
    return DetectorRun(evaluations, gap_alerts, published)
