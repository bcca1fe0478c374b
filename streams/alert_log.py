"""Read every alert already on the alert topics (for start-up reconciliation).

Alert topics carry few records, so reading them from the start to the high watermark with a
group-less confluent-kafka consumer is cheap. Records that are not valid alerts (written by
someone else) are skipped and counted.
"""

from __future__ import annotations

import logging

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition
from pydantic import ValidationError

from schemas.alerts import Alert
from streams import clients
from streams.clients import Brokers

log = logging.getLogger("refusal_audit.alerts")


def read_alerts(brokers: Brokers, topics: list[str], timeout: float = 10.0) -> list[Alert]:
    """All valid alerts on ``topics`` (oldest first per partition).

    A topic that does not exist holds no alerts (logged). Raises
    ``confluent_kafka.KafkaException`` when the broker cannot be reached.
    """
    consumer = clients.consumer(
        brokers, "refusal-audit-alert-reconcile", **{"enable.partition.eof": True, "logger": log}
    )
    try:
        metadata = consumer.list_topics(timeout=timeout)
        wanted: list[TopicPartition] = []
        ends: dict[tuple[str, int], int] = {}
        for topic in topics:
            info = metadata.topics.get(topic)
            if info is None or info.error is not None:  # no topic: no alert on it
                log.warning("alert topic missing while reading alerts", extra={"topic": topic})
                continue
            for partition in info.partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=timeout
                )
                if high > low:
                    wanted.append(TopicPartition(topic, partition, OFFSET_BEGINNING))
                    ends[(topic, partition)] = high
        if not wanted:
            return []
        consumer.assign(wanted)
        alerts: list[Alert] = []
        skipped = 0
        while ends:
            msg = consumer.poll(timeout)
            if msg is None:
                raise TimeoutError(f"no alert records within {timeout:g}s; {len(ends)} left")
            key = (str(msg.topic()), int(msg.partition() or 0))
            error = msg.error()
            if error is None:
                try:
                    alerts.append(Alert.model_validate_json(msg.value() or b""))
                except ValidationError:
                    skipped += 1
                if (msg.offset() or 0) + 1 >= ends.get(key, 0):
                    ends.pop(key, None)
            elif key in ends and error.code() == KafkaError._PARTITION_EOF:
                ends.pop(key, None)
        if skipped:
            log.warning("skipped records that are not alerts", extra={"skipped": skipped})
        return alerts
    finally:
        consumer.close()
