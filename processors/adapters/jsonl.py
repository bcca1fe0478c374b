"""Format ``jsonl``: one JSON object per record matching the ``RefusalEvent`` wire contract."""

from __future__ import annotations

from typing import Final

from processors.adapters.checks import (
    DecodeContext,
    build,
    json_type,
    load_object,
    parse_rfc3339,
    reject,
    require_log_id,
    require_text,
)
from processors.adapters.records import DecodeOptions, SourceRecord
from schemas.events import RefusalEvent

_EVENT_FIELDS: Final = frozenset(RefusalEvent.model_fields)


def decode_jsonl(record: SourceRecord, options: DecodeOptions, ctx: DecodeContext) -> RefusalEvent:
    """Decode one canonical JSONL record into a ``RefusalEvent``; raises ``Reject``."""
    obj = load_object(record.raw)
    require_log_id(obj.get("log_id"), "log_id" in obj, "field 'log_id'", ctx)
    unknown = [k for k in obj if k not in _EVENT_FIELDS]
    if unknown:
        reject(
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
        reject("missing_field", f"field 'event_time' is {what}; an RFC 3339 timestamp is required")
    if not isinstance(ts, str):
        reject("wrong_type", f"field 'event_time' must be an RFC 3339 string, got {json_type(ts)}")
    data["event_time"] = parse_rfc3339(ts, "field 'event_time'")
    for name in ("request", "response"):
        require_text(obj.get(name), name in obj, f"field '{name}'", options)
    return build(data)
