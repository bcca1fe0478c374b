"""What every decoder shares: the failure it raises, and the checks of fields and times.

A decoder raises ``Reject`` (through ``reject``) with a reason code and a message; the
registry (``processors.adapters.registry.decode_record``) turns it into a ``DecodeFailure``.
The helpers check JSON values (types, required texts, log ids), parse RFC 3339 and Unix
timestamps within the warehouse's range, and translate pydantic's errors of the final
``RefusalEvent`` contract (``build``). Names with a leading underscore are internal to this
module; the others are shared by the package's decoders.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final, NoReturn

import orjson
from pydantic import ValidationError

from processors.adapters.records import DecodeOptions
from schemas.events import EARLIEST_EVENT_TIME, LATEST_EVENT_TIME, RefusalEvent

BOM: Final = b"\xef\xbb\xbf"


class Reject(Exception):
    """A record the decoder refuses: ``code`` (a DecodeFailure reason code) and ``reason`` (the
    message)."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def reject(code: str, reason: str) -> NoReturn:
    """Raise :class:`Reject` with ``code`` and ``reason``; never returns."""
    raise Reject(code, reason)


class DecodeContext:
    """Per-call scratch: the log_id as soon as it is known, for the DecodeFailure."""

    def __init__(self) -> None:
        self.log_id: str | None = None


def json_type(value: object) -> str:
    """The JSON type name of ``value`` (``null``, ``boolean``, ``number``, ``string``, ``array``,
    ``object``) for messages."""
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


def to_text(raw: bytes) -> str:
    """The UTF-8 text of ``raw`` without a leading BOM; rejects (``encoding``) bytes that are not
    UTF-8."""
    if raw.startswith(BOM):
        raw = raw[len(BOM) :]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : exc.start + 1].hex()
        reject(
            "encoding",
            f"record is not valid UTF-8: {exc.reason} (byte 0x{bad} at offset {exc.start})",
        )


def load_object(raw: bytes) -> dict[str, Any]:
    """The JSON object of ``raw``; rejects (``not_json``, ``not_object``) anything else."""
    text = to_text(raw)
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        reject("not_json", f"record is not valid JSON: {exc}")
    if not isinstance(value, dict):
        reject("not_object", f"record is a JSON {json_type(value)}, expected a JSON object")
    return value


def check_size(raw: bytes, options: DecodeOptions) -> None:
    """Reject (``oversized``) a record over ``options.max_record_bytes``."""
    if len(raw) > options.max_record_bytes:
        reject("oversized", f"record exceeds max_record_bytes={options.max_record_bytes}")


# --- RFC 3339 timestamps

_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))?"
)


def parse_rfc3339(value: str, label: str) -> datetime:
    """An aware datetime from an RFC 3339 text within the warehouse range; rejects
    (``bad_timestamp``) otherwise."""
    m = _RFC3339.fullmatch(value)
    if m is None:
        reject(
            "bad_timestamp",
            f"{label}: {_short(value)} is not an RFC 3339 timestamp (e.g. 2025-06-01T12:00:00Z)",
        )
    year, month, day, hour, minute, second, fraction, zulu, sign, h, mins = m.groups()
    micro = int((fraction or "0")[:6].ljust(6, "0"))
    if zulu:
        tz: timezone | None = UTC
    elif sign:
        oh, om = int(h), int(mins)
        if oh > 23 or om > 59:
            reject("bad_timestamp", f"{label}: {_short(value)} has an invalid UTC offset")
        tz = timezone((1 if sign == "+" else -1) * timedelta(hours=oh, minutes=om))
    else:
        tz = None
    try:
        parsed = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro
        )
    except ValueError as exc:
        reject("bad_timestamp", f"{label}: {_short(value)} is not a valid date-time ({exc})")
    if tz is None:
        reject(
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
        reject(
            "bad_timestamp",
            f"{label}: {value.isoformat()} is outside the supported range 1970-01-01 .. "
            "2149-06-05 UTC (the days the warehouse can count by)",
        )
    return value


def parse_epoch(value: int | float, label: str) -> datetime:
    """An aware UTC datetime from Unix seconds within the warehouse range; rejects
    (``bad_timestamp``) otherwise."""
    try:
        return _in_range(datetime.fromtimestamp(value, tz=UTC), label)
    except (OverflowError, OSError, ValueError):
        reject("bad_timestamp", f"{label}: {value!r} is not a valid Unix time in seconds")


# --- field helpers


def require_text(value: object, present: bool, label: str, options: DecodeOptions) -> str:
    """A required request/response text: present, a string, within limits, not blank."""
    if not present or value is None:
        what = "is missing" if not present else "is null"
        reject("missing_field", f"{label} {what}; a string is required")
    if not isinstance(value, str):
        reject("wrong_type", f"{label} must be a string, got {json_type(value)}")
    if len(value) > options.max_text_chars:
        reject(
            "oversized",
            f"{label} is {len(value)} characters, over max_text_chars={options.max_text_chars}",
        )
    if not value.strip():
        reject("empty_text", f"{label} is empty")
    return value


def require_log_id(
    value: object, present: bool, label: str, ctx: DecodeContext, allow_int: bool = False
) -> str:
    """A required log id (a non-blank string, or an int when ``allow_int``), stored stripped on
    ``ctx``; rejects otherwise."""
    if not present or value is None:
        reject("missing_log_id", f"{label} is {'missing' if not present else 'null'}")
    if allow_int and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        reject("wrong_type", f"{label} must be a string, got {json_type(value)}")
    if not value.strip():
        reject("missing_log_id", f"{label} is empty")
    ctx.log_id = value.strip()
    return value


def attr_value(value: object) -> str:
    """An attribute value as text: a string as it is, anything else as sorted-key JSON."""
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


def _from_validation_error(exc: ValidationError) -> Reject:
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
                f"field '{name}' has the wrong type ({json_type(value)}): {err['msg']}",
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
    return Reject(code, "; ".join(messages))


def build(data: dict[str, Any]) -> RefusalEvent:
    """The ``RefusalEvent`` of ``data`` (strict); pydantic errors become :class:`Reject`."""
    try:
        return RefusalEvent.model_validate(data, strict=True)
    except ValidationError as exc:
        raise _from_validation_error(exc) from None


MISSING: Final = object()


def optional_str(value: object, label: str, allow_int: bool = False) -> str | None:
    """An optional string field: None when missing or null, an int as text when ``allow_int``;
    rejects other types."""
    if value is MISSING or value is None:
        return None
    if allow_int and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        reject("wrong_type", f"{label} must be a string, got {json_type(value)}")
    return value
