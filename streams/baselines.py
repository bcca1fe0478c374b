"""The trend baselines on a compacted topic: the sink publishes, the workers read (issue 14).

Batch summaries carry trend lines against each policy bundle's drift baseline
(``processors.trends``). The faust worker reads the baselines from the warehouse it writes
to; a transactional worker has no warehouse, so the sink, which runs the detectors next to
the warehouse, publishes each bundle's baseline counts after every detector pass to the
compacted topic ``drift-baselines`` (key: the bundle name; value: JSON with the counts and
when they were computed; a tombstone when a bundle has no baseline any more), and every
worker keeps the newest value per bundle with a group-less consumer that reads the topic
from its beginning. A worker that has read nothing yet (no pass ran, or the topic is
missing) audits with no baseline, as a fresh warehouse would.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import datetime

import orjson
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from processors.drift_detection import WindowCounts, counts_from_dict, counts_to_dict
from streams import clients
from streams.clients import Brokers
from streams.producer import TopicWriter

log = logging.getLogger("refusal_audit.baselines")


class BaselinePublisher:
    """Publishes baselines to ``topic`` through ``writer`` (``streams.producer.TopicWriter``);
    bundles published before and absent now get a tombstone."""

    def __init__(self, writer: TopicWriter, topic: str) -> None:
        self.writer = writer
        self.topic = topic
        self._published: set[str] = set()

    def publish(self, baselines: Mapping[str, WindowCounts], computed_at: datetime) -> int:
        """Send every bundle's counts and wait for the broker's acknowledgements; returns the
        number of records sent. Raises ``streams.producer.DeliveryError``."""
        sent = 0
        for bundle, counts in sorted(baselines.items()):
            value = {"policy_bundle": bundle, "computed_at": computed_at.isoformat(),
                     "counts": counts_to_dict(counts)}  # fmt: skip
            self.writer.send(self.topic, orjson.dumps(value), bundle.encode())
            sent += 1
        for bundle in sorted(self._published - set(baselines)):
            self.writer.send(self.topic, None, bundle.encode())
            sent += 1
        self.writer.confirm()
        self._published = set(baselines)
        return sent


class BaselineReader:
    """The newest baseline per bundle on ``topic`` (module docstring). Not thread-safe: call
    :meth:`poll` from one thread. Raises ``KafkaException`` from the constructor when the
    consumer cannot be created."""

    def __init__(self, brokers: Brokers, topic: str) -> None:
        self.topic = topic
        self.baselines: dict[str, WindowCounts] = {}
        self.skipped = 0
        self._consumer = clients.consumer(brokers, "refusal-audit-baselines")
        self._assigned = False

    def _assign(self) -> bool:
        try:
            info = self._consumer.list_topics(self.topic, timeout=5).topics.get(self.topic)
        except KafkaException as exc:
            log.info("baseline topic not read: %s", exc)
            return False
        if info is None or info.error is not None or not info.partitions:
            log.info("baseline topic %s missing: trend lines without a baseline", self.topic)
            return False
        self._consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in sorted(info.partitions)]
        )
        self._assigned = True
        return True

    def poll(self, max_records: int = 1000) -> bool:
        """Read what arrived (without waiting); returns True when a baseline changed. A record
        that is not a valid baseline is skipped (counted in ``skipped``, logged)."""
        if not self._assigned and not self._assign():
            return False
        changed = False
        for msg in self._consumer.consume(max_records, timeout=0):
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.info("baseline topic: %s", err)
                continue
            bundle = (msg.key() or b"").decode("utf-8", "replace")
            value = msg.value()
            if value is None:
                changed |= self.baselines.pop(bundle, None) is not None
                continue
            try:
                data = orjson.loads(value)
                self.baselines[bundle] = counts_from_dict(data["counts"])
                changed = True
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                self.skipped += 1
                log.warning("skipped a record that is not a baseline: %s", exc)
        return changed

    def catch_up(self, timeout: float = 10.0) -> bool:
        """Read up to the high watermarks the topic has now (at start-up: the first windows
        then use the published baselines), for at most ``timeout`` seconds; returns whether
        the end was reached (a missing topic counts as read)."""
        if not self._assigned and not self._assign():
            return True
        deadline = time.monotonic() + timeout
        try:
            ends = {
                tp.partition: self._consumer.get_watermark_offsets(tp, timeout=timeout)[1]
                for tp in self._consumer.assignment()
            }
        except KafkaException as exc:
            log.info("baseline topic not read: %s", exc)
            return False
        while time.monotonic() < deadline:
            self.poll()
            try:
                positions = self._consumer.position(self._consumer.assignment())
            except KafkaException:
                positions = []
            at = {tp.partition: tp.offset for tp in positions}
            if all(at.get(p, -1) >= end or end == 0 for p, end in ends.items()):
                return True
            time.sleep(0.05)
        log.warning("baseline topic not read to its end within %gs", timeout)
        return False

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()
