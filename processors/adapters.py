"""Input adapters: decode one logged record into a ``RefusalEvent``, or say precisely why not.

Pure functions, no I/O: batch mode (``refusal_audit.audit.readers``) and the Kafka worker both hand
a ``SourceRecord`` (the raw bytes plus where they came from) to ``decode_record``, which
returns a ``RefusalEvent`` or a ``DecodeFailure`` (a machine-readable ``reason_code`` and a
human-readable ``reason`` naming the field). Bad input never raises.

Formats (``InputFormat``):

``jsonl``
    One JSON object per record matching the ``RefusalEvent`` wire contract exactly
    (``event_time`` an RFC 3339 string with offset; unknown keys rejected).
``mapped-jsonl``
    Any JSON object; a ``FieldMapping`` says which source field feeds which event field, every
    other top-level source field is kept in ``attributes`` (strings as is, other values as
    compact JSON; a nested object a dotted path read from keeps its other keys). ``log_id`` and
    ``conversation_id`` may be integers; a mapped ``event_time`` may be RFC 3339 or Unix
    seconds, an unmapped one is ``default_event_time``; ``model`` defaults to
    ``default_model`` or ``"unknown"``, ``product`` to ``default_product``.
``openai``
    A chat-completions log record ``{"request": {"model", "messages": [...]}, "response":
    <ChatCompletion>, "log_id"?, "metadata"?, "conversation_id"?, "policy_bundle"?,
    "classifier"?}``: request = the last user message's text (string content, or its
    ``{"type": "text"}`` parts joined by newlines); response = ``choices[0].message.content``,
    or ``.refusal`` when content is null/empty (then ``classifier.is_refusal`` is set and
    ``attributes["openai.refusal_field"] = "true"``); log_id = ``log_id`` else
    ``response.id``; event_time = ``response.created`` (UTC) else ``default_event_time``;
    model = ``response.model`` else ``request.model`` else the defaults; ``metadata`` goes to
    ``attributes`` except ``metadata.product`` (the product); other top-level keys go to
    ``attributes`` too, plus ``openai.finish_reason`` and ``openai.response_id``.
``xstest-csv``
    A row of an XSTest v2 completions CSV (``id, type, prompt, completion, annotation_1,
    annotation_2, agreement, final_label``): request = prompt, response = completion, every
    other column an attribute; log_id = ``xstest-<file model>-<id>`` where the file model comes
    from the source name (``xstest_v2_completions_gpt4.csv`` -> ``gpt4``) and is also the
    event's model unless ``default_model`` is set; product ``xstest`` unless
    ``default_product``; event_time = ``default_event_time`` (required).

Reason codes (``REASON_CODES``): ``encoding``, ``not_json``, ``not_object``,
``malformed_row``, ``oversized``, ``missing_log_id``, ``missing_field``, ``wrong_type``,
``unknown_field``, ``bad_timestamp``, ``naive_timestamp``, ``empty_text``,
``invalid_value``, ``unsupported_version``, ``bad_mapping``, ``tombstone``.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import PurePath
from types import MappingProxyType
from typing import Any, Final, Literal, NoReturn

import orjson
from pydantic import ValidationError

from schemas.events import EARLIEST_EVENT_TIME, LATEST_EVENT_TIME, RefusalEvent

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

XSTEST_COLUMNS: Final[tuple[str, ...]] = (
    "id",
    "type",
    "prompt",
    "completion",
    "annotation_1",
    "annotation_2",
    "agreement",
    "final_label",
)

_BOM: Final = b"\xef\xbb\xbf"


# --------------------------------------------------------------------------------------------
# Public data types


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


# --------------------------------------------------------------------------------------------
# Internals: a failure raised inside the decoders, turned into a DecodeFailure at the top


class _Reject(Exception):
    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _reject(code: str, reason: str) -> NoReturn:
    raise _Reject(code, reason)


class _Ctx:
    """Per-call scratch: the log_id as soon as it is known, for the DecodeFailure."""

    def __init__(self) -> None:
        self.log_id: str | None = None


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _short(value: object, limit: int = 60) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _to_text(raw: bytes) -> str:
    if raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : exc.start + 1].hex()
        _reject(
            "encoding",
            f"record is not valid UTF-8: {exc.reason} (byte 0x{bad} at offset {exc.start})",
        )


def _load_object(raw: bytes) -> dict[str, Any]:
    text = _to_text(raw)
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        _reject("not_json", f"record is not valid JSON: {exc}")
    if not isinstance(value, dict):
        _reject("not_object", f"record is a JSON {_json_type(value)}, expected a JSON object")
    return value


def _check_size(raw: bytes, options: DecodeOptions) -> None:
    if len(raw) > options.max_record_bytes:
        _reject("oversized", f"record exceeds max_record_bytes={options.max_record_bytes}")


# --- RFC 3339 timestamps

_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))?"
)


def _parse_rfc3339(value: str, label: str) -> datetime:
    m = _RFC3339.fullmatch(value)
    if m is None:
        _reject(
            "bad_timestamp",
            f"{label}: {_short(value)} is not an RFC 3339 timestamp (e.g. 2025-06-01T12:00:00Z)",
        )
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    micro = int((m.group(7) or "0")[:6].ljust(6, "0"))
    if m.group(8):
        tz: timezone | None = UTC
    elif m.group(9):
        oh, om = int(m.group(10)), int(m.group(11))
        if oh > 23 or om > 59:
            _reject("bad_timestamp", f"{label}: {_short(value)} has an invalid UTC offset")
        sign = 1 if m.group(9) == "+" else -1
        tz = timezone(sign * timedelta(hours=oh, minutes=om))
    else:
        tz = None
    try:
        parsed = datetime(year, month, day, hour, minute, second, micro)
    except ValueError as exc:
        _reject("bad_timestamp", f"{label}: {_short(value)} is not a valid date-time ({exc})")
    if tz is None:
        _reject(
            "naive_timestamp", f"{label}: {_short(value)} has no UTC offset; add 'Z' or '+hh:mm'"
        )
    return _in_range(parsed.replace(tzinfo=tz), label)


# The range of ClickHouse's Date, the day every trend query counts by (toDate): a time
# outside it is stored fine as DateTime64 but counted on a wrapped-around day, skewing every
# trend query (schemas.events refuses such times too).
MIN_EVENT_TIME = EARLIEST_EVENT_TIME
MAX_EVENT_TIME = LATEST_EVENT_TIME  # exclusive


def _in_range(value: datetime, label: str) -> datetime:
    try:
        inside = MIN_EVENT_TIME <= value < MAX_EVENT_TIME
    except OverflowError:  # e.g. 0001-01-01T00:30+01:00 has no UTC equivalent
        inside = False
    if not inside:
        _reject(
            "bad_timestamp",
            f"{label}: {value.isoformat()} is outside the supported range 1970-01-01 .. "
            "2149-06-05 UTC (the days the warehouse can count by)",
        )
    return value


def _parse_epoch(value: int | float, label: str) -> datetime:
    try:
        return _in_range(datetime.fromtimestamp(value, tz=UTC), label)
    except (OverflowError, OSError, ValueError):
        _reject("bad_timestamp", f"{label}: {value!r} is not a valid Unix time in seconds")


# --- field helpers


def _require_text(value: object, present: bool, label: str, options: DecodeOptions) -> str:
    """A required request/response text: present, a string, within limits, not blank."""
    if not present or value is None:
        what = "is missing" if not present else "is null"
        _reject("missing_field", f"{label} {what}; a string is required")
    if not isinstance(value, str):
        _reject("wrong_type", f"{label} must be a string, got {_json_type(value)}")
    if len(value) > options.max_text_chars:
        _reject(
            "oversized",
            f"{label} is {len(value)} characters, over max_text_chars={options.max_text_chars}",
        )
    if not value.strip():
        _reject("empty_text", f"{label} is empty")
    return value


def _require_log_id(
    value: object, present: bool, label: str, ctx: _Ctx, allow_int: bool = False
) -> str:
    if not present or value is None:
        _reject("missing_log_id", f"{label} is {'missing' if not present else 'null'}")
    if allow_int and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        _reject("wrong_type", f"{label} must be a string, got {_json_type(value)}")
    if not value.strip():
        _reject("missing_log_id", f"{label} is empty")
    ctx.log_id = value.strip()
    return value


def _attr_value(value: object) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


_PYDANTIC_TYPE_ERRORS: Final = frozenset(
    {
        "string_type",
        "bool_type",
        "float_type",
        "int_type",
        "dict_type",
        "list_type",
        "model_type",
        "model_attributes_type",
        "datetime_type",
        "is_instance_of",
        "float_parsing",
        "bool_parsing",
        "int_parsing",
        "string_unicode",
    }
)


def _loc(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc)


def _from_validation_error(exc: ValidationError) -> _Reject:
    """Translate pydantic's errors: the first error gives the code, up to three the reason."""
    errors = exc.errors(include_url=False)
    messages: list[str] = []
    code = "invalid_value"
    for i, err in enumerate(errors):
        loc = tuple(err["loc"])
        name = _loc(loc)
        kind = err["type"]
        value = err.get("input")
        if kind == "missing":
            this, msg = (
                "missing_log_id" if loc == ("log_id",) else "missing_field",
                f"field '{name}' is missing",
            )
        elif kind == "extra_forbidden":
            this, msg = (
                "unknown_field",
                (f"unknown field '{name}' (free-form data belongs in 'attributes')"),
            )
        elif kind in _PYDANTIC_TYPE_ERRORS:
            this, msg = (
                "wrong_type",
                f"field '{name}' has the wrong type ({_json_type(value)}): {err['msg']}",
            )
        elif kind == "literal_error" and loc == ("schema_version",):
            this, msg = (
                "unsupported_version",
                (f"field 'schema_version': {_short(value)} is not supported (expected '1')"),
            )
        elif kind == "string_too_short" and loc == ("log_id",):
            this, msg = "missing_log_id", "field 'log_id' is empty"
        elif kind == "timezone_aware":
            this, msg = "naive_timestamp", f"field '{name}' has no UTC offset"
        elif kind.startswith("datetime"):
            this, msg = "bad_timestamp", f"field '{name}': {err['msg']}"
        else:
            this, msg = "invalid_value", f"field '{name}': {err['msg']}"
        if i == 0:
            code = this
        if i < 3:
            messages.append(msg)
    if len(errors) > 3:
        messages.append(f"and {len(errors) - 3} more problem(s)")
    return _Reject(code, "; ".join(messages))


