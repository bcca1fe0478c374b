"""The decoders by format and ``decode_record``, the one entry point that never raises on input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from processors.adapters.checks import DecodeContext, Reject, check_size, reject
from processors.adapters.jsonl import decode_jsonl
from processors.adapters.mapped import decode_mapped
from processors.adapters.openai_chat import decode_openai
from processors.adapters.records import (
    INPUT_FORMATS,
    DecodeFailure,
    DecodeOptions,
    InputFormat,
    SourceRecord,
)
from processors.adapters.xstest import decode_xstest
from schemas.events import RefusalEvent

_DECODERS: Final[
    dict[str, Callable[[SourceRecord, DecodeOptions, DecodeContext], RefusalEvent]]
] = {
    "jsonl": decode_jsonl,
    "mapped-jsonl": decode_mapped,
    "openai": decode_openai,
    "xstest-csv": decode_xstest,
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
    ctx = DecodeContext()
    if record.tombstone:
        return DecodeFailure(
            "tombstone",
            "a tombstone (null value): a deletion marker carries no refusal event to audit",
            None,
        )
    try:
        check_size(record.raw, options)
        event = decoder(record, options, ctx)
        if fmt != "jsonl" or _may_hold_nul(record.raw):
            _refuse_nul(event)
        return event
    except Reject as failure:
        return DecodeFailure(failure.code, failure.reason, ctx.log_id)


def _may_hold_nul(raw: bytes) -> bool:
    """Whether a ``jsonl`` record's decoded event can hold a NUL character. Every value of
    such an event comes from the record's JSON (the defaults hold none), and JSON can carry
    a NUL only as the escape ``\\u0000`` or a raw NUL byte: without either, the walk over the
    dumped event (:func:`_refuse_nul`, ~6 µs per event) has nothing to find."""
    return b"\\u0000" in raw or b"\x00" in raw


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
        reject(
            "invalid_value",
            f"field '{found}' contains a NUL character (U+0000, JSON \\u0000); refused like "
            "a raw NUL byte",
        )
