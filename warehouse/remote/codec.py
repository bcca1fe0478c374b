"""The owner channel's typed codec: values JSON cannot carry exactly travel tagged.

``encode_value``/``decode_value`` (``CodecError`` for what they cannot carry), and the
error classes an answer may name (``ERROR_CLASSES``: the driver's, plus ``ValueError``,
``TypeError``, ``KeyError``), shared by the server and the client side.
"""

from __future__ import annotations

import base64
import ipaddress
import math
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import orjson
from clickhouse_connect.driver import exceptions as driver

__all__ = ["CodecError", "decode_value", "encode_value"]

_TAG = "$t"
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what orjson writes as a JSON number


class CodecError(ValueError):
    """A value the codec cannot encode, or a payload it cannot decode."""


def encode_value(value: Any) -> Any:
    """``value`` as JSON-native data (for ``orjson.dumps``), non-JSON values tagged.

    Plain: None, bool, str, int within 64 bits, finite float, list, dict with str keys.
    Tagged as ``{"$t": tag, "v": ...}``: larger ints, nan/inf, bytes, datetime (ISO 8601;
    aware ones keep their UTC offset, naive stay naive), date, time, timedelta, Decimal,
    UUID, IPv4/IPv6 addresses, tuples, and dicts with a non-str key or a ``"$t"`` key
    (as ``[[key, value], ...]``). Raises ``CodecError`` for anything else.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if _INT_MIN <= value <= _INT_MAX else {_TAG: "int", "v": str(value)}
    if isinstance(value, float):
        return value if math.isfinite(value) else {_TAG: "float", "v": repr(value)}
    if isinstance(value, list):
        return [encode_value(v) for v in value]
    if isinstance(value, tuple):
        return {_TAG: "tuple", "v": [encode_value(v) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and _TAG not in value:
            return {k: encode_value(v) for k, v in value.items()}
        return {_TAG: "map", "v": [[encode_value(k), encode_value(v)] for k, v in value.items()]}
    encoder = _ENCODERS.get(type(value))
    if encoder is None:
        encoder = next((f for t, f in _ENCODERS.items() if isinstance(value, t)), None)
    if encoder is None:
        raise CodecError(f"cannot encode a {type(value).__name__} for the owner channel")
    tag, text = encoder(value)
    return {_TAG: tag, "v": text}


def _encode_bytes(value: Any) -> tuple[str, Any]:
    return "bytes", base64.b64encode(bytes(value)).decode("ascii")


def _encode_timedelta(value: timedelta) -> tuple[str, Any]:
    return "td", [value.days, value.seconds, value.microseconds]


# Order matters for the isinstance fallback: datetime before its base class date.
_ENCODERS: dict[type, Callable[[Any], tuple[str, Any]]] = {
    bytes: _encode_bytes,
    bytearray: _encode_bytes,
    memoryview: _encode_bytes,
    datetime: lambda v: ("dt", v.isoformat()),
    date: lambda v: ("date", v.isoformat()),
    time: lambda v: ("time", v.isoformat()),
    timedelta: _encode_timedelta,
    Decimal: lambda v: ("dec", str(v)),
    UUID: lambda v: ("uuid", str(v)),
    ipaddress.IPv4Address: lambda v: ("ip4", str(v)),
    ipaddress.IPv6Address: lambda v: ("ip6", str(v)),
}


def _decode_td(v: Any) -> timedelta:
    days, seconds, micros = v
    return timedelta(days=days, seconds=seconds, microseconds=micros)


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "int": int,
    "float": float,
    "bytes": lambda v: base64.b64decode(v, validate=True),
    "dt": datetime.fromisoformat,
    "date": date.fromisoformat,
    "time": time.fromisoformat,
    "td": _decode_td,
    "dec": Decimal,
    "uuid": UUID,
    "ip4": ipaddress.IPv4Address,
    "ip6": ipaddress.IPv6Address,
    "tuple": lambda v: tuple(decode_value(x) for x in v),
    "map": lambda v: {decode_value(k): decode_value(x) for k, x in v},
}


def decode_value(data: Any) -> Any:
    """The inverse of ``encode_value`` (on what ``orjson.loads`` made of its output).

    Raises ``CodecError`` for an unknown tag or a tagged value of the wrong shape.
    """
    if isinstance(data, list):
        return [decode_value(v) for v in data]
    if not isinstance(data, dict):
        return data
    if _TAG not in data:
        return {k: decode_value(v) for k, v in data.items()}
    tag = data[_TAG]
    decoder = _DECODERS.get(tag) if isinstance(tag, str) else None
    if decoder is None or set(data) != {_TAG, "v"}:
        raise CodecError(f"unknown tagged value {str(tag)[:40]!r}")
    try:
        return decoder(data["v"])
    except CodecError:
        raise
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise CodecError(f"bad {tag} value: {exc}") from exc


def dumps(value: Any) -> bytes:
    """The JSON bytes of ``value`` (orjson), as both ends of the owner channel write them."""
    return orjson.dumps(value)


ERROR_CLASSES: dict[str, type[Exception]] = {
    c.__name__: c
    for c in (
        driver.Error,
        driver.DatabaseError,
        driver.DataError,
        driver.IntegrityError,
        driver.InterfaceError,
        driver.InternalError,
        driver.NotSupportedError,
        driver.OperationalError,
        driver.ProgrammingError,
        ValueError,
        TypeError,
        KeyError,
    )
}
