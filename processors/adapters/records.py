"""The input adapters' data types: what a reader hands in, what comes back, and the options.

``SourceRecord`` (raw bytes and where they came from), ``DecodeFailure`` (a reason code of
``REASON_CODES`` and a message), ``FieldMapping`` (``mapped-jsonl``'s source fields) and
``DecodeOptions`` (limits and defaults); ``InputFormat`` names the formats.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Final, Literal

InputFormat = Literal["jsonl", "mapped-jsonl", "openai", "xstest-csv"]
INPUT_FORMATS: Final[tuple[InputFormat, ...]] = ("jsonl", "mapped-jsonl", "openai", "xstest-csv")

REASON_CODES: Final[frozenset[str]] = frozenset(
    {
        "encoding",  # the bytes are not valid UTF-8
        "not_json",  # not parseable JSON (includes truncated JSON)
        "not_object",  # valid JSON, but not an object
        "malformed_row",  # a CSV row that cannot be parsed or has the wrong number of columns
        "oversized",  # record over max_record_bytes, or request/response over max_text_chars
        "tombstone",  # a Kafka record with a null value (a deletion marker, no event)
        "missing_log_id",  # no log_id (absent, null or blank)
        "missing_field",  # a required field is absent or null
        "wrong_type",  # a field has the wrong JSON type
        "unknown_field",  # a top-level key the RefusalEvent contract does not know
        "bad_timestamp",  # event_time is not an RFC 3339 date-time
        "naive_timestamp",  # event_time has no UTC offset
        "empty_text",  # request or response is empty or only whitespace
        "invalid_value",  # right type, but violates a constraint (length, range, ...)
        "unsupported_version",  # schema_version this code does not read
        "bad_mapping",  # mapped-jsonl without a usable FieldMapping
    }
)


@dataclass(frozen=True)
class SourceRecord:
    """One record read from a file or a topic, not yet decoded.

    ``source`` is the file path or topic name; ``location`` says where in it (``"line 12"``,
    ``"row 7 (line 15)"``, ``"partition 0 offset 42"``); ``raw`` the original bytes (possibly
    truncated to ``max_record_bytes + 1`` by the reader, which ``decode_record`` reports as
    ``oversized``). For CSV, ``raw`` is the file's header line followed by the row's original
    lines, so a dead-lettered row can be replayed on its own; ``fields`` is the pre-parsed row
    (column -> value) or ``None``, in which case ``decode_record`` parses ``raw`` itself.
    When the reader cut ``raw``, ``full_length`` and ``full_sha256`` (hex SHA-256) describe
    the whole original value (None: ``raw`` is whole). ``tombstone`` marks a Kafka record
    with a null value (``raw`` is then ``b""``); it is dead-lettered as ``tombstone``.
    """

    source: str
    location: str
    raw: bytes
    fields: Mapping[str, str] | None = None
    full_length: int | None = None
    full_sha256: str | None = None
    tombstone: bool = False


@dataclass(frozen=True)
class DecodeFailure:
    """Why a record could not be decoded.

    ``reason_code`` is one of ``REASON_CODES``; ``reason`` a human-readable message naming the
    field (e.g. ``"field 'event_time': 'yesterday' is not an RFC 3339 timestamp"``);
    ``log_id`` the record's log id when it could be read (for the dead letter), else ``None``.
    """

    reason_code: str
    reason: str
    log_id: str | None = None


MAPPABLE_FIELDS: Final[tuple[str, ...]] = (
    "log_id",
    "event_time",
    "request",
    "response",
    "model",
    "product",
    "policy_bundle",
    "conversation_id",
    "classifier",
    "classifier.flagged",
    "classifier.score",
    "classifier.labels",
    "classifier.is_refusal",
)
REQUIRED_MAPPED_FIELDS: Final[tuple[str, ...]] = ("log_id", "request", "response")


@dataclass(frozen=True)
class FieldMapping:
    """How ``mapped-jsonl`` records map onto ``RefusalEvent`` fields.

    ``targets`` maps an event field (one of ``MAPPABLE_FIELDS``; ``classifier`` takes a whole
    object, ``classifier.<name>`` one of its fields) to a source field; a source field may be a
    dotted path into nested objects (``meta.ts``; an exact top-level key ``"meta.ts"`` wins).
    ``log_id``, ``request`` and ``response`` must be mapped. Raises ``ValueError`` when the
    targets are invalid.
    """

    targets: Mapping[str, str]

    def __post_init__(self) -> None:
        targets = dict(self.targets)
        unknown = sorted(set(targets) - set(MAPPABLE_FIELDS))
        if unknown:
            raise ValueError(
                f"unknown mapping target(s) {', '.join(map(repr, unknown))}; "
                f"mappable fields: {', '.join(MAPPABLE_FIELDS)}"
            )
        missing = [t for t in REQUIRED_MAPPED_FIELDS if t not in targets]
        if missing:
            raise ValueError(
                f"mapping must map {', '.join(REQUIRED_MAPPED_FIELDS)}; missing: "
                f"{', '.join(missing)} (e.g. --map request=prompt,response=response,log_id=id)"
            )
        if "classifier" in targets and any(t.startswith("classifier.") for t in targets):
            raise ValueError("map either 'classifier' or 'classifier.<field>' targets, not both")
        for target, path in targets.items():
            if not isinstance(path, str) or not path or any(not p for p in path.split(".")):
                raise ValueError(f"mapping target {target!r}: bad source field {path!r}")
        object.__setattr__(self, "targets", MappingProxyType(targets))

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.targets.items())))

    @classmethod
    def parse(cls, spec: str) -> FieldMapping:
        """Parse ``"request=prompt,response=response,log_id=id"`` (``TARGET=SOURCE``, comma
        separated, whitespace around items ignored).

        Raises ``ValueError`` on bad syntax, an empty entry, a repeated or unknown target, or
        when ``log_id``, ``request`` or ``response`` is not mapped.
        """
        targets: dict[str, str] = {}
        if not spec.strip():
            raise ValueError("empty field mapping; expected TARGET=SOURCE[,TARGET=SOURCE...]")
        for item in spec.split(","):
            entry = item.strip()
            target, sep, source = entry.partition("=")
            target, source = target.strip(), source.strip()
            if not sep or not target or not source or "=" in source:
                raise ValueError(f"bad mapping entry {entry!r}: expected TARGET=SOURCE")
            if target in targets:
                raise ValueError(f"mapping target {target!r} given twice")
            targets[target] = source
        return cls(targets)


@dataclass(frozen=True)
class DecodeOptions:
    """Limits and defaults for ``decode_record``.

    ``max_record_bytes`` / ``max_text_chars`` mirror ``Settings``; ``default_event_time``
    (timezone-aware) is used when a format or record has no timestamp; ``default_model`` /
    ``default_product`` when the record names none; ``mapping`` is required by
    ``mapped-jsonl``. Raises ``ValueError`` for a naive ``default_event_time`` or a
    non-positive limit.
    """

    max_record_bytes: int = 262_144
    max_text_chars: int = 32_000
    default_event_time: datetime | None = None
    default_model: str | None = None
    default_product: str | None = None
    mapping: FieldMapping | None = None

    def __post_init__(self) -> None:
        if self.max_record_bytes < 1 or self.max_text_chars < 1:
            raise ValueError("max_record_bytes and max_text_chars must be positive")
        t = self.default_event_time
        if t is not None and (t.tzinfo is None or t.utcoffset() is None):
            raise ValueError("default_event_time must be timezone-aware")