def _build(data: dict[str, Any]) -> RefusalEvent:
    try:
        return RefusalEvent.model_validate(data, strict=True)
    except ValidationError as exc:
        raise _from_validation_error(exc) from None


# --------------------------------------------------------------------------------------------
# Format: native jsonl

_EVENT_FIELDS: Final = frozenset(RefusalEvent.model_fields)


def _decode_jsonl(record: SourceRecord, options: DecodeOptions, ctx: _Ctx) -> RefusalEvent:
    obj = _load_object(record.raw)
    _require_log_id(obj.get("log_id"), "log_id" in obj, "field 'log_id'", ctx)
    unknown = [k for k in obj if k not in _EVENT_FIELDS]
    if unknown:
        _reject(
            "unknown_field",
            f"unknown field(s) {', '.join(map(repr, unknown))}; the event "
            "contract allows "
            + ", ".join(RefusalEvent.model_fields)
            + " (free-form data belongs in 'attributes')",
        )
    data = dict(obj)
    ts = obj.get("event_time")
    if ts is None:
        what = "missing" if "event_time" not in obj else "null"
        _reject("missing_field", f"field 'event_time' is {what}; an RFC 3339 timestamp is required")
    if not isinstance(ts, str):
        _reject(
            "wrong_type", f"field 'event_time' must be an RFC 3339 string, got {_json_type(ts)}"
        )
    data["event_time"] = _parse_rfc3339(ts, "field 'event_time'")
    for name in ("request", "response"):
        _require_text(obj.get(name), name in obj, f"field '{name}'", options)
    return _build(data)


