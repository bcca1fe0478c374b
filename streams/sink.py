"""The worker's sink: the warehouse first, then the output topics.

Implements ``refusal_audit.pipeline.Sink``. Every row goes to ClickHouse (where dedup on
write makes redelivery harmless) and then to its topic through a ``TopicWriter``; the worker
acknowledges its input only after ``TopicWriter.confirm`` succeeds, so an event's offset
becomes committable only once its assessment is stored and its outputs are on the broker.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import orjson

from refusal_audit.pipeline import Sink
from schemas.audit import BatchRecord, StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent
from streams.producer import Headers, TopicWriter
from streams.topics import Topics

MAX_TOPIC_RAW_BYTES = 900_000
_KAFKA_LOCATION = re.compile(r"^partition (\d+) offset (\d+)$")


def kafka_location(partition: int, offset: int) -> str:
    """The ``SourceRecord.location`` of a Kafka record (parsed back by ``dead_letter_headers``)."""
    return f"partition {partition} offset {offset}"


def dead_letter_headers(letter: DeadLetter) -> Headers:
    """Kafka headers of a dead letter: reason, stage, ids and the source topic/partition/offset."""
    headers: Headers = [
        ("x-dead-letter-id", letter.dead_letter_id),
        ("x-stage", letter.stage),
        ("x-reason-code", letter.reason_code),
        ("x-reason", letter.reason[:4000]),
        ("x-source", letter.source),
        ("x-source-location", letter.location),
    ]
    match = _KAFKA_LOCATION.match(letter.location)
    if match:
        headers += [
            ("x-source-topic", letter.source),
            ("x-source-partition", match.group(1)),
            ("x-source-offset", match.group(2)),
        ]
    if letter.log_id:
        headers.append(("x-log-id", letter.log_id))
    return headers


def gap_flag_messages(batch: BatchRecord) -> list[bytes]:
    """One JSON message per policy-gap flag of ``batch``, with its example log ids."""
    return [
        orjson.dumps(
            {
                "kind": "policy_gap_flag",
                "batch_id": batch.batch_id,
                "policy_bundle": batch.policy_bundle,
                "bundle_version": batch.bundle_version,
                "description": flag.description,
                "example_log_ids": flag.example_log_ids,
                "engine": batch.engine,
                "audited_at": batch.audited_at.isoformat(),
            }
        )
        for flag in batch.summary.policy_gap_flags
    ]


class StreamSink:
    """Warehouse + topics; see the module docstring. Methods block (call them off the loop).

    ``observe_write(table, seconds)`` receives the duration of each warehouse insert.
    """

    def __init__(
        self,
        warehouse: Sink,
        writer: TopicWriter,
        topics: Topics,
        observe_write: Callable[[str, float], None] | None = None,
    ) -> None:
        self.warehouse = warehouse
        self.writer = writer
        self.topics = topics
        self.observe_write = observe_write

    @contextmanager
    def _timed(self, table: str) -> Iterator[None]:
        started = time.perf_counter()
        yield
        if self.observe_write is not None:
            self.observe_write(table, time.perf_counter() - started)

    def insert_events(self, events: Sequence[StoredEvent]) -> None:
        """Store the redacted events."""
        with self._timed("refusal_events"):
            self.warehouse.insert_events(events)

    def insert_assessments(self, items: Sequence[StoredAssessment]) -> None:
        """Store assessments; publish each one, and sampled ones to the review queue too."""
        with self._timed("assessments"):
            self.warehouse.insert_assessments(items)
        for item in items:
            value = item.model_dump_json().encode()
            key = item.log_id.encode()
            self.writer.send(self.topics.assessments, value, key)
            if item.sampled_for_review:
                self.writer.send(self.topics.review_queue, value, key)

    def insert_batches(self, batches: Sequence[BatchRecord]) -> None:
        """Store the batch rows; publish their policy-gap flags to the policy-gap topic."""
        with self._timed("audit_batches"):
            self.warehouse.insert_batches(batches)
        for batch in batches:
            for message in gap_flag_messages(batch):
                self.writer.send(
                    self.topics.policy_gap_alerts, message, batch.policy_bundle.encode()
                )

    def insert_dead_letters(self, items: Sequence[DeadLetter]) -> None:
        """Store dead letters; publish their original bytes with the reason in headers."""
        with self._timed("dead_letters"):
            self.warehouse.insert_dead_letters(items)
        for letter in items:
            key = letter.log_id.encode() if letter.log_id else None
            # below the producer's default message.max.bytes (1,000,000) with headers; the
            # table keeps up to 1 MiB, and x-raw-truncated says when the topic copy is cut
            headers = dead_letter_headers(letter)
            raw = letter.raw
            if len(raw) > MAX_TOPIC_RAW_BYTES:
                raw = raw[:MAX_TOPIC_RAW_BYTES]
                headers.append(("x-raw-truncated", str(len(letter.raw))))
            self.writer.send(self.topics.dead_letters, raw, key, headers)
