"""The duplicate-log-id rule in the warehouse sink (issue 14): the first stored copy wins.

A transactional worker applies the pipeline's rule (``refusal_audit.audit.pipeline``) within its
window only: it has no warehouse. The sink applies it again, against the warehouse, to each
block before storing it (:func:`judge_block`).

Events. Per log id the first copy is the one stored first: the copy in the warehouse
(``Warehouse.first_fingerprints``: the fingerprint of its first fingerprinted copy), else the
block's copy read first (lowest offset: a log id's copies share a partition, the message key
being the log id; across partitions the lower partition). A copy with another non-empty
``content_fingerprint`` is not stored: it becomes a dead letter (stage ``validate``, reason
code ``duplicate_log_id``, the pipeline's reason text) that describes the copy's input
record: a worker sends each stored-events message with the ``x-input-*`` headers of the
record the event came from (``refusal_audit.streaming.window_outputs``: :class:`InputOrigin`), so
the
letter's ``source`` and ``location`` are the input topic and ``partition P offset O``,
``raw_length`` and ``raw_sha256`` the whole input value's length and SHA-256, and its id is
derived from those three (``dead_letter_id(source, location, sha256)``). Its ``raw`` is the
redacted event as JSON (the input format: the sink never sees the input bytes, and the event
as decoded is what was refused), so ``raw`` is not the bytes ``raw_sha256`` hashes;
``raw_truncated`` stays false. A message without those headers (written by a worker from
before them) gives the letter of old: the ``stored-events`` topic and the message's
partition/offset, the id of topic, location and message bytes, length and hash of ``raw``.
``created_at`` is the message's timestamp. Everything comes from the message, so a
redelivered block yields the same row. A copy with the same fingerprint (a redelivery, or a
block stored before its offsets were committed) or with none (written before fingerprints)
is stored again, harmlessly (``ReplacingMergeTree``).

Assessments. A worker sends each assessment message with the content fingerprint of the
event copy it assessed (header ``x-content-fingerprint``,
``refusal_audit.streaming.window_outputs``):
an assessment is stored unless its log id's first copy is known (stored, or in the block)
and has another fingerprint, the assessment of a refused copy. A message without the header
(written before it existed) is stored.

Limit: when two copies of a log id never seen before are audited in different windows and
the sink reads an assessment in an earlier block than every copy of its log id (a block may
end inside a window's transaction), nothing tells it yet which copy will be first: the
assessment is stored, and a copy refused later does not take it back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from processors.intake import dead_letter_id
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent
from streams.dead_letters import kafka_location
from warehouse.store import Warehouse, to_utc

log = logging.getLogger("refusal_audit.sink")

T = TypeVar("T")
U = TypeVar("U")

#: The Unix epoch (UTC): message timestamps count milliseconds from it.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


@dataclass(frozen=True)
class InputOrigin:
    """Where a stored event's input record was, from its stored-events message's headers
    (``streams.dead_letters.INPUT_*_HEADER``): ``source`` (the input topic), ``location``
    (``partition P offset O``), ``length`` and ``sha256`` (hex) of the whole input value."""

    source: str
    location: str
    length: int
    sha256: str


@dataclass(frozen=True)
class Located(Generic[T]):
    """One ``stored-events`` message: its partition, offset, value, timestamp (ms since the
    epoch), its event's log id and content fingerprint, ``item`` (what is stored of it: the
    warehouse sink keeps the event's row, ``warehouse.rows.event_row``, not the decoded
    model) and its input record's origin (None: the message has no ``x-input-*`` headers).
    ``value`` is the message as written, a ``StoredEvent`` as JSON: a refused copy's dead
    letter decodes it again (:func:`duplicate_letter`)."""

    partition: int
    offset: int
    value: bytes
    timestamp: int
    log_id: str
    fingerprint: str
    item: T
    origin: InputOrigin | None = None


@dataclass(frozen=True)
class Fingerprinted(Generic[T]):
    """One ``assessments`` message: the content fingerprint of the event copy it assessed
    (its ``x-content-fingerprint`` header; None without one), the assessment's log id and
    ``item``, what is stored of it (the sink: its row, ``warehouse.rows.assessment_row``)."""

    fingerprint: str | None
    log_id: str
    item: T


@dataclass
class Judgement(Generic[T, U]):
    """What to store of a block: ``events`` and ``assessments`` to insert (the ``item`` of
    each copy and assessment kept, in the order judged), ``letters`` (one
    ``duplicate_log_id`` dead letter per refused copy) and ``dropped`` (the number of
    assessments not stored, those of refused copies)."""

    events: list[T] = field(default_factory=list)
    assessments: list[U] = field(default_factory=list)
    letters: list[DeadLetter] = field(default_factory=list)
    dropped: int = 0


def ms(value: datetime) -> int:
    """``value`` in milliseconds since the epoch (a naive value is taken as UTC)."""
    return (to_utc(value) - EPOCH) // _MS


def duplicate_reason(log_id: str) -> str:
    """The reason of a ``duplicate_log_id`` dead letter (the pipeline's text)."""
    return (
        f"log_id {log_id!r} was already stored with different content; the first copy "
        "counts (send a corrected event under a new log_id)"
    )


def duplicate_letter(copy: Located[Any], topic: str) -> DeadLetter:
    """The dead letter of a refused copy read from ``topic``: it describes the copy's input
    record when the message names it (``copy.origin``), else the message (module
    docstring). Raises ``pydantic.ValidationError`` when ``copy.value`` is not a
    ``StoredEvent`` (the sink judges only messages that decoded)."""
    event, origin = StoredEvent.model_validate_json(copy.value), copy.origin
    raw = event.event.model_dump_json().encode()
    if origin is None:
        location = kafka_location(copy.partition, copy.offset)
        source, ident, described = topic, dead_letter_id(topic, location, copy.value), {}
    else:
        source, location = origin.source, origin.location
        ident = dead_letter_id(source, location, origin.sha256.encode())
        described = {"raw_length": origin.length, "raw_sha256": origin.sha256}
    return DeadLetter(
        dead_letter_id=ident, stage="validate", reason_code="duplicate_log_id",
        reason=duplicate_reason(event.event.log_id), source=source, location=location,
        raw=raw, log_id=event.event.log_id, created_at=EPOCH + copy.timestamp * _MS,
        **described,
    )  # fmt: skip


def judge_block(
    store: Warehouse,
    topic: str,
    copies: Sequence[Located[T]],
    assessments: Sequence[Fingerprinted[U]],
) -> Judgement[T, U]:
    """Apply the rule (module docstring) to a block's event ``copies`` (read from ``topic``)
    and ``assessments``. Reads the warehouse, writes nothing. Raises ``WarehouseError``."""
    ids = [c.log_id for c in copies] + [f.log_id for f in assessments]
    stored = store.first_fingerprints(ids) if ids else {}
    first = {i: f for i, f in stored.items() if f}
    out: Judgement[T, U] = Judgement()
    for copy in sorted(copies, key=lambda c: (c.partition, c.offset)):
        log_id, fingerprint = copy.log_id, copy.fingerprint
        if not fingerprint or first.setdefault(log_id, fingerprint) == fingerprint:
            out.events.append(copy.item)
        else:
            out.letters.append(duplicate_letter(copy, topic))
    for item in assessments:
        known = first.get(item.log_id)
        if known is None or not item.fingerprint or item.fingerprint == known:
            out.assessments.append(item.item)
        else:
            out.dropped += 1
    return out
