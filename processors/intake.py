"""Intake: one source record in, a redacted, pre-filtered ``StoredEvent`` or a dead letter out.

Pure (no I/O): the caller reads the record and stores the outcome. Batch mode and the
streaming worker both call ``prepare``; the stages are decode -> policy-bundle check ->
redaction -> refusal pre-filter.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import orjson
from pydantic import AwareDatetime, TypeAdapter

from processors.adapters import (
    DecodeFailure,
    DecodeOptions,
    InputFormat,
    SourceRecord,
    decode_record,
)
from processors.prefilter import RefusalDecision, TextScorer, detect_refusals
from processors.redaction import Redactor, redact_bytes, redact_event
from schemas.deadletter import DeadLetter, DeadLetterStage
from schemas.events import RefusalEvent, StoredEvent

if TYPE_CHECKING:  # numpy with it: a worker without the cascade never loads numpy
    from processors.refusal_cascade import Cascade

DEFAULT_DEAD_LETTER_MAX_RAW_BYTES = 1_048_576
_EVENT_TIME: TypeAdapter[datetime] = TypeAdapter(AwareDatetime)  # RefusalEvent.event_time's type


def dead_letter_id(source: str, location: str, raw: bytes) -> str:
    """Deterministic id of a dead letter: BLAKE2b-128 of source, location and raw bytes."""
    h = hashlib.blake2b(digest_size=16)
    for part in (source.encode(), location.encode(), raw):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def content_fingerprint(event: RefusalEvent) -> str:
    """Identity of an event's content: BLAKE2b-128 (32 hex) of its canonical JSON.

    Every field of the decoded ``RefusalEvent`` counts (log id, event time, texts, model,
    product, bundle, conversation, classifier, attributes), keys sorted, the event time in
    UTC to the millisecond (the same instant written with another offset, or differing
    below the millisecond the warehouse keeps, is the same), before redaction,
    so a redelivered copy has the same fingerprint whatever the redaction settings, and a
    copy that differs in any field has another one.
    """
    # one instant, one text: UTC, to the millisecond the warehouse keeps, in pydantic's form
    # (the field's own serializer, without copying the event to put the time in)
    utc = event.event_time.astimezone(UTC)
    utc = utc.replace(microsecond=utc.microsecond // 1000 * 1000)
    data = event.model_dump(mode="json")
    data["event_time"] = _EVENT_TIME.dump_python(utc, mode="json")
    canonical = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(canonical, digest_size=16).hexdigest()


def record_digest(record: SourceRecord) -> tuple[int, str]:
    """``(length, SHA-256 hex)`` of ``record``'s whole original value: the reader's
    ``full_length``/``full_sha256`` when it cut the record, else of ``raw``."""
    full_length = record.full_length if record.full_length is not None else len(record.raw)
    return full_length, record.full_sha256 or hashlib.sha256(record.raw).hexdigest()


def make_dead_letter(
    record: SourceRecord,
    stage: DeadLetterStage,
    reason_code: str,
    reason: str,
    now: datetime,
    log_id: str | None = None,
    redactor: Redactor | None = None,
    max_raw_bytes: int = DEFAULT_DEAD_LETTER_MAX_RAW_BYTES,
) -> DeadLetter:
    """A dead letter for ``record`` keeping its raw bytes and its reason.

    The bytes are kept whole up to ``max_raw_bytes``, else their first ``max_raw_bytes``
    (``raw_truncated``); ``raw_length`` and ``raw_sha256`` describe the whole original value
    (the reader's ``full_length``/``full_sha256`` when it already cut the record). With a
    ``redactor``, PII in the kept bytes and the reason is replaced by placeholders (the id
    is still derived from the original bytes, so it stays stable).
    """
    full_length, full_sha256 = record_digest(record)
    raw = record.raw[:max_raw_bytes]
    if redactor is not None:
        raw = redact_bytes(raw, redactor)
        reason = redactor.redact(reason).text
    return DeadLetter(
        dead_letter_id=dead_letter_id(record.source, record.location, record.raw),
        stage=stage,
        reason_code=reason_code,
        reason=reason,
        source=record.source,
        location=record.location,
        raw=raw,
        raw_length=full_length,
        raw_sha256=full_sha256,
        raw_truncated=full_length > min(len(record.raw), max_raw_bytes),
        log_id=log_id,
        created_at=now,
    )


@dataclass(frozen=True)
class IntakeSettings:
    """What intake needs besides the record.

    ``known_bundles`` are the configured policy-bundle names (an event naming another is
    dead-lettered as ``unknown_policy_bundle``); ``redactor`` None disables redaction;
    ``prefilter`` False treats every event as a refusal; ``refusal_model`` (a trained
    scorer, ``processors.refusal_model.RefusalModel``) replaces the cue scorer's decision when
    set (the cues still explain it); ``request_aware`` reads each response against its
    request (``processors.request_aware``, setting ``prefilter_request_aware``);
    ``cascade`` (``processors.refusal_cascade``) re-decides the text decisions in its
    uncertain band with an encoder head; a dead letter keeps a record's bytes whole up to
    ``dead_letter_max_raw_bytes``.
    """

    decode: DecodeOptions
    known_bundles: Collection[str]
    redactor: Redactor | None
    prefilter: bool = True
    dead_letter_max_raw_bytes: int = DEFAULT_DEAD_LETTER_MAX_RAW_BYTES
    refusal_model: TextScorer | None = None
    request_aware: bool = True
    cascade: Cascade | None = None


_PASS_ALL = RefusalDecision(is_refusal=True, kind="full", score=1.0, cues=(), source="text")


def prepare(
    record: SourceRecord, fmt: InputFormat, settings: IntakeSettings, now: datetime
) -> StoredEvent | DeadLetter:
    """Decode, check, redact and pre-filter one record.

    Returns the ``StoredEvent`` (redacted texts, pre-filter decision, ``ingested_at=now``) or
    a ``DeadLetter`` (stage ``decode`` or ``validate``) naming the reason. Never raises for
    bad input.
    """
    return prepare_many([record], fmt, settings, [now])[0]


def _checked(
    record: SourceRecord, fmt: InputFormat, settings: IntakeSettings, now: datetime
) -> tuple[RefusalEvent, dict[str, int], str] | DeadLetter:
    decoded = decode_record(record, fmt, settings.decode)
    if isinstance(decoded, DecodeFailure):
        return make_dead_letter(
            record,
            "decode",
            decoded.reason_code,
            decoded.reason,
            now,
            decoded.log_id,
            settings.redactor,
            settings.dead_letter_max_raw_bytes,
        )
    if decoded.policy_bundle not in settings.known_bundles:
        known = ", ".join(sorted(settings.known_bundles))
        return make_dead_letter(
            record,
            "validate",
            "unknown_policy_bundle",
            f"policy bundle {decoded.policy_bundle!r} is not configured (known: {known})",
            now,
            decoded.log_id,
            settings.redactor,
            settings.dead_letter_max_raw_bytes,
        )
    redactions: dict[str, int] = {}
    fingerprint = content_fingerprint(decoded)
    event = decoded
    if settings.redactor is not None:
        event, redactions = redact_event(decoded, settings.redactor)
    return event, redactions, fingerprint


def prepare_many(
    records: Sequence[SourceRecord],
    fmt: InputFormat,
    settings: IntakeSettings,
    nows: Sequence[datetime],
) -> list[StoredEvent | DeadLetter]:
    """:func:`prepare` for a chunk of records, pre-filtering the chunk's events at once.

    ``nows`` holds each record's intake time (same length as ``records``; ``ValueError``
    otherwise). Returns one outcome per record, in order (a trained
    ``settings.refusal_model`` scores the whole chunk with one sparse-matrix product).
    Never raises for bad input.
    """
    if len(nows) != len(records):
        raise ValueError(f"{len(records)} records but {len(nows)} intake times")
    checked = [
        _checked(record, fmt, settings, now) for record, now in zip(records, nows, strict=True)
    ]
    events = [c[0] for c in checked if not isinstance(c, DeadLetter)]
    if settings.prefilter:
        decided = detect_refusals(events, settings.refusal_model, settings.request_aware)
        if settings.cascade is not None:
            decided, _ = settings.cascade.decide(
                decided, [e.request for e in events], [e.response for e in events]
            )
        decisions = iter(decided)
    else:
        decisions = iter([_PASS_ALL] * len(events))
    out: list[StoredEvent | DeadLetter] = []
    for record, now, c in zip(records, nows, checked, strict=True):
        if isinstance(c, DeadLetter):
            out.append(c)
            continue
        event, redactions, fingerprint = c
        decision = next(decisions)
        detected = decision.detected if decision.source == "classifier" else decision
        if not settings.prefilter:
            detected = None  # nothing was detected: every event passes
        out.append(
            StoredEvent(
                event=event,
                redactions=redactions,
                is_refusal=decision.is_refusal,
                refusal_kind=decision.kind,
                refusal_score=decision.score,
                refusal_cues=list(decision.cues),
                source=record.source,
                ingested_at=now,
                content_fingerprint=fingerprint,
                detected_is_refusal=detected.is_refusal if detected is not None else None,
                detected_refusal_score=detected.score if detected is not None else None,
                refusal_disagreement=decision.disagreement,
            )
        )
    return out
