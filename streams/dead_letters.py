"""Dead-letter topic messages: the framing of a dead letter's copy on the dead-letter topic
(:func:`dead_letter_message`), read back by the warehouse sink
(:func:`dead_letter_from_message`), and what a consumed record carries besides its value
(:class:`OriginalRecord`), kept on its dead letter's copy. Written by the transactional
worker (``refusal_audit.streaming.window_outputs``), the faust worker's writer
(``streams.result_writer``) and the service consumers (``streams.consumer_loop``); also the
headers of the transactional worker's result messages that the sink's ``duplicate_log_id``
dead letters are built from (``INPUT_*_HEADER``, :data:`CONTENT_FINGERPRINT_HEADER`).

The copy's value is the record's bytes as the dead letter keeps them (PII redacted), cut to
fit the producer's size limit. The headers
are ours first, in this order: ``x-dead-letter-id``, ``x-stage``, ``x-reason-code``,
``x-reason``, ``x-source``, ``x-source-location``, for Kafka input ``x-source-topic``,
``x-source-partition``, ``x-source-offset``, ``x-log-id`` whenever the log id is known,
``x-dead-letter-created-at``, then
as they apply ``x-tombstone: true`` (a null value stays null), ``x-original-key-truncated``
(a key over 64 KiB is cut; the header gives its length), ``x-original-headers-dropped``
(original headers beyond 64 KiB in all, how many), and ``x-raw-truncated`` (the whole
original value's length) with ``x-raw-sha256`` (its SHA-256) whenever the value sent is not
the whole value. The original record's headers follow, each renamed
``x-original-header-<name>`` with its value unchanged (not redacted), in their original
order (duplicates kept). When the original record is known (the worker passes it:
``ResultWriter.use_originals``) the key is the original key (none stays none); without it
the key is the log id, if known (intake keeps the log id a decode failure could read).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from schemas.deadletter import DeadLetter
from streams.producer import Headers

MAX_TOPIC_RAW_BYTES = 900_000
# key + value + headers of a dead-letter copy stay below this, under the producer's default
# message.max.bytes (1,000,000) with room for librdkafka's per-record overhead
MAX_TOPIC_MESSAGE_BYTES = 990_000
MAX_ORIGINAL_HEADERS_BYTES = 65_536
MAX_ORIGINAL_KEY_BYTES = 65_536
ORIGINAL_HEADER_PREFIX = "x-original-header-"
#: Header of a transactional worker's assessment message: the content fingerprint of the
#: event copy it assessed (the warehouse sink ties the assessment to that copy).
CONTENT_FINGERPRINT_HEADER = "x-content-fingerprint"
#: Headers of a transactional worker's stored-events message: where the event's input
#: record was (its ``SourceRecord.source`` and ``location``) and the whole original value's
#: length and SHA-256 (hex), so the warehouse sink's ``duplicate_log_id`` dead letter of a
#: refused copy describes the input record (``refusal_audit.streaming.sink_rules``).
INPUT_SOURCE_HEADER = "x-input-source"
INPUT_LOCATION_HEADER = "x-input-location"
INPUT_LENGTH_HEADER = "x-input-length"
INPUT_SHA256_HEADER = "x-input-sha256"
_HEADER_OVERHEAD = 10  # varints and attributes of one serialized header, generously
# room for x-raw-truncated and x-raw-sha256 (names, a 20-digit length, 64 hex) and slack
_TRUNCATION_HEADERS_BYTES = 192
_KAFKA_LOCATION = re.compile(r"^partition (\d+) offset (\d+)$")

OriginalHeaders = tuple[tuple[str, bytes | None], ...]


def kafka_location(partition: int, offset: int) -> str:
    """The ``SourceRecord.location`` of a Kafka record (parsed back by ``dead_letter_headers``)."""
    return f"partition {partition} offset {offset}"


@dataclass(frozen=True)
class OriginalRecord:
    """What a consumed Kafka record carries besides its value bytes.

    ``key`` as consumed (None: no key); ``headers`` in order, values as consumed;
    ``tombstone`` True when the value was null (the worker passes it on as ``b""``).
    """

    key: bytes | None = None
    headers: OriginalHeaders = ()
    tombstone: bool = False


def original_record(key: bytes | None, headers: Any, value: bytes | None) -> OriginalRecord:
    """An ``OriginalRecord`` from a consumed message's key, headers and value.

    ``headers`` may be None, a sequence of ``(name, value)`` pairs (aiokafka, confluent-kafka)
    or a mapping (faust); str values are UTF-8 encoded.
    """
    pairs = headers.items() if isinstance(headers, Mapping) else (headers or ())
    normalized = tuple(
        (str(name), value.encode() if isinstance(value, str) else value) for name, value in pairs
    )
    return OriginalRecord(key, normalized, value is None)


def window_originals(events: Sequence[Any]) -> dict[tuple[str, str], OriginalRecord]:
    """The originals of a window of faust events, keyed like their dead letters.

    Keys are ``(topic, kafka_location(partition, offset))``, the ``source`` and ``location``
    the worker gives each ``SourceRecord``; pass the result to
    ``streams.result_writer.ResultWriter.use_originals``.
    """
    originals: dict[tuple[str, str], OriginalRecord] = {}
    for event in events:
        m = event.message
        originals[(m.topic, kafka_location(m.partition, m.offset))] = original_record(
            m.key, m.headers, m.value
        )
    return originals


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
    headers.append(("x-dead-letter-created-at", letter.created_at.isoformat()))
    return headers


def _header_bytes(name: str, value: str | bytes | None) -> int:
    size = len(value.encode()) if isinstance(value, str) else len(value or b"")
    return len(name.encode()) + size + _HEADER_OVERHEAD


def dead_letter_message(
    letter: DeadLetter, original: OriginalRecord | None = None
) -> tuple[bytes | None, bytes | None, Headers]:
    """``(value, key, headers)`` of the dead-letter topic copy of ``letter``.

    See the module docstring for the layout: our headers first (``dead_letter_headers``,
    then as they apply ``x-tombstone``, ``x-original-key-truncated``, ``x-raw-truncated`` +
    ``x-raw-sha256``, ``x-original-headers-dropped``), then the original headers renamed.
    ``original`` is the consumed record's key, headers and tombstone flag, when known.
    """
    ours = dead_letter_headers(letter)
    tombstone = original is not None and original.tombstone and not letter.raw
    if tombstone:
        ours.append(("x-tombstone", "true"))
    originals: Headers = []
    if original is None:
        log_id = dict(ours).get("x-log-id")
        key = log_id.encode() if isinstance(log_id, str) else None
    else:
        key = original.key
        if key is not None and len(key) > MAX_ORIGINAL_KEY_BYTES:
            ours.append(("x-original-key-truncated", str(len(key))))
            key = key[:MAX_ORIGINAL_KEY_BYTES]
        budget, dropped = MAX_ORIGINAL_HEADERS_BYTES, 0
        for name, value in original.headers:
            renamed = ORIGINAL_HEADER_PREFIX + name
            size = _header_bytes(renamed, value)
            if dropped or size > budget:
                dropped += 1
                continue
            budget -= size
            originals.append((renamed, value))
        if dropped:
            ours.append(("x-original-headers-dropped", str(dropped)))
    if tombstone:
        return None, key, [*ours, *originals]
    used = len(key or b"") + sum(_header_bytes(n, v) for n, v in [*ours, *originals])
    limit = min(MAX_TOPIC_RAW_BYTES, MAX_TOPIC_MESSAGE_BYTES - used - _TRUNCATION_HEADERS_BYTES)
    raw = letter.raw[:limit]
    if letter.raw_truncated or len(raw) < len(letter.raw):
        ours += [
            ("x-raw-truncated", str(letter.raw_length)),
            ("x-raw-sha256", letter.raw_sha256),
        ]
    return raw, key, [*ours, *originals]


def dead_letter_from_message(value: bytes | None, headers: Any) -> DeadLetter:
    """The ``DeadLetter`` a dead-letter topic message was made from (``dead_letter_message``),
    for a sink that stores the topic in the warehouse: ids, stage, reason, source, location,
    log id and creation time from our headers; ``raw`` is the value as sent (cut only when
    it exceeded the producer's limit, then ``raw_truncated`` with the whole value's length
    and SHA-256 from ``x-raw-truncated`` / ``x-raw-sha256``). Raises ``ValueError`` when a
    header it needs is missing (the message was not written by ``dead_letter_message``)."""
    pairs = headers.items() if isinstance(headers, Mapping) else (headers or ())
    found: dict[str, str] = {}
    for name, raw_value in pairs:
        if not str(name).startswith(ORIGINAL_HEADER_PREFIX) and str(name) not in found:
            text = raw_value.decode() if isinstance(raw_value, bytes) else str(raw_value or "")
            found[str(name)] = text
    needed = ("x-dead-letter-id", "x-stage", "x-reason-code", "x-reason", "x-source",
              "x-source-location", "x-dead-letter-created-at")  # fmt: skip
    missing = [n for n in needed if n not in found]
    if missing:
        raise ValueError(f"not a dead-letter message: no {', '.join(missing)} header")
    raw = value or b""
    data: dict[str, Any] = {
        "dead_letter_id": found["x-dead-letter-id"],
        "stage": found["x-stage"],
        "reason_code": found["x-reason-code"],
        "reason": found["x-reason"],
        "source": found["x-source"],
        "location": found["x-source-location"],
        "raw": raw,
        "log_id": found.get("x-log-id"),
        "created_at": found["x-dead-letter-created-at"],
    }
    if "x-raw-truncated" in found:
        if "x-raw-sha256" not in found:
            raise ValueError("not a dead-letter message: x-raw-truncated without x-raw-sha256")
        data.update(
            raw_length=int(found["x-raw-truncated"]),
            raw_sha256=found["x-raw-sha256"],
            raw_truncated=True,
        )
    return DeadLetter.model_validate(data)
