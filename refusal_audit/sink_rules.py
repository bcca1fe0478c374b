"""The duplicate-log-id rule in the warehouse sink (issue 14): the first stored copy wins.

A transactional worker applies the pipeline's rule (``refusal_audit.pipeline``) within its
window only: it has no warehouse. The sink applies it again, against the warehouse, to each
block before storing it (:func:`judge_block`).

Events. Per log id the first copy is the one stored first: the copy in the warehouse
(``Warehouse.stored_identities``, the fingerprint of its first fingerprinted copy), else the
block's copy read first (lowest offset: a log id's copies share a partition, the message key
being the log id; across partitions the lower partition). A copy with another non-empty
``content_fingerprint`` is not stored: it becomes a dead letter (stage ``validate``, reason
code ``duplicate_log_id``, the pipeline's reason text) whose id (``stored-events`` topic,
partition/offset, message bytes), ``raw`` (the redacted event as JSON, the input format) and
``created_at`` (the message's timestamp) all come from the message, so a redelivered block
yields the same row. A copy with the same fingerprint (a redelivery, or a block stored before
its offsets were committed) or with none (written before fingerprints) is stored again,
harmlessly (``ReplacingMergeTree``).

Assessments. A ``StoredAssessment`` names no event copy, so it is tied to one by what it
copies from its event and by when it was written: a worker writes a window's events, then its
assessments, in one transaction, and its windows one transaction after the other, so an
assessment's copy is the latest copy of its log id written no later than the assessment
(message timestamps, in milliseconds; at an equal time a first-content copy is preferred).
An assessment of ``(policy_bundle, log_id)`` is not stored when that copy, among the copies
with the assessment's bundle, event time, model and product, is a refused one; or, with no
such copy known, when those four values differ from the first copy's (its copy cannot have
the first copy's content). Known copies: the block's (message timestamps) and, unless the
block settles the assessment (no refused copy of its log id, and a first-content copy with
its attributes written before it), the copies refused before (this rule's dead letters,
``created_at`` = their message timestamp) and the stored rows (their ``ingested_at``, which
is no later than their message). An assessment whose log id has no first copy known (no copy
stored nor in the block) is stored. A block judged again after a crash, from the warehouse
and its messages, comes out the same.

Limits: an assessment read in an earlier block than its own event copy, when that copy is
refused but has the same bundle, event time, model and product as the first copy, cannot be
told from an assessment of the first copy, and is stored (it becomes current); copies of a
log id written by different workers at nearly the same time (their clocks, milliseconds
apart) may be mistaken for each other too. The exact tie needs the worker to send the copy's
content fingerprint with each assessment.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pydantic import ValidationError

from processors.intake import dead_letter_id
from schemas.audit import StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.events import RefusalEvent, StoredEvent
from streams.sink import kafka_location
from warehouse.store import Warehouse, to_utc

log = logging.getLogger("refusal_audit.sink")

#: What an assessment copies from its event: policy bundle, event time (ms), model, product.
Attributes = tuple[str, int, str, str]

#: The Unix epoch (UTC): message timestamps count milliseconds from it.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)

# no FINAL: a row stored twice is the same copy twice, harmless here
_REFUSED_COPIES = (
    "SELECT log_id, raw, created_at FROM {db:Identifier}.dead_letters "
    "WHERE reason_code = 'duplicate_log_id' AND source = {topic:String} "
    "AND log_id IN {ids:Array(String)}"
)
# every stored version (no FINAL): identical copies stored at different times all count
_STORED_COPIES = (
    "SELECT log_id, policy_bundle, event_time, model, product, content_fingerprint, "
    "max(ingested_at) AS at FROM {db:Identifier}.refusal_events "
    "WHERE log_id IN {ids:Array(String)} "
    "GROUP BY log_id, policy_bundle, event_time, model, product, content_fingerprint"
)


@dataclass(frozen=True)
class Located:
    """One ``stored-events`` message: its partition, offset, value, timestamp (ms since the
    epoch) and decoded event."""

    partition: int
    offset: int
    value: bytes
    timestamp: int
    event: StoredEvent


@dataclass(frozen=True)
class Timed:
    """One ``assessments`` message: its timestamp (ms since the epoch) and assessment."""

    timestamp: int
    assessment: StoredAssessment


@dataclass
class Judgement:
    """What to store of a block: ``events`` and ``assessments`` to insert, ``letters`` (one
    ``duplicate_log_id`` dead letter per refused copy) and ``dropped`` (the number of
    assessments not stored, those of refused copies)."""

    events: list[StoredEvent] = field(default_factory=list)
    assessments: list[StoredAssessment] = field(default_factory=list)
    letters: list[DeadLetter] = field(default_factory=list)
    dropped: int = 0


@dataclass(frozen=True)
class _Copy:
    attributes: Attributes | None  # None: unknown (matches every assessment)
    at: int  # when it was written (ms since the epoch; stored rows: their ingested_at)
    first: bool  # has the first copy's content (or no fingerprint)


def ms(value: datetime) -> int:
    """``value`` in milliseconds since the epoch (a naive value is taken as UTC)."""
    return (to_utc(value) - EPOCH) // _MS


def _attributes(event: RefusalEvent) -> Attributes:
    return (event.policy_bundle, ms(event.event_time), event.model, event.product)


def _assessed(item: StoredAssessment) -> Attributes:
    return (item.policy_bundle, ms(item.event_time), item.model, item.product)


def duplicate_reason(log_id: str) -> str:
    """The reason of a ``duplicate_log_id`` dead letter (the pipeline's text)."""
    return (
        f"log_id {log_id!r} was already stored with different content; the first copy "
        "counts (send a corrected event under a new log_id)"
    )


def duplicate_letter(copy: Located, topic: str) -> DeadLetter:
    """The dead letter of a refused copy read from ``topic`` (module docstring)."""
    event = copy.event
    location = kafka_location(copy.partition, copy.offset)
    return DeadLetter(
        dead_letter_id=dead_letter_id(topic, location, copy.value), stage="validate",
        reason_code="duplicate_log_id", reason=duplicate_reason(event.event.log_id),
        source=topic, location=location, raw=event.event.model_dump_json().encode(),
        log_id=event.event.log_id, created_at=EPOCH + copy.timestamp * _MS,
    )  # fmt: skip


def judge_block(
    store: Warehouse, topic: str, copies: Sequence[Located], assessments: Sequence[Timed]
) -> Judgement:
    """Apply the rule (module docstring) to a block's event ``copies`` (read from ``topic``)
    and ``assessments``. Reads the warehouse, writes nothing. Raises ``WarehouseError``."""
    keys = [(c.event.event.policy_bundle, c.event.event.log_id) for c in copies]
    keys += [(t.assessment.policy_bundle, t.assessment.log_id) for t in assessments]
    stored = store.stored_identities(keys) if keys else {}
    first = {i: s.content_fingerprint for i, s in stored.items() if s.content_fingerprint}
    out = Judgement()
    seen: dict[str, list[_Copy]] = defaultdict(list)
    for copy in sorted(copies, key=lambda c: (c.partition, c.offset)):
        event = copy.event
        log_id, fingerprint = event.event.log_id, event.content_fingerprint
        kept = not fingerprint or first.setdefault(log_id, fingerprint) == fingerprint
        seen[log_id].append(_Copy(_attributes(event.event), copy.timestamp, kept))
        if kept:
            out.events.append(event)
        else:
            out.letters.append(duplicate_letter(copy, topic))
    unsettled = sorted({t.assessment.log_id for t in assessments
                        if t.assessment.log_id in first and not _settled(t, seen)})  # fmt: skip
    known = _known_copies(store, topic, unsettled, first, seen)
    for timed in assessments:
        item = timed.assessment
        if item.log_id not in first or _of_first_copy(item, timed.timestamp, known[item.log_id]):
            out.assessments.append(item)
        else:
            out.dropped += 1
    return out


def _settled(timed: Timed, seen: Mapping[str, list[_Copy]]) -> bool:
    """Whether the block alone settles an assessment: it holds no refused copy of its log
    id, and a first-content copy with its attributes written no later than it."""
    copies, attributes = seen.get(timed.assessment.log_id, []), _assessed(timed.assessment)
    return all(c.first for c in copies) and any(
        c.attributes == attributes and c.at <= timed.timestamp for c in copies
    )


def _known_copies(
    store: Warehouse,
    topic: str,
    ids: Sequence[str],
    first: Mapping[str, str],
    seen: Mapping[str, list[_Copy]],
) -> dict[str, list[_Copy]]:
    """The known copies of the log ids in the block (``seen``) and, for ``ids``, those
    refused before and the stored ones."""
    known: dict[str, list[_Copy]] = defaultdict(list, {k: list(v) for k, v in seen.items()})
    if not ids:
        return known
    for row in store.select(_REFUSED_COPIES, {"topic": topic, "ids": list(ids)}):
        known[str(row["log_id"])].append(_Copy(_raw_attributes(row["raw"]),
                                               ms(row["created_at"]), False))  # fmt: skip
    for row in store.select(_STORED_COPIES, {"ids": list(ids)}):
        log_id, fingerprint = str(row["log_id"]), str(row["content_fingerprint"])
        attributes = (str(row["policy_bundle"]), ms(row["event_time"]), str(row["model"]),
                      str(row["product"]))  # fmt: skip
        known[log_id].append(_Copy(attributes, ms(row["at"]), fingerprint in ("", first[log_id])))
    return known


def _raw_attributes(raw: str | bytes) -> Attributes | None:
    """The attributes of a refused copy kept in a dead letter (None when unreadable: it then
    matches every assessment)."""
    try:
        return _attributes(RefusalEvent.model_validate_json(raw))
    except ValidationError as exc:
        log.warning("unreadable duplicate_log_id dead letter: %s", exc)
        return None


def _of_first_copy(item: StoredAssessment, written: int, copies: Sequence[_Copy]) -> bool:
    """Whether ``item``, written at ``written`` (ms), belongs to a copy with the first copy's
    content (module docstring)."""
    attributes = _assessed(item)
    if all(c.first for c in copies) and any(c.attributes == attributes for c in copies):
        return True  # nothing refused, and a first-content copy it may belong to
    before = [c for c in copies if c.attributes in (None, attributes) and c.at <= written]
    if before:
        latest = max(c.at for c in before)
        return any(c.first for c in before if c.at == latest)
    firsts = {c.attributes for c in copies if c.first}
    return not firsts or attributes in firsts
