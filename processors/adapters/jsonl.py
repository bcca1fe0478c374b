"""Format ``jsonl``: one JSON object per record matching the ``RefusalEvent`` wire contract."""

from __future__ import annotations

from typing import Final

from processors.adapters.checks import (
    _build,
    _Ctx,
    _json_type,
    _load_object,
    _parse_rfc3339,
    _reject,
    _require_log_id,
    _require_text,
)
from processors.adapters.records import DecodeOptions, SourceRecord
from schemas.events import RefusalEvent

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
