"""Alert publication on the real broker: each alert id reaches the topic and the table once,
including after a crash between the broker's acknowledgement and the ClickHouse insert."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from streaming import read_topic

from refusal_audit.alerts.publisher import AlertPublisher
from schemas.alerts import Alert, Scope, Statistic, TimeWindow, alert_id
from streams.alert_log import read_alerts
from streams.producer import DeliveryError, TopicWriter, make_producer
from streams.topics import Topics, create_topics, topic_specs
from warehouse.alerts import list_alerts
from warehouse.store import Warehouse

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

W0 = datetime(2026, 11, 2, 10, tzinfo=UTC)


def make_alert(kind: str, model: str, hour: int = 0, first: datetime = W0) -> Alert:
    """A synthetic alert about ``model`` for the hour ``hour`` hours after ``first``."""
    scope = Scope(policy_bundle="default", model=model, product="p")
    start = first + timedelta(hours=hour)
    window = TimeWindow(start=start, end=start + timedelta(hours=1))
    return Alert(
        alert_id=alert_id(kind, scope, window.start, window.end),
        kind=kind,  # type: ignore[arg-type]
        severity="warning",
        scope=scope,
        window=window,
        baseline=TimeWindow(start=start - timedelta(hours=24), end=start),
        statistic=Statistic(
            name="chi2",
            value=12.0,
            threshold=0.05,
            p_value=0.001,
            q_value=0.004,
            effect_size=7.5,
            effect_size_name="rate_difference_pp",
            effect_size_threshold=5.0,
        ),
        current_counts={"refusals": 400, "false_positives": 90},
        baseline_counts={"refusals": 9000, "false_positives": 1300},
        summary="synthetic alert for a test. Reproduce the counts with: SELECT 1",
        evidence_query="SELECT 1",
        created_at=start + timedelta(hours=1, minutes=6),
    )


class FailingAlertsInsert(Warehouse):
    """The warehouse, except that storing alerts fails (a crash after the broker acked)."""

    def insert_alerts(self, alerts: Sequence[Mapping[str, Any]]) -> None:
        raise RuntimeError("injected: process died before the alerts insert")


@pytest.fixture
def topics(kafka_admin: AdminClient, unique_topic_prefix: str) -> Topics:
    create_topics(kafka_admin, topic_specs(unique_topic_prefix, 1, 1))
    return Topics.from_prefix(unique_topic_prefix)


def test_each_alert_once_even_after_a_crash_before_the_insert(
    warehouse: Warehouse, kafka_bootstrap: str, topics: Topics
) -> None:
    writer = TopicWriter(make_producer(kafka_bootstrap))
    first = [make_alert("false_positive_rate_shift", "m1"), make_alert("policy_gap", "all")]
    broken = FailingAlertsInsert(warehouse.client, warehouse.database, retries=1, retry_wait=0)
    with pytest.raises(RuntimeError, match="injected"):
        AlertPublisher(broken, writer, topics).publish(first)
    # on the topic, not in the table: the restart's reconciliation stores them
    publisher = AlertPublisher(warehouse, writer, topics)
    on_topics = read_alerts(kafka_bootstrap, topics.alert_topics())
    assert sorted(a.alert_id for a in on_topics) == sorted(a.alert_id for a in first)
    assert publisher.reconcile(on_topics) == 2
    assert publisher.reconcile(on_topics) == 0
    # recomputed alerts (same ids) are not sent again; a new one is, once
    later = make_alert("category_mix_drift", "m1", hour=1)
    sent = publisher.publish([*first, later, later])
    assert [a.alert_id for a in sent] == [later.alert_id]
    assert publisher.publish([*first, later]) == []
    drift = [m.key() for m in read_topic(kafka_bootstrap, topics.drift_alerts)]
    assert sorted(drift) == [b"default/m1/p", b"default/m1/p"]  # keyed by scope
    gaps = list(read_topic(kafka_bootstrap, topics.policy_gap_alerts))
    assert len(gaps) == 1
    headers = dict(gaps[0].headers() or [])
    assert headers["x-alert-id"] == first[1].alert_id.encode()
    assert headers["x-alert-kind"] == b"policy_gap"
    stored = list_alerts(warehouse, limit=10)
    expected = sorted([*(a.alert_id for a in first), later.alert_id])
    assert sorted(a.alert_id for a in stored) == expected
    assert stored[0] == later  # newest window first, and the stored JSON round-trips


def test_a_partly_delivered_publish_is_not_sent_twice(
    warehouse: Warehouse, kafka_bootstrap: str, kafka_admin: AdminClient, unique_topic_prefix: str
) -> None:
    """One alert lands on its topic, the other's topic is missing: the publish fails, the
    delivered one is stored from the topic, and the retry sends only the other one."""
    topics = Topics.from_prefix(unique_topic_prefix)
    specs = topic_specs(unique_topic_prefix, 1, 1)
    create_topics(kafka_admin, [s for s in specs if s.name == topics.policy_gap_alerts])
    writer = TopicWriter(make_producer(kafka_bootstrap))
    publisher = AlertPublisher(
        warehouse, writer, topics, lambda: read_alerts(kafka_bootstrap, topics.alert_topics())
    )
    gap, drift = make_alert("policy_gap", "all"), make_alert("volume_anomaly", "m1")
    with pytest.raises((DeliveryError, KafkaException)):
        publisher.publish([gap, drift])
    assert [a.alert_id for a in list_alerts(warehouse)] == [gap.alert_id]  # reconciled
    create_topics(kafka_admin, [s for s in specs if s.name == topics.drift_alerts])
    publisher.writer = TopicWriter(make_producer(kafka_bootstrap))  # metadata of the new topic
    assert [a.alert_id for a in publisher.publish([gap, drift])] == [drift.alert_id]
    assert len(list(read_topic(kafka_bootstrap, topics.policy_gap_alerts))) == 1
    assert len(list(read_topic(kafka_bootstrap, topics.drift_alerts))) == 1
