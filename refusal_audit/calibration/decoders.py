"""Calibration and A/B messages from their bytes (``calibrate consume``, ``ab consume`` and
their ``produce`` commands): size and presence checks, decoding into the contracts of
``schemas.calibration`` or a :class:`~streams.consumer_loop.Rejected` with its reason code
(:data:`DEAD_LETTER_CODES`; fields and rules, never values), a run's id derived from where its
request was read (:func:`run_id_for`) and the request's redaction.
"""

from __future__ import annotations

import hashlib

import orjson
from pydantic import ValidationError

from processors.calibration.ab import EventError, parse_event
from processors.redaction import Redactor
from refusal_audit.calibration.runs import not_json
from schemas.calibration import ABEvent, CalibrationRequest
from streams.clients import Message
from streams.consumer_loop import Rejected
from streams.dead_letters import kafka_location

MAX_REQUEST_BYTES = 512 * 1024
"""A calibration request message longer than this is dead-lettered (``oversized``): two
texts of at most 20,000 characters and a spectrum fit in a fraction of it."""
MAX_EVENT_BYTES = 64 * 1024
"""An A/B event message longer than this is dead-lettered (``oversized``)."""

DEAD_LETTER_CODES: dict[str, str] = {
    "tombstone": "the message has no value",
    "oversized": "the message is longer than the limit",
    "not_json": "the message is not JSON (the parser's message, never the text)",
    "invalid_request": "not a CalibrationRequest (failing fields and rules, never values)",
    "unknown_clause": "the request's policy bundle or clause is not configured",
    "invalid_spectrum": "the bundle's calibration-spectrum block does not parse",
    "calibration_error": "the calibration failed unexpectedly (a bug: logged with its trace)",
    "invalid_event": "not an A/B event (failing fields, never values)",
}
"""Every dead-letter reason code of the two consumers, with what it means."""


def source_of(msg: Message) -> str:
    """Where a message came from, as stored with its rows: ``kafka:<topic> partition P offset
    O``."""
    return f"kafka:{msg.topic()} {kafka_location(msg.partition() or 0, msg.offset() or 0)}"


def run_id_for(topic: str, partition: int, offset: int, value: bytes) -> str:
    """The calibration run id of the request at ``topic``/``partition``/``offset`` with body
    ``value``: ``cal-`` and 32 hex digits of their SHA-256. The same message redelivered gets
    the same id; another message at the same place (a topic deleted and made again) another
    one, so it never replaces an older run."""
    digest = hashlib.sha256()
    for part in (topic.encode(), str(partition).encode(), str(offset).encode()):
        digest.update(len(part).to_bytes(8, "big") + part)
    digest.update(hashlib.sha256(value).digest())
    return f"cal-{digest.hexdigest()[:32]}"


def _size_and_presence(raw: bytes | None, limit: int) -> bytes:
    if raw is None:
        raise Rejected("tombstone", "the message has no value")
    if len(raw) > limit:
        raise Rejected("oversized", f"the message has {len(raw)} bytes; the limit is {limit}")
    return raw


def decode_request(raw: bytes | None, limit: int = MAX_REQUEST_BYTES) -> CalibrationRequest:
    """A message's value as a ``CalibrationRequest``. Raises :class:`Rejected` (``tombstone``,
    ``oversized``, ``not_json``, ``invalid_request``) naming fields and rules, never values."""
    body = _size_and_presence(raw, limit)
    try:
        return CalibrationRequest.model_validate_json(body)
    except ValidationError as exc:
        if not body.strip():
            raise Rejected("not_json", "the message is empty", "decode") from None
        parse_error = not_json(body)
        if parse_error is not None:
            raise Rejected("not_json", parse_error, "decode") from None
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        fields = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}" for e in errors
        )
        raise Rejected("invalid_request", f"not a CalibrationRequest: {fields}"[:2000]) from None


def decode_event(raw: bytes | None, limit: int = MAX_EVENT_BYTES) -> ABEvent:
    """A message's value as an A/B event (``parse_event``). Raises :class:`Rejected`
    (``tombstone``, ``oversized``, ``not_json``, ``invalid_event``) naming fields, never
    values."""
    body = _size_and_presence(raw, limit)
    if not body.strip():
        raise Rejected("not_json", "the message is empty", "decode")
    parse_error = not_json(body)
    if parse_error is not None:
        raise Rejected("not_json", parse_error, "decode")
    if not isinstance(orjson.loads(body), dict):
        raise Rejected("invalid_event", "invalid event: not a JSON object")
    try:
        return parse_event(body)
    except EventError as exc:
        raise Rejected("invalid_event", str(exc)[:2000]) from None


def redact_request(request: CalibrationRequest, redactor: Redactor | None) -> CalibrationRequest:
    """``request`` with its ``request`` and ``refusal`` texts redacted by ``redactor``, as
    ``refusal_audit.calibration.runs.read_requests`` does (unchanged without a redactor)."""
    if redactor is None:
        return request
    text = request.request
    return request.model_copy(
        update={
            "refusal": redactor.redact(request.refusal).text,
            "request": redactor.redact(text).text if text is not None else None,
        }
    )


__all__ = [
    "DEAD_LETTER_CODES",
    "MAX_EVENT_BYTES",
    "MAX_REQUEST_BYTES",
    "Rejected",
    "decode_event",
    "decode_request",
    "redact_request",
    "run_id_for",
    "source_of",
]