# --------------------------------------------------------------------------------------------
# Format: mapped-jsonl

_MISSING: Final = object()


def _lookup(obj: dict[str, Any], path: str) -> tuple[object, tuple[str, ...]]:
    """The value at ``path`` (or ``_MISSING``) and the key path that reached it."""
    if path in obj:
        return obj[path], (path,)
    parts = tuple(path.split("."))
    current: object = obj
    for depth, part in enumerate(parts):
        if not isinstance(current, dict):
            where = ".".join(parts[:depth])
            _reject(
                "wrong_type",
                f"source field '{where}' must be an object to read "
                f"'{path}', got {_json_type(current)}",
            )
        if part not in current:
            return _MISSING, parts
        current = current[part]
    return current, parts


def _without(value: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """A copy of ``value`` without the nested key path ``keys`` (empty parents dropped)."""
    head, rest = keys[0], keys[1:]
    out = dict(value)
    if not rest:
        out.pop(head, None)
    elif isinstance(out.get(head), dict):
        inner = _without(out[head], rest)
        if inner:
            out[head] = inner
        else:
            out.pop(head)
    return out


def _optional_str(value: object, label: str, allow_int: bool = False) -> str | None:
    if value is _MISSING or value is None:
        return None
    if allow_int and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        _reject("wrong_type", f"{label} must be a string, got {_json_type(value)}")
    return value


def _decode_mapped(record: SourceRecord, options: DecodeOptions, ctx: _Ctx) -> RefusalEvent:
    mapping = options.mapping
    if mapping is None:
        _reject(
            "bad_mapping",
            "format 'mapped-jsonl' needs a field mapping, e.g. "
            "--map request=prompt,response=response,log_id=id",
        )
    obj = _load_object(record.raw)
    found: dict[str, object] = {}
    rest = obj
    for target, path in mapping.targets.items():
        value, keys = _lookup(obj, path)
        found[target] = value
        rest = _without(rest, keys)

    def label(target: str) -> str:
        return f"source field '{mapping.targets[target]}' (mapped to {target})"

    data: dict[str, Any] = {}
    log_id = found["log_id"]
    data["log_id"] = _require_log_id(
        log_id, log_id is not _MISSING, label("log_id"), ctx, allow_int=True
    )
    for name in ("request", "response"):
        value = found[name]
        data[name] = _require_text(value, value is not _MISSING, label(name), options)

    if "event_time" in mapping.targets:
        ts = found["event_time"]
        if ts is _MISSING or ts is None:
            _reject(
                "missing_field",
                f"{label('event_time')} is {'missing' if ts is _MISSING else 'null'}",
            )
        if isinstance(ts, str):
            data["event_time"] = _parse_rfc3339(ts, label("event_time"))
        elif isinstance(ts, int | float) and not isinstance(ts, bool):
            data["event_time"] = _parse_epoch(ts, label("event_time"))
        else:
            _reject(
                "wrong_type",
                f"{label('event_time')} must be an RFC 3339 string or Unix "
                f"seconds, got {_json_type(ts)}",
            )
    elif options.default_event_time is not None:
        data["event_time"] = options.default_event_time
    else:
        _reject(
            "missing_field",
            "no event_time: map one (--map ...,event_time=FIELD) or pass --event-time",
        )

    def optional(target: str, allow_int: bool = False) -> str | None:
        if target not in mapping.targets:
            return None
        return _optional_str(found[target], label(target), allow_int)

    data["model"] = optional("model") or options.default_model or "unknown"
    product = optional("product") or options.default_product
    if product is not None:
        data["product"] = product
    bundle = optional("policy_bundle")
    if bundle is not None:
        data["policy_bundle"] = bundle
    conversation = optional("conversation_id", allow_int=True)
    if conversation is not None:
        data["conversation_id"] = conversation
    if "classifier" in mapping.targets:
        signal = found["classifier"]
        if signal is not _MISSING and signal is not None:
            data["classifier"] = signal
    else:
        parts = {
            t.split(".", 1)[1]: found[t]
            for t in mapping.targets
            if t.startswith("classifier.") and found[t] is not _MISSING and found[t] is not None
        }
        if parts:
            data["classifier"] = parts
    data["attributes"] = {key: _attr_value(value) for key, value in rest.items()}
    return _build(data)


# --------------------------------------------------------------------------------------------
# Format: openai chat-completions log records

_OPENAI_KNOWN: Final = frozenset(
    {"request", "response", "log_id", "metadata", "conversation_id", "classifier", "policy_bundle"}
)


def _get_object(obj: dict[str, Any], key: str, label: str) -> dict[str, Any]:
    if key not in obj or obj[key] is None:
        _reject("missing_field", f"{label} is {'missing' if key not in obj else 'null'}")
    value = obj[key]
    if not isinstance(value, dict):
        _reject("wrong_type", f"{label} must be an object, got {_json_type(value)}")
    return value


def _content_text(content: object, path: str) -> str | None:
    """Text of a message ``content``: a string, or the text parts of a list (joined by \\n)."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        _reject(
            "wrong_type",
            f"field '{path}' must be a string or a list of parts, got {_json_type(content)}",
        )
    texts: list[str] = []
    for i, part in enumerate(content):
        if not isinstance(part, dict):
            _reject("wrong_type", f"field '{path}[{i}]' must be an object, got {_json_type(part)}")
        if part.get("type") == "text":
            text = part.get("text")
            if not isinstance(text, str):
                _reject(
                    "wrong_type",
                    f"field '{path}[{i}].text' must be a string, got {_json_type(text)}",
                )
            texts.append(text)
    return "\n".join(texts)


def _decode_openai(record: SourceRecord, options: DecodeOptions, ctx: _Ctx) -> RefusalEvent:
    obj = _load_object(record.raw)
    request = _get_object(obj, "request", "field 'request'")
    response = _get_object(obj, "response", "field 'response'")
    data: dict[str, Any] = {}

    if obj.get("log_id") is not None:
        data["log_id"] = _require_log_id(obj["log_id"], True, "field 'log_id'", ctx)
    else:
        data["log_id"] = _require_log_id(
            response.get("id"), "id" in response, "field 'log_id' (and 'response.id')", ctx
        )

    messages = request.get("messages")
    if messages is None:
        _reject("missing_field", "field 'request.messages' is missing")
    if not isinstance(messages, list):
        _reject(
            "wrong_type", f"field 'request.messages' must be an array, got {_json_type(messages)}"
        )
    user_index = None
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            _reject(
                "wrong_type",
                f"field 'request.messages[{i}]' must be an object, got {_json_type(message)}",
            )
        if message.get("role") == "user":
            user_index = i
    if user_index is None:
        _reject("missing_field", "field 'request.messages' has no message with role 'user'")
    user_path = f"request.messages[{user_index}].content"
    user_text = _content_text(messages[user_index].get("content"), user_path)
    data["request"] = _require_text(user_text, True, f"field '{user_path}'", options)

    choices = response.get("choices")
    if choices is None:
        _reject("missing_field", "field 'response.choices' is missing")
    if not isinstance(choices, list):
        _reject(
            "wrong_type", f"field 'response.choices' must be an array, got {_json_type(choices)}"
        )
    if not choices:
        _reject("missing_field", "field 'response.choices' is empty")
    choice = choices[0]
    if not isinstance(choice, dict):
        _reject(
            "wrong_type", f"field 'response.choices[0]' must be an object, got {_json_type(choice)}"
        )
    message = _get_object(choice, "message", "field 'response.choices[0].message'")
    content_label = "field 'response.choices[0].message.content'"
    content = _content_text(message.get("content"), "response.choices[0].message.content")
    refusal = message.get("refusal")
    used_refusal = False
    if not content and refusal is not None:
        if not isinstance(refusal, str):
            _reject(
                "wrong_type",
                f"field 'response.choices[0].message.refusal' must be a "
                f"string, got {_json_type(refusal)}",
            )
        content, content_label, used_refusal = (
            refusal,
            "field 'response.choices[0].message.refusal'",
            True,
        )
    elif content is None:
        content_label += " (and .refusal)"
    data["response"] = _require_text(content, True, content_label, options)

    created = response.get("created")
    if created is None:
        if options.default_event_time is None:
            _reject(
                "missing_field",
                "field 'response.created' is missing and no --event-time default was given",
            )
        data["event_time"] = options.default_event_time
    elif isinstance(created, int | float) and not isinstance(created, bool):
        data["event_time"] = _parse_epoch(created, "field 'response.created'")
    else:
        _reject(
            "wrong_type",
            f"field 'response.created' must be Unix seconds, got {_json_type(created)}",
        )

    model = (
        _optional_str(response.get("model"), "field 'response.model'")
        or _optional_str(request.get("model"), "field 'request.model'")
        or options.default_model
        or "unknown"
    )
    data["model"] = model

    attributes: dict[str, str] = {}
    metadata = obj.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            _reject("wrong_type", f"field 'metadata' must be an object, got {_json_type(metadata)}")
        attributes.update({k: _attr_value(v) for k, v in metadata.items() if k != "product"})
    product = (
        _optional_str(metadata.get("product"), "field 'metadata.product'") if metadata else None
    ) or options.default_product
    if product is not None:
        data["product"] = product
    conversation = _optional_str(
        obj.get("conversation_id"), "field 'conversation_id'", allow_int=True
    )
    if conversation is not None:
        data["conversation_id"] = conversation
    bundle = _optional_str(obj.get("policy_bundle"), "field 'policy_bundle'")
    if bundle is not None:
        data["policy_bundle"] = bundle
    if obj.get("classifier") is not None:
        data["classifier"] = obj["classifier"]
    elif used_refusal:
        data["classifier"] = {"is_refusal": True}
    for key, value in obj.items():
        if key not in _OPENAI_KNOWN:
            attributes[key] = _attr_value(value)
    finish = choice.get("finish_reason")
    if isinstance(finish, str):
        attributes["openai.finish_reason"] = finish
    response_id = response.get("id")
    if isinstance(response_id, str) and response_id != data["log_id"]:
        attributes["openai.response_id"] = response_id
    if used_refusal:
        attributes["openai.refusal_field"] = "true"
    data["attributes"] = attributes
    return _build(data)


# --------------------------------------------------------------------------------------------
# Format: XSTest completion CSVs

_XSTEST_STEM = re.compile(r"xstest(?:_v\d+)?_completions_(.+)", re.IGNORECASE)


def xstest_model_from_source(source: str) -> str:
    """The model name an XSTest completions file encodes: ``xstest_v2_completions_gpt4.csv``
    -> ``"gpt4"``; any other name -> its stem (``"my_run.csv"`` -> ``"my_run"``)."""
    stem = PurePath(source).stem
    m = _XSTEST_STEM.fullmatch(stem)
    return m.group(1) if m else stem


def _parse_csv_raw(raw: bytes) -> dict[str, str]:
    """Parse ``raw`` = header line + one row (as ``SourceRecord`` documents it)."""
    text = _to_text(raw)
    try:
        rows = [row for row in csv.reader(io.StringIO(text, newline="")) if row]
    except csv.Error as exc:
        _reject("malformed_row", f"row is not valid CSV: {exc}")
    if len(rows) != 2:
        _reject(
            "malformed_row", f"expected a header line and one row, found {len(rows)} CSV record(s)"
        )
    header, row = rows
    if len(row) != len(header):
        _reject(
            "malformed_row", f"row has {len(row)} values but the header has {len(header)} columns"
        )
    return dict(zip(header, row, strict=True))


def _decode_xstest(record: SourceRecord, options: DecodeOptions, ctx: _Ctx) -> RefusalEvent:
    fields = record.fields if record.fields is not None else _parse_csv_raw(record.raw)
    for column, value in fields.items():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            _to_text(record.raw)  # reports the offending byte, as a replay of raw would
            _reject("encoding", f"column '{column}' is not valid UTF-8")
    missing = [c for c in ("id", "prompt", "completion") if c not in fields]
    if missing:
        _reject(
            "missing_field",
            f"column(s) {', '.join(map(repr, missing))} missing; XSTest "
            f"completion CSVs have columns {', '.join(XSTEST_COLUMNS)}",
        )
    file_model = xstest_model_from_source(record.source)
    row_id = fields["id"].strip()
    if not row_id:
        _reject("missing_log_id", "column 'id' is empty")
    ctx.log_id = f"xstest-{file_model}-{row_id}"
    if options.default_event_time is None:
        _reject(
            "missing_field",
            "XSTest rows have no timestamp: pass --event-time (DecodeOptions.default_event_time)",
        )
    data: dict[str, Any] = {
        "log_id": ctx.log_id,
        "event_time": options.default_event_time,
        "request": _require_text(fields["prompt"], True, "column 'prompt'", options),
        "response": _require_text(fields["completion"], True, "column 'completion'", options),
        "model": options.default_model or file_model,
        "product": options.default_product or "xstest",
        "attributes": {k: v for k, v in fields.items() if k not in ("prompt", "completion")},
    }
    return _build(data)


# --------------------------------------------------------------------------------------------
# Entry points

_DECODERS: Final[dict[str, Callable[[SourceRecord, DecodeOptions, _Ctx], RefusalEvent]]] = {
    "jsonl": _decode_jsonl,
    "mapped-jsonl": _decode_mapped,
    "openai": _decode_openai,
    "xstest-csv": _decode_xstest,
}


def decode_record(
    record: SourceRecord, fmt: InputFormat, options: DecodeOptions
) -> RefusalEvent | DecodeFailure:
    """Decode one record of format ``fmt`` into a ``RefusalEvent``.

    Returns a ``DecodeFailure`` (never raises) for any problem with the input: see
    ``REASON_CODES``. Checks run in a fixed order (size, encoding, JSON syntax, log_id,
    unknown fields, timestamp, texts, remaining contract), so the same record always gets the
    same failure. Raises ``ValueError`` only for an unknown ``fmt`` (a programming error).
    """
    decoder = _DECODERS.get(fmt)
    if decoder is None:
        raise ValueError(f"unknown input format {fmt!r}; expected one of {INPUT_FORMATS}")
    ctx = _Ctx()
    if record.tombstone:
        return DecodeFailure(
            "tombstone",
            "a tombstone (null value): a deletion marker carries no refusal event to audit",
            None,
        )
    try:
        _check_size(record.raw, options)
        event = decoder(record, options, ctx)
        _refuse_nul(event)
        return event
    except _Reject as failure:
        return DecodeFailure(failure.code, failure.reason, ctx.log_id)


def _nul_path(value: object, path: str) -> str | None:
    """Where in ``value`` (a dumped event) a NUL character is, or None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in str(key):
                return f"{path}.{key!r}" if path else repr(key)
            found = _nul_path(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _nul_path(item, f"{path}[{i}]")
            if found:
                return found
    return None


def _refuse_nul(event: RefusalEvent) -> None:
    """Reject an event with a NUL character anywhere (``invalid_value``): a raw NUL byte is
    not valid JSON (``not_json``), so its escaped form ``\\u0000`` (or a NUL in a CSV cell)
    must not slip in either; no reader of the stored text expects one."""
    found = _nul_path(event.model_dump(mode="json"), "")
    if found:
        _reject(
            "invalid_value",
            f"field '{found}' contains a NUL character (U+0000, JSON \\u0000); refused like "
            "a raw NUL byte",
        )


_MAP_HINTS: Final[dict[str, tuple[str, ...]]] = {
    "request": ("prompt", "request", "question", "input", "query", "user_message"),
    "response": ("response", "completion", "output", "answer", "reply"),
    "log_id": ("log_id", "id", "uuid", "request_id", "event_id"),
}


def _mapping_hint(keys: list[str]) -> str:
    guess: list[str] = []
    for target, candidates in _MAP_HINTS.items():
        hit = next((c for c in candidates if c in keys), None)
        if hit is None:
            return ""
        guess.append(f"{target}={hit}")
    return f" (perhaps --format mapped-jsonl --map {','.join(guess)})"


def detect_format(first_line: bytes, filename: str) -> InputFormat:
    """Guess the input format from a file's first non-blank line and its name.

    ``*.csv`` whose header has ``prompt`` and ``completion`` -> ``xstest-csv``; a JSON object
    with ``request.messages`` or ``response.choices`` -> ``openai``; a JSON object with
    ``log_id``, ``request`` and ``response`` -> ``jsonl``. ``mapped-jsonl`` is never guessed.
    Raises ``ValueError`` telling the user to pass ``--format`` / ``--map`` otherwise.
    """
    advice = "pass --format (jsonl, mapped-jsonl, openai, xstest-csv) and, for mapped-jsonl, --map"
    line = first_line[len(_BOM) :] if first_line.startswith(_BOM) else first_line
    if filename.lower().endswith(".csv"):
        try:
            header = next(csv.reader([line.decode("utf-8")]), [])
        except (UnicodeDecodeError, csv.Error) as exc:
            raise ValueError(f"{filename}: cannot read the CSV header ({exc}); {advice}") from None
        columns = {c.strip() for c in header}
        if {"prompt", "completion"} <= columns:
            return "xstest-csv"
        raise ValueError(
            f"{filename}: CSV header {header} has no 'prompt' and 'completion' columns; {advice}"
        )
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{filename}: first record is not JSON ({exc}); {advice}") from None
    if not isinstance(value, dict):
        raise ValueError(
            f"{filename}: first record is a JSON {_json_type(value)}, not an object; {advice}"
        )
    request, response = value.get("request"), value.get("response")
    if (isinstance(request, dict) and "messages" in request) or (
        isinstance(response, dict) and "choices" in response
    ):
        return "openai"
    if {"log_id", "request", "response"} <= value.keys():
        return "jsonl"
    keys = list(value)
    raise ValueError(
        f"{filename}: cannot tell the format from fields {keys}; {advice}{_mapping_hint(keys)}"
    )
