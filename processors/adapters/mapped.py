"""Format ``mapped-jsonl``: any JSON object, read through a ``FieldMapping``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from processors.adapters.checks import (
    MISSING,
    DecodeContext,
    attr_value,
    build,
    json_type,
    load_object,
    optional_str,
    parse_epoch,
    parse_rfc3339,
    reject,
    require_log_id,
    require_text,
)
from processors.adapters.records import DecodeOptions, SourceRecord
from schemas.events import RefusalEvent


def _lookup(obj: dict[str, Any], path: str) -> tuple[object, tuple[str, ...]]:
    """The value at ``path`` (or ``MISSING``) and the key path that reached it."""
    if path in obj:
        return obj[path], (path,)
    parts = tuple(path.split("."))
    current: object = obj
    for depth, part in enumerate(parts):
        if not isinstance(current, dict):
            where = ".".join(parts[:depth])
            reject(
                "wrong_type",
                f"source field '{where}' must be an object to read "
                f"'{path}', got {json_type(current)}",
            )
        if part not in current:
            return MISSING, parts
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


def _event_time(ts: object, label: str | None, options: DecodeOptions) -> datetime:
    """The event time: the mapped source field's value ``ts`` (RFC 3339 or Unix seconds;
    ``label`` names the field, None when ``event_time`` is not mapped), else
    ``options.default_event_time``."""
    if label is not None:
        if ts is MISSING or ts is None:
            reject(
                "missing_field",
                f"{label} is {'missing' if ts is MISSING else 'null'}",
            )
        if isinstance(ts, str):
            return parse_rfc3339(ts, label)
        if isinstance(ts, int | float) and not isinstance(ts, bool):
            return parse_epoch(ts, label)
        reject(
            "wrong_type",
            f"{label} must be an RFC 3339 string or Unix seconds, got {json_type(ts)}",
        )
    if options.default_event_time is not None:
        return options.default_event_time
    reject(
        "missing_field",
        "no event_time: map one (--map ...,event_time=FIELD) or pass --event-time",
    )


def decode_mapped(record: SourceRecord, options: DecodeOptions, ctx: DecodeContext) -> RefusalEvent:
    """Decode one record through ``options.mapping`` (field paths) into a ``RefusalEvent``; raises
    ``Reject``."""
    mapping = options.mapping
    if mapping is None:
        reject(
            "bad_mapping",
            "format 'mapped-jsonl' needs a field mapping, e.g. "
            "--map request=prompt,response=response,log_id=id",
        )
    obj = load_object(record.raw)
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
    data["log_id"] = require_log_id(
        log_id, log_id is not MISSING, label("log_id"), ctx, allow_int=True
    )
    for name in ("request", "response"):
        value = found[name]
        data[name] = require_text(value, value is not MISSING, label(name), options)

    time_label = label("event_time") if "event_time" in mapping.targets else None
    data["event_time"] = _event_time(found.get("event_time", MISSING), time_label, options)

    def optional(target: str, allow_int: bool = False) -> str | None:
        if target not in mapping.targets:
            return None
        return optional_str(found[target], label(target), allow_int)

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
        if signal is not MISSING and signal is not None:
            data["classifier"] = signal
    else:
        parts = {
            t.split(".", 1)[1]: found[t]
            for t in mapping.targets
            if t.startswith("classifier.") and found[t] is not MISSING and found[t] is not None
        }
        if parts:
            data["classifier"] = parts
    data["attributes"] = {key: attr_value(value) for key, value in rest.items()}
    return build(data)
