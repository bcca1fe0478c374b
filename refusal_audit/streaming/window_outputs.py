"""A window's outputs as Kafka messages: the transactional worker's pipeline sink (issue 14).

:class:`TopicOutputs` implements ``refusal_audit.audit.pipeline.Sink`` without any storage: every
row the pipeline would store becomes a message, collected until :meth:`TopicOutputs.take`
hands the window's messages to the transaction that commits them with the window's offsets
(``streams.transactional``). The warehouse sink (``refusal_audit.streaming.warehouse_sink``) reads
them back
with ``read_committed``.

- ``insert_events`` -> role ``stored_events``, key the log id, value the ``StoredEvent``;
  through ``insert_located_events`` (the pipeline's ``LocatingSink``) with the headers
  ``x-input-source``, ``x-input-location``, ``x-input-length`` and ``x-input-sha256``: the
  input record's topic, ``partition P offset O``, and its whole value's length and SHA-256;
- ``insert_assessments`` -> ``assessments`` (and ``review_queue`` when sampled), key the log
  id, value the ``StoredAssessment``, header ``x-content-fingerprint`` the content fingerprint
  of the event copy assessed (from the window's ``insert_events``);
- ``insert_batches`` -> ``audit_batches``, key the batch id, value the ``BatchRecord``;
- ``insert_dead_letters`` -> ``dead_letters``, the original key, the record as kept with our
  headers (``streams.dead_letters.dead_letter_message``).

``stored_identities`` answers "nothing stored": a worker has no warehouse, so every event of a
window is audited; a committed window is never consumed again, and an aborted one left
nothing behind, so nothing is audited twice into a committed result.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from processors.adapters import SourceRecord
from processors.intake import record_digest
from schemas.audit import BatchRecord, StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent, StoredIdentity
from streams.dead_letters import (
    CONTENT_FINGERPRINT_HEADER,
    INPUT_LENGTH_HEADER,
    INPUT_LOCATION_HEADER,
    INPUT_SHA256_HEADER,
    INPUT_SOURCE_HEADER,
    OriginalRecord,
    dead_letter_message,
)
from streams.producer import Headers
from streams.topics import Topics
from streams.transactional import OutputMessage


def input_headers(record: SourceRecord) -> Headers:
    """The ``x-input-*`` headers of a stored-events message whose event came from
    ``record`` (module docstring)."""
    length, sha256 = record_digest(record)
    return [
        (INPUT_SOURCE_HEADER, record.source),
        (INPUT_LOCATION_HEADER, record.location),
        (INPUT_LENGTH_HEADER, str(length)),
        (INPUT_SHA256_HEADER, sha256),
    ]


class TopicOutputs:
    """Collects one window's output messages (module docstring). Thread-safe: the pipeline
    calls it from ``asyncio.to_thread``."""

    def __init__(self, topics: Topics) -> None:
        self.topics = topics
        self._messages: list[OutputMessage] = []
        self._originals: Mapping[tuple[str, str], OriginalRecord] = {}
        self._fingerprints: dict[str, str] = {}  # log id -> content fingerprint, this window
        self._lock = threading.Lock()

    def use_originals(self, originals: Mapping[tuple[str, str], OriginalRecord]) -> None:
        """Key, headers and tombstone flag of the window's records, keyed by ``(topic,
        kafka_location(partition, offset))``: dead-letter copies keep them."""
        self._originals = originals

    def _add(self, messages: Sequence[OutputMessage]) -> None:
        with self._lock:
            self._messages.extend(messages)

    def insert_events(self, events: Sequence[StoredEvent]) -> None:
        """Queue the stored (redacted) events."""
        self._queue_events(events, [None] * len(events))

    def insert_located_events(
        self, events: Sequence[StoredEvent], records: Sequence[SourceRecord]
    ) -> None:
        """Queue the stored (redacted) events, each with the ``x-input-*`` headers of its
        source record (``records``, aligned with ``events``; module docstring). Raises
        ``ValueError`` when the lengths differ."""
        if len(events) != len(records):
            raise ValueError(f"{len(events)} events but {len(records)} source records")
        self._queue_events(events, [input_headers(r) for r in records])

    def _queue_events(
        self, events: Sequence[StoredEvent], headers: Sequence[Headers | None]
    ) -> None:
        topic = self.topics.stored_events
        with self._lock:
            self._fingerprints.update((e.event.log_id, e.content_fingerprint) for e in events)
        self._add([
            OutputMessage(topic, e.model_dump_json().encode(), e.event.log_id.encode(), h)
            for e, h in zip(events, headers, strict=True)
        ])  # fmt: skip

    def insert_assessments(self, items: Sequence[StoredAssessment]) -> None:
        """Queue assessments, and the sampled ones for the review queue too."""
        out: list[OutputMessage] = []
        for item in items:
            value, key = item.model_dump_json().encode(), item.log_id.encode()
            fingerprint = self._fingerprints.get(item.log_id)
            headers: Headers | None = (
                [(CONTENT_FINGERPRINT_HEADER, fingerprint.encode())] if fingerprint else None
            )
            out.append(OutputMessage(self.topics.assessments, value, key, headers))
            if item.sampled_for_review:
                out.append(OutputMessage(self.topics.review_queue, value, key, headers))
        self._add(out)

    def insert_batches(self, batches: Sequence[BatchRecord]) -> None:
        """Queue the batch records."""
        topic = self.topics.audit_batches
        self._add([
            OutputMessage(topic, b.model_dump_json().encode(), b.batch_id.encode())
            for b in batches
        ])  # fmt: skip

    def insert_dead_letters(self, items: Sequence[DeadLetter]) -> None:
        """Queue dead letters in the dead-letter topic's layout."""
        out = []
        for letter in items:
            original = self._originals.get((letter.source, letter.location))
            value, key, headers = dead_letter_message(letter, original)
            out.append(OutputMessage(self.topics.dead_letters, value, key, headers))
        self._add(out)

    def stored_identities(self, keys: Sequence[tuple[str, str]]) -> Mapping[str, StoredIdentity]:
        """Nothing is stored by a worker (module docstring)."""
        return {}

    def take(self) -> list[OutputMessage]:
        """The messages collected since the last call (and forget them)."""
        with self._lock:
            out, self._messages = self._messages, []
        return out

    def discard(self) -> None:
        """Forget what was collected (the window was aborted)."""
        self.take()
