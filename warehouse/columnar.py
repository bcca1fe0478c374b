"""Columnar inserts (issue 27): a table's rows as one Arrow table, typed by the table's DDL.

``Warehouse`` inserts the sink's four tables (``refusal_events``, ``assessments``,
``audit_batches``, ``dead_letters``) with one ``INSERT ... FORMAT Arrow`` each
(clickhouse-connect's ``insert_arrow``: chDB, a ClickHouse server over HTTP(S) and the owner
channel alike), instead of the driver's row-by-row Native serialisation. The rows are the
ones ``warehouse.rows`` builds, so what is stored does not change; only their encoding does.

The Arrow type of each column is derived from its ClickHouse type as ``DESCRIBE TABLE``
reports it (:func:`arrow_schema`), so a column added or retyped by a migration needs no
change here; a type this module does not know raises ``TypeError`` (a test inserts every
table's columns). Values are converted as the driver converted them: datetimes to UTC (a
naive one is taken as UTC), ``DateTime64(p)`` ticks floored (``warehouse.rows.to_utc``;
the driver's ``_datetime64_ticks`` floors too), ``String`` from ``str`` or ``bytes``,
``Map`` from dicts, named ``Tuple`` from tuples or dicts, ``Nullable`` from None.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from clickhouse_connect.datatypes.base import ClickHouseType
from clickhouse_connect.datatypes.registry import get_from_name

from warehouse.rows import to_utc

__all__ = ["arrow_schema", "arrow_table", "arrow_type"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NUMERIC = {
    "Bool": pa.bool_(),
    "UInt8": pa.uint8(),
    "UInt16": pa.uint16(),
    "UInt32": pa.uint32(),
    "UInt64": pa.uint64(),
    "Int8": pa.int8(),
    "Int16": pa.int16(),
    "Int32": pa.int32(),
    "Int64": pa.int64(),
    "Float32": pa.float32(),
    "Float64": pa.float64(),
}
# DateTime64 precision -> Arrow unit
_UNITS = {0: "s", 3: "ms", 6: "us"}
_UNITS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000}


def arrow_type(ch: ClickHouseType) -> pa.DataType:
    """The Arrow type a column of ClickHouse type ``ch`` is sent as (``LowCardinality`` and
    ``Nullable`` are the column's business: the value type is sent). Raises ``TypeError``
    for a type without a mapping here."""
    base = ch.base_type
    if base in _NUMERIC:
        return _NUMERIC[base]
    if base in ("String", "FixedString"):
        return pa.binary()  # str values are encoded as UTF-8, bytes sent as they are
    if base == "DateTime64" and ch.type_def.values[0] in _UNITS:
        return pa.timestamp(_UNITS[ch.type_def.values[0]], tz="UTC")
    if base == "DateTime":
        return pa.timestamp("s", tz="UTC")
    if base == "Array":
        return pa.list_(arrow_type(ch.element_type))  # type: ignore[attr-defined]
    if base == "Map":
        return pa.map_(arrow_type(ch.key_type), arrow_type(ch.value_type))  # type: ignore[attr-defined]
    if base == "Tuple" and ch.element_names:  # type: ignore[attr-defined]
        names, types = ch.element_names, ch.element_types  # type: ignore[attr-defined]
        return pa.struct([(n, arrow_type(t)) for n, t in zip(names, types, strict=True)])
    raise TypeError(f"no Arrow mapping for the ClickHouse type {ch.name}")


def arrow_schema(columns: Sequence[tuple[str, str]]) -> pa.Schema:
    """The Arrow schema of ``columns``: (name, ClickHouse type name as ``DESCRIBE TABLE``
    prints it) pairs, in insert order. Raises ``TypeError`` (:func:`arrow_type`)."""
    return pa.schema([(name, arrow_type(get_from_name(type_name))) for name, type_name in columns])


def _ticks(values: Sequence[Any], per_second: int) -> list[int | None]:
    """Datetimes as whole ticks since the epoch, floored (the driver's rule). A value already
    in UTC (what ``warehouse.rows`` builds) is not converted again."""
    tick = timedelta(seconds=1) / per_second
    return [
        None if v is None else ((v if v.tzinfo is UTC else to_utc(v)) - _EPOCH) // tick
        for v in values
    ]


def _encoded(values: Sequence[Any], kind: pa.DataType) -> Sequence[Any]:
    """``values`` in the form pyarrow builds ``kind`` from: timestamps as ticks (the driver's
    floor, not pyarrow's truncation), nested ones too; everything else as it is (pyarrow
    encodes ``str`` as UTF-8 for a binary column)."""
    if pa.types.is_timestamp(kind):
        return _ticks(values, _UNITS_PER_SECOND[kind.unit])
    if pa.types.is_list(kind) and _needs_encoding(kind.value_type):
        return [None if v is None else _encoded(v, kind.value_type) for v in values]
    if pa.types.is_struct(kind) and any(_needs_encoding(f.type) for f in kind):
        return [None if v is None else _struct(v, kind) for v in values]
    if pa.types.is_map(kind) and _needs_encoding(kind.item_type):
        return [None if v is None else _map(v, kind) for v in values]
    return values


def _needs_encoding(kind: pa.DataType) -> bool:
    """Whether values of ``kind`` (or nested in it) are timestamps, which
    :func:`_encoded` converts."""
    if pa.types.is_timestamp(kind):
        return True
    if pa.types.is_list(kind):
        return _needs_encoding(kind.value_type)
    if pa.types.is_struct(kind):
        return any(_needs_encoding(f.type) for f in kind)
    if pa.types.is_map(kind):
        return _needs_encoding(kind.item_type)
    return False


def _struct(value: Any, kind: pa.StructType) -> dict[str, Any]:
    items = value.values() if isinstance(value, dict) else value
    return {f.name: _encoded([v], f.type)[0] for f, v in zip(kind, items, strict=True)}


def _map(value: Any, kind: pa.MapType) -> list[tuple[Any, Any]]:
    keys = _encoded(list(value), kind.key_type)
    return list(zip(keys, _encoded(list(value.values()), kind.item_type), strict=True))


def arrow_table(schema: pa.Schema, rows: Sequence[Sequence[Any]]) -> pa.Table:
    """``rows`` (values in ``schema``'s column order, as ``warehouse.rows`` builds them) as
    one Arrow table. Raises ``pyarrow.ArrowInvalid`` / ``ArrowTypeError`` (``ValueError``,
    ``TypeError``) for a value the column's type cannot hold (e.g. a negative ``UInt32``),
    ``ValueError`` for a row of another length."""
    width = len(schema)
    if any(len(row) != width for row in rows):
        raise ValueError(f"every row must have {width} values ({', '.join(schema.names)})")
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    arrays = [
        pa.array(_encoded(values, field.type), type=field.type)
        for values, field in zip(columns, schema, strict=True)
    ]
    return pa.Table.from_arrays(arrays, schema=schema)
