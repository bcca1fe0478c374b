"""ClickHouse's Kafka table engine instead of the warehouse sink: the DDL (issue 14).

A ClickHouse server can consume the transactional workers' result topics itself, in place
of ``refusal-audit sink``. For each of the four topics (``<prefix>stored-events``,
``<prefix>assessments``, ``<prefix>audit-batches``, ``<prefix>dead-letters``) this module
generates, in this order::

    kafka_<role>_landing   ENGINE = Null: one row per message, with its validation problems
    kafka_<role>_rows      MATERIALIZED VIEW landing -> the warehouse table (valid messages)
    kafka_<role>_rejects   MATERIALIZED VIEW landing -> dead_letters (everything else)
    kafka_<role>_queue     ENGINE = Kafka (kafka_format 'RawBLOB', kafka_handle_error_mode 'stream')
    kafka_<role>_consumer  MATERIALIZED VIEW queue -> landing

Consumption starts when ``kafka_<role>_consumer`` is attached, after both views that read
the landing table exist, so no block is read before every message has a place to go.
``RawBLOB`` hands each message's value to the views as one ``String`` (one message, one
row: ``JSONAsString`` would split a message holding two JSON objects into two rows); the
views parse the JSON. ``kafka_handle_error_mode = 'stream'`` keeps anything the format
could not read (``_error``/``_raw_message``) as a problem row instead of failing the block.

The rows views map each message to the table's columns exactly as ``warehouse.store``'s
``insert_*`` build rows from ``StoredEvent``, ``StoredAssessment``, ``BatchRecord`` and, for
the dead-letter topic, from the headers ``streams.sink.dead_letter_message`` writes
(``streams.sink.dead_letter_from_message`` reads them back for the sink); the columns are
those of ``warehouse.store.EVENT_COLUMNS`` etc. A message that would not validate as its
model (``problems`` not empty) becomes a dead letter like the sink's undecodable messages:
stage ``store``, reason ``sink_decode``, the reason naming the failing fields the way
pydantic's error locations do (``not a StoredEvent: event.log_id``). The checks are
generated from the pydantic models (required fields, JSON types, literals, length and range
constraints, unknown fields); pydantic's lax coercions (``"true"`` for a bool, ``3.0`` for
an int, a number for a datetime) are rejected here, and such a message was never written by
a worker. The reject's ``dead_letter_id`` is a SHA-256 prefix, not the sink's BLAKE2b.

Use :func:`kafka_engine_statements` (or :func:`render_kafka_engine_sql` for a script,
``deploy/clickhouse/kafka_engine.sql`` is the default one) against a migrated database,
:func:`kafka_engine_drop_statements` to remove it again, and
:func:`render_kafka_consumer_config` for the server configuration that pins
``isolation.level`` for these topics. ``python -m warehouse.kafka_engine`` writes both files
(``--help``). Nothing here connects to a server.
"""

from __future__ import annotations

import argparse
import re
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin
from xml.sax.saxutils import escape as xml_escape

from annotated_types import Ge, Le, MaxLen, MinLen
from pydantic import AwareDatetime, BaseModel, StringConstraints
from pydantic.fields import FieldInfo

from schemas.audit import BatchRecord, StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent
from warehouse.client import WarehouseError, quote_identifier, validate_identifier
from warehouse.store import (
    ASSESSMENT_COLUMNS,
    BATCH_COLUMNS,
    DEAD_LETTER_COLUMNS,
    EVENT_COLUMNS,
)

__all__ = [
    "DEFAULT_BROKER_LIST",
    "DEFAULT_DATABASE",
    "DEFAULT_GROUP",
    "DEFAULT_TOPIC_PREFIX",
    "KAFKA_SOURCES",
    "QUEUE_COLUMNS",
    "KafkaEngineConfig",
    "KafkaSource",
    "kafka_engine_drop_statements",
    "kafka_engine_statements",
    "message_problems",
    "render_kafka_consumer_config",
    "render_kafka_engine_sql",
    "source_columns",
]

#: The defaults of ``refusal_audit.config.Settings`` (this layer does not import it):
#: ``warehouse_database``, ``kafka_topic_prefix``, ``kafka_bootstrap_servers`` and
#: ``kafka_consumer_group`` + ``-clickhouse`` (the sink's group is ``<group>-sink``).
DEFAULT_DATABASE = "refusal_audit"
DEFAULT_TOPIC_PREFIX = "refusal-audit."
DEFAULT_BROKER_LIST = "127.0.0.1:9092"
DEFAULT_GROUP = "refusal-audit-worker-clickhouse"

#: The Kafka table's virtual columns the consumer view reads (ClickHouse's types; the value
#: column itself is ``value String``). A stand-in table (``stand_in=True``) has them as
#: ordinary columns.
QUEUE_COLUMNS: Mapping[str, str] = {
    "value": "String",
    "_topic": "LowCardinality(String)",
    "_partition": "UInt64",
    "_offset": "UInt64",
    "_headers.name": "Array(String)",
    "_headers.value": "Array(String)",
    "_timestamp_ms": "Nullable(DateTime64(3))",
    "_raw_message": "String",
    "_error": "String",
}

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]*$")  # Kafka's legal topic characters
_BROKERS_RE = re.compile(r"^[A-Za-z0-9._:\[\],-]+$")
_SETTING_RE = re.compile(r"^kafka_[a-z_]+$")
_RESERVED_SETTINGS = frozenset(
    {"kafka_broker_list", "kafka_topic_list", "kafka_group_name", "kafka_format",
     "kafka_handle_error_mode", "kafka_num_consumers"}
)  # fmt: skip
_MAX_REASON_CHARS = 1000  # refusal_audit.sink._undecodable keeps why[:1000]
_MAX_REJECT_RAW_BYTES = 65_536  # ... and value[:65_536]


# ---- SQL text helpers ------------------------------------------------------------------


def _lit(text: str) -> str:
    """``text`` as a ClickHouse string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _lits(values: Sequence[str]) -> str:
    """``('a', 'b')`` for an ``IN`` list."""
    return "(" + ", ".join(_lit(v) for v in values) + ")"


def _array(values: Sequence[str]) -> str:
    """``['a', 'b']``."""
    return "[" + ", ".join(_lit(v) for v in values) + "]"


def _concat_arrays(parts: Sequence[str]) -> str:
    if not parts:
        return "CAST([], 'Array(String)')"
    if len(parts) == 1:
        return parts[0]
    return "arrayConcat(\n        " + ",\n        ".join(parts) + ")"


# ---- validation problems generated from the pydantic models ----------------------------


@dataclass(frozen=True)
class _Loc:
    """Where a JSON value is: ``doc`` (an SQL expression of JSON text) and the ``keys`` from
    its root; ``label`` is its pydantic-style error location as SQL parts (``(is_literal,
    text)``), e.g. ``summary.policy_gap_flags.0.description``."""

    doc: str
    keys: tuple[str, ...] = ()
    label: tuple[tuple[bool, str], ...] = ()

    def child(self, name: str) -> _Loc:
        sep = "." if self.label else ""
        return _Loc(self.doc, (*self.keys, name), (*self.label, (True, sep + name)))

    def element(self, doc: str, label_sql: str) -> _Loc:
        """An element of an array or object held in lambda variable ``doc``, labelled by
        this location, a dot and ``label_sql`` (an SQL string expression)."""
        return _Loc(doc, (), (*self.label, (True, "."), (False, label_sql)))

    @property
    def args(self) -> str:
        return ", ".join([self.doc, *(_lit(k) for k in self.keys)])

    @property
    def label_sql(self) -> str:
        parts: list[str] = []
        literal = ""
        for is_literal, text in self.label:
            if is_literal:
                literal += text
                continue
            if literal:
                parts.append(_lit(literal))
                literal = ""
            parts.append(text)
        if literal or not parts:
            parts.append(_lit(literal))
        return parts[0] if len(parts) == 1 else f"concat({', '.join(parts)})"

    def fails_unless(self, condition: str) -> str:
        """An ``Array(String)`` expression: empty when ``condition`` holds, else this label."""
        return f"if({condition}, [], [{self.label_sql}])"


_NUMBER = ("Int64", "UInt64", "Double")


def _split(annotation: Any) -> tuple[Any, list[Any], bool]:
    """``(base type, constraint metadata, nullable)`` of a field annotation."""
    metadata: list[Any] = []
    nullable = False
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation, *extra = get_args(annotation)
            metadata.extend(extra)
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                raise TypeError(f"unsupported union {annotation!r}")
            annotation, nullable = args[0], True
        else:
            return annotation, metadata, nullable


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _is_datetime(tp: Any) -> bool:
    return tp is AwareDatetime or (isinstance(tp, type) and issubclass(tp, datetime))


def _json_types(tp: Any) -> tuple[str, ...]:
    """The JSON types (``JSONType``) a value of Python type ``tp`` may have in a worker's
    ``model_dump_json``. Raises ``TypeError`` for a type this generator does not know."""
    origin = get_origin(tp)
    if origin is Literal or tp is str or _is_datetime(tp):
        return ("String",)
    if tp is bool:
        return ("Bool",)
    if tp is int:
        return ("Int64", "UInt64")
    if tp is float:
        return _NUMBER
    if origin is dict or tp is dict:
        return ("Object",)
    if origin is list or tp is list:
        return ("Array",)
    if _is_model(tp):
        return ("Object",)
    raise TypeError(f"no JSON check for {tp!r}")


def _constraint_problems(tp: Any, metadata: Sequence[Any], loc: _Loc) -> list[str]:
    """Problems of ``metadata`` constraints (ge/le, min/max length) of a value of ``tp``
    at ``loc``, checked only when the value has the right JSON type."""
    out: list[str] = []
    origin = get_origin(tp)
    for item in metadata:
        bounds: list[tuple[str, str]] = []  # (measure kind, SQL comparison)
        if isinstance(item, Ge):
            bounds.append(("number", f">= {item.ge!r}"))
        elif isinstance(item, Le):
            bounds.append(("number", f"<= {item.le!r}"))
        elif isinstance(item, MinLen):
            bounds.append(("length", f">= {item.min_length}"))
        elif isinstance(item, MaxLen):
            bounds.append(("length", f"<= {item.max_length}"))
        elif isinstance(item, StringConstraints):
            kind = "stripped" if item.strip_whitespace else "length"
            if item.min_length is not None:
                bounds.append((kind, f">= {item.min_length}"))
            if item.max_length is not None:
                bounds.append((kind, f"<= {item.max_length}"))
        for kind, comparison in bounds:
            if kind == "number":
                guard, measure = f"JSONType({loc.args}) NOT IN {_lits(_NUMBER)}", "JSONExtractFloat"
                out.append(loc.fails_unless(f"{guard} OR {measure}({loc.args}) {comparison}"))
            elif origin is list:
                guard = f"JSONType({loc.args}) != 'Array'"
                out.append(loc.fails_unless(
                    f"{guard} OR length(JSONExtractArrayRaw({loc.args})) {comparison}"
                ))  # fmt: skip
            else:
                text = f"JSONExtractString({loc.args})"
                if kind == "stripped":
                    text = f"trimBoth({text})"
                guard = f"JSONType({loc.args}) != 'String'"
                out.append(loc.fails_unless(f"{guard} OR lengthUTF8({text}) {comparison}"))
    return out


def _value_problems(
    annotation: Any, loc: _Loc, depth: int, constraints: Sequence[Any] = ()
) -> list[str]:
    """Problems of the value at ``loc`` (known to exist) against ``annotation`` and the
    field's ``constraints`` (``FieldInfo.metadata``): its JSON type, then (for the right
    type) literals, datetimes, constraints and nested values."""
    tp, metadata, nullable = _split(annotation)
    metadata = [*constraints, *metadata]
    allowed = _json_types(tp) + (("Null",) if nullable else ())
    out = [loc.fails_unless(f"JSONType({loc.args}) IN {_lits(allowed)}")]
    origin = get_origin(tp)
    if origin is Literal:
        values = [str(v) for v in get_args(tp)]
        out.append(loc.fails_unless(
            f"JSONType({loc.args}) != 'String' OR JSONExtractString({loc.args}) IN {_lits(values)}"
        ))  # fmt: skip
    elif _is_datetime(tp):
        parsed = f"parseDateTime64BestEffortOrNull(JSONExtractString({loc.args}), 3, 'UTC')"
        out.append(loc.fails_unless(f"JSONType({loc.args}) != 'String' OR {parsed} IS NOT NULL"))
    out.extend(_constraint_problems(tp, metadata, loc))
    var, idx = f"x{depth}", f"i{depth}"
    if origin is list:
        (item,) = get_args(tp)
        raw = f"JSONExtractArrayRaw({loc.args})"
        inner = _concat_arrays(_value_problems(item, loc.element(var, f"toString({idx} - 1)"),
                                               depth + 1))  # fmt: skip
        out.append(
            f"if(JSONType({loc.args}) = 'Array', arrayFlatten(arrayMap(({var}, {idx}) -> "
            f"{inner}, {raw}, arrayEnumerate({raw}))), [])"
        )
    elif origin is dict:
        _, item = get_args(tp)
        pairs = f"JSONExtractKeysAndValuesRaw({loc.args})"
        inner = _concat_arrays(_value_problems(
            item, loc.element(f"tupleElement({var}, 2)", f"tupleElement({var}, 1)"), depth + 1
        ))  # fmt: skip
        out.append(
            f"if(JSONType({loc.args}) = 'Object', arrayFlatten(arrayMap({var} -> {inner}, "
            f"{pairs})), [])"
        )
    elif _is_model(tp):
        inner = _concat_arrays(_model_problems(tp, loc, depth + 1))
        out.append(f"if(JSONType({loc.args}) = 'Object', {inner}, [])")
    return out


def _model_problems(model: type[BaseModel], loc: _Loc, depth: int) -> list[str]:
    """Problems of the JSON object at ``loc`` as ``model``: missing required fields, each
    field's value, and (``extra="forbid"``) unknown keys, labelled by their names."""
    out: list[str] = []
    for name, info in model.model_fields.items():
        child = loc.child(info.alias or name)
        present = f"JSONHas({child.args})"
        if info.is_required():
            out.append(child.fails_unless(present))
        checks = _value_problems(info.annotation, child, depth, info.metadata)
        out.append(f"if({present}, {_concat_arrays(checks)}, [])")
    if model.model_config.get("extra") == "forbid":
        known = [info.alias or name for name, info in model.model_fields.items()]
        prefix = loc.label_sql if loc.label else None
        var = f"k{depth}"
        label = f"concat({prefix}, '.', {var})" if prefix else var
        out.append(
            f"arrayMap({var} -> {label}, arrayFilter({var} -> NOT has({_array(known)}, {var}), "
            f"JSONExtractKeys({loc.args})))"
        )
    return out


def message_problems(model: type[BaseModel], message: str = "message") -> str:
    """An SQL expression of the ``Array(String)`` of pydantic-style error locations (sorted,
    distinct) of the JSON text ``message`` as ``model``; empty when it would validate (up
    to the lax coercions the module docstring names). ``['(value)']`` when it is not one
    JSON object. Raises ``TypeError`` for a model field type the generator does not know."""
    root = _Loc(message)
    inner = _concat_arrays(_model_problems(model, root, 1))
    return (
        f"if(isValidJSON({message}) AND JSONType({message}) = 'Object', "
        f"arraySort(arrayDistinct({inner})), ['(value)'])"
    )


# ---- column mappings (warehouse.store's _event_row, _assessment_row, ...) ---------------


def _field_info(model: type[BaseModel], path: str) -> FieldInfo:
    """The field at dotted ``path`` of ``model`` (through nested models, optional or not).
    Raises ``KeyError`` naming the path when a part is not a field."""
    current: type[BaseModel] = model
    info: FieldInfo | None = None
    for part in path.split("."):
        if info is not None:
            tp, _, _ = _split(info.annotation)
            if not _is_model(tp):
                raise KeyError(f"{model.__name__}.{path}: {part!r} is not inside a model")
            current = tp
        if part not in current.model_fields:
            raise KeyError(f"{model.__name__}.{path}: no field {part!r}")
        info = current.model_fields[part]
    assert info is not None
    return info


def _sql_default(value: Any) -> str | None:
    """The SQL literal of a field default that an absent key must produce (None: the
    extraction of an absent key already gives it: null, empty, zero or false)."""
    if value is None or value in ("", 0, False) or isinstance(value, dict | list):
        return None
    if isinstance(value, str):
        return _lit(value)
    if isinstance(value, bool | int | float):
        return repr(value).lower() if isinstance(value, bool) else repr(value)
    raise TypeError(f"no SQL literal for default {value!r}")


def _json(model: type[BaseModel], path: str, ch_type: str) -> str:
    """``JSONExtract`` of the field at dotted ``path`` of ``model`` as ``ch_type``, with the
    model's default for an absent key (a message not written by a worker may omit it).
    Raises ``KeyError`` when ``path`` is not a field of ``model``."""
    info = _field_info(model, path)
    args = ", ".join(["message", *(_lit(p) for p in path.split("."))])
    extract = f"JSONExtract({args}, {_lit(ch_type)})"
    default = (
        None if info.is_required() else _sql_default(info.get_default(call_default_factory=True))
    )
    return extract if default is None else f"if(JSONHas({args}), {extract}, {default})"


def _time(model: type[BaseModel], path: str) -> str:
    """The datetime field at ``path`` as ``DateTime64(3, 'UTC')`` (warehouse.store.to_utc:
    an offset converts to UTC, none means UTC; fractions beyond milliseconds are cut, as
    clickhouse-connect cuts them on insert). Raises ``KeyError`` for an unknown path."""
    _field_info(model, path)
    args = ", ".join(["message", *(_lit(p) for p in path.split("."))])
    return f"parseDateTime64BestEffort(JSONExtractString({args}), 3, 'UTC')"


def _header(name: str) -> str:
    """The first value of header ``name`` ('' when absent), as dead_letter_from_message."""
    return f"header_values[indexOf(header_names, {_lit(name)})]"


def _has_header(name: str) -> str:
    return f"has(header_names, {_lit(name)})"


_E, _A, _B = StoredEvent, StoredAssessment, BatchRecord

_EVENT_MAP: Mapping[str, str] = {
    "log_id": _json(_E, "event.log_id", "String"),
    "event_time": _time(_E, "event.event_time"),
    "schema_version": _json(_E, "event.schema_version", "String"),
    "request": _json(_E, "event.request", "String"),
    "response": _json(_E, "event.response", "String"),
    "model": _json(_E, "event.model", "String"),
    "product": _json(_E, "event.product", "String"),
    "policy_bundle": _json(_E, "event.policy_bundle", "String"),
    "conversation_id": _json(_E, "event.conversation_id", "Nullable(String)"),
    "has_classifier": "toBool(JSONType(message, 'event', 'classifier') = 'Object')",
    "classifier_flagged": _json(_E, "event.classifier.flagged", "Nullable(Bool)"),
    "classifier_score": _json(_E, "event.classifier.score", "Nullable(Float64)"),
    "classifier_labels": _json(_E, "event.classifier.labels", "Array(String)"),
    "classifier_is_refusal": _json(_E, "event.classifier.is_refusal", "Nullable(Bool)"),
    "attributes": _json(_E, "event.attributes", "Map(String, String)"),
    "redactions": _json(_E, "redactions", "Map(String, UInt32)"),
    "is_refusal": _json(_E, "is_refusal", "Bool"),
    "refusal_kind": _json(_E, "refusal_kind", "String"),
    "refusal_score": _json(_E, "refusal_score", "Float64"),
    "refusal_cues": _json(_E, "refusal_cues", "Array(String)"),
    "source": _json(_E, "source", "String"),
    "ingested_at": _time(_E, "ingested_at"),
    "content_fingerprint": _json(_E, "content_fingerprint", "String"),
}

_ASSESSMENT_MAP: Mapping[str, str] = {
    **{
        name: _json(_A, name, "String")
        for name in (
            "log_id",
            "category",
            "assessment_rationale",
            "batch_id",
            "policy_bundle",
            "bundle_version",
            "engine",
            "engine_model",
            "engine_version",
            "prompt_version",
            "model",
            "product",
            "review_reason",
        )
    },
    "is_estimated_false_positive": _json(_A, "is_estimated_false_positive", "Bool"),
    "policy_clause_cited": _json(_A, "policy_clause_cited", "Nullable(String)"),
    "requires_human_review": _json(_A, "requires_human_review", "Bool"),
    "audited_at": _time(_A, "audited_at"),
    "event_time": _time(_A, "event_time"),
    "false_positive_score": _json(_A, "false_positive_score", "Nullable(Float64)"),
    "sampled_for_review": _json(_A, "sampled_for_review", "Bool"),
}

_BATCH_MAP: Mapping[str, str] = {
    **{
        name: _json(_B, name, "String")
        for name in (
            "batch_id",
            "policy_bundle",
            "bundle_version",
            "engine",
            "engine_model",
            "engine_version",
            "prompt_version",
        )
    },
    "audited_at": _time(_B, "audited_at"),
    "log_ids": _json(_B, "log_ids", "Array(String)"),
    "total_refusals": _json(_B, "summary.total_refusals", "UInt32"),
    "estimated_false_positives": _json(_B, "summary.estimated_false_positives", "UInt32"),
    "categorization": _json(_B, "summary.categorization", "Map(String, UInt32)"),
    "policy_gap_flags": _json(
        _B,
        "summary.policy_gap_flags",
        "Array(Tuple(description String, example_log_ids Array(String)))",
    ),
    "trends": _json(_B, "summary.trends_identified", "Array(String)"),
    "prompt_tokens": _json(_B, "usage.prompt_tokens", "UInt64"),
    "cached_tokens": _json(_B, "usage.cached_tokens", "UInt64"),
    "completion_tokens": _json(_B, "usage.completion_tokens", "UInt64"),
    "latency_ms": _json(_B, "usage.latency_ms", "Float64"),
}

# streams.sink.dead_letter_from_message: ids, stage, reason, source, location, log id and
# creation time from the headers; raw is the value; with x-raw-truncated, the whole
# value's length and SHA-256 from the headers, else (DeadLetter's validator) of raw itself.
_TRUNCATED = _has_header("x-raw-truncated")
_DEAD_LETTER_MAP: Mapping[str, str] = {
    "dead_letter_id": _header("x-dead-letter-id"),
    "stage": _header("x-stage"),
    "reason_code": _header("x-reason-code"),
    "reason": _header("x-reason"),
    "source": _header("x-source"),
    "location": _header("x-source-location"),
    "raw": "message",
    "raw_length": (
        f"if({_TRUNCATED} AND toInt64OrZero({_header('x-raw-truncated')}) != -1, "
        f"toUInt64(toInt64OrZero({_header('x-raw-truncated')})), length(message))"
    ),
    "raw_sha256": (
        f"if({_TRUNCATED} AND {_header('x-raw-sha256')} != '', {_header('x-raw-sha256')}, "
        "lower(hex(SHA256(message))))"
    ),
    "raw_truncated": f"toBool({_TRUNCATED})",
    "log_id": f"if({_has_header('x-log-id')}, {_header('x-log-id')}, NULL)",
    "created_at": f"parseDateTime64BestEffort({_header('x-dead-letter-created-at')}, 3, 'UTC')",
}

_NEEDED_HEADERS = ("x-dead-letter-id", "x-stage", "x-reason-code", "x-reason", "x-source",
                   "x-source-location", "x-dead-letter-created-at")  # fmt: skip
_STAGES = [str(s) for s in get_args(DeadLetter.model_fields["stage"].annotation)]


def _dead_letter_problems() -> str:
    """The headers of a dead-letter message that dead_letter_from_message would miss or
    DeadLetter reject (sorted): missing ones, an unknown stage, an unparseable creation
    time, an x-raw-truncated that is not an integer >= -1 or lacks x-raw-sha256."""
    truncated = f"toInt64OrNull({_header('x-raw-truncated')})"
    parts = [
        f"arrayFilter(h -> NOT has(header_names, h), {_array(_NEEDED_HEADERS)})",
        f"if({_has_header('x-stage')} AND {_header('x-stage')} NOT IN {_lits(_STAGES)}, "
        "['x-stage'], [])",
        f"if({_has_header('x-dead-letter-created-at')} AND parseDateTime64BestEffortOrNull("
        f"{_header('x-dead-letter-created-at')}, 3, 'UTC') IS NULL, "
        "['x-dead-letter-created-at'], [])",
        f"if({_TRUNCATED} AND ({truncated} IS NULL OR {truncated} < -1), ['x-raw-truncated'], [])",
        f"if({_TRUNCATED} AND NOT {_has_header('x-raw-sha256')}, ['x-raw-sha256'], [])",
    ]
    return f"arraySort(arrayDistinct({_concat_arrays(parts)}))"


@dataclass(frozen=True)
class KafkaSource:
    """One result topic and where its messages go.

    ``role``: the ``streams.topics.Topics`` attribute (also the object names' infix);
    ``suffix``: the topic name after the prefix; ``table``: the warehouse table;
    ``columns``: that table's columns in ``warehouse.store``'s insert order, each with the
    SQL expression computing it from a landing row (``message``, ``header_names``,
    ``header_values``); ``what``: how a rejected message's reason names what it is not;
    ``problems``: builds the SQL expression of a message's validation problems.
    """

    role: str
    suffix: str
    table: str
    columns: Mapping[str, str]
    what: str
    problems: Callable[[], str] = field(repr=False)


def _ordered(names: Sequence[str], mapping: Mapping[str, str], table: str) -> dict[str, str]:
    missing = [n for n in names if n not in mapping]
    extra = [n for n in mapping if n not in names]
    if missing or extra:  # a programming error: the mapping and warehouse.store disagree
        raise KeyError(f"{table}: no mapping for {missing}, mapping for unknown {extra}")
    return {n: mapping[n] for n in names}


#: The four result topics the sink reads, in the sink's insert order.
KAFKA_SOURCES: tuple[KafkaSource, ...] = (
    KafkaSource("stored_events", "stored-events", "refusal_events",
                _ordered(EVENT_COLUMNS, _EVENT_MAP, "refusal_events"),
                "a StoredEvent", lambda: message_problems(StoredEvent)),
    KafkaSource("assessments", "assessments", "assessments",
                _ordered(ASSESSMENT_COLUMNS, _ASSESSMENT_MAP, "assessments"),
                "a StoredAssessment", lambda: message_problems(StoredAssessment)),
    KafkaSource("audit_batches", "audit-batches", "audit_batches",
                _ordered(BATCH_COLUMNS, _BATCH_MAP, "audit_batches"),
                "a BatchRecord", lambda: message_problems(BatchRecord)),
    KafkaSource("dead_letters", "dead-letters", "dead_letters",
                _ordered(DEAD_LETTER_COLUMNS, _DEAD_LETTER_MAP, "dead_letters"),
                "a dead-letter message", _dead_letter_problems),
)  # fmt: skip


def source_columns(role: str) -> Mapping[str, str]:
    """The column -> SQL expression mapping of the source with ``role`` (e.g.
    ``"assessments"``). Raises ``KeyError`` for an unknown role."""
    for source in KAFKA_SOURCES:
        if source.role == role:
            return source.columns
    raise KeyError(f"no Kafka source {role!r}; known: {[s.role for s in KAFKA_SOURCES]}")


# ---- configuration and statements -------------------------------------------------------


@dataclass(frozen=True)
class KafkaEngineConfig:
    """What the generated DDL is for.

    ``database``: the migrated warehouse database; ``topic_prefix``: ``kafka_topic_prefix``;
    ``broker_list``: ``kafka_broker_list`` (``host:port[,host:port...]``); ``group``: the
    base of the consumer groups, one per topic (``<group>-<topic suffix>``, as ClickHouse
    recommends one group per Kafka table), never the sink's; ``num_consumers``:
    ``kafka_num_consumers`` per table (at most the topic's partitions);
    ``extra_settings``: more Kafka table settings, e.g. ``kafka_security_protocol``,
    ``kafka_sasl_mechanism`` (names ``kafka_*``, not the ones set here).
    """

    database: str = DEFAULT_DATABASE
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    broker_list: str = DEFAULT_BROKER_LIST
    group: str = DEFAULT_GROUP
    num_consumers: int = 1
    extra_settings: Mapping[str, str | int] = field(default_factory=dict)

    def validate(self) -> None:
        """Raise ``ValueError`` for a value that cannot go into the DDL: a database name
        that is not a plain identifier, a topic prefix with characters Kafka does not
        allow, an empty or malformed broker list, an empty group, ``num_consumers`` below
        1, or an extra setting that is not ``kafka_*`` or is one this module sets."""
        try:
            validate_identifier(self.database)
        except WarehouseError as exc:
            raise ValueError(str(exc)) from exc
        if not _TOPIC_RE.match(self.topic_prefix):
            raise ValueError(
                f"topic prefix {self.topic_prefix!r}: use letters, digits, '.', '_', '-'"
            )
        if not _BROKERS_RE.match(self.broker_list):
            raise ValueError(f"broker list {self.broker_list!r}: expected host:port[,host:port...]")
        if not self.group:
            raise ValueError("the consumer group must not be empty")
        if self.num_consumers < 1:
            raise ValueError(f"num_consumers must be at least 1, got {self.num_consumers}")
        for name in self.extra_settings:
            if not _SETTING_RE.match(name) or name in _RESERVED_SETTINGS:
                raise ValueError(
                    f"extra setting {name!r}: expected a kafka_* setting other than "
                    f"{sorted(_RESERVED_SETTINGS)}"
                )

    def topic(self, source: KafkaSource) -> str:
        """The topic name of ``source``."""
        return self.topic_prefix + source.suffix

    def group_name(self, source: KafkaSource) -> str:
        """The consumer group of ``source``'s Kafka table."""
        return f"{self.group}-{source.suffix}"


def _name(db: str, source: KafkaSource, kind: str) -> str:
    return f"{db}.kafka_{source.role}_{kind}"


def _setting_value(value: str | int) -> str:
    return (
        str(value) if isinstance(value, int) and not isinstance(value, bool) else _lit(str(value))
    )


def _queue_ddl(cfg: KafkaEngineConfig, db: str, source: KafkaSource, stand_in: bool) -> str:
    name = _name(db, source, "queue")
    if stand_in:
        cols = ",\n".join(f"    `{c}` {t}" for c, t in QUEUE_COLUMNS.items())
        return f"CREATE TABLE IF NOT EXISTS {name}\n(\n{cols}\n)\nENGINE = Null"
    settings = {
        "kafka_broker_list": cfg.broker_list,
        "kafka_topic_list": cfg.topic(source),
        "kafka_group_name": cfg.group_name(source),
        "kafka_format": "RawBLOB",
        "kafka_handle_error_mode": "stream",
        "kafka_num_consumers": cfg.num_consumers,
        **cfg.extra_settings,
    }
    rendered = ",\n".join(f"    {k} = {_setting_value(v)}" for k, v in settings.items())
    return (
        f"CREATE TABLE IF NOT EXISTS {name}\n(\n    value String\n)\n"
        f"ENGINE = Kafka\nSETTINGS\n{rendered}"
    )


def _landing_ddl(db: str, source: KafkaSource) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {_name(db, source, 'landing')}\n(\n"
        "    message         String,\n"
        "    topic           LowCardinality(String),\n"
        "    kafka_partition UInt64,\n"
        "    kafka_offset    UInt64,\n"
        "    header_names    Array(String),\n"
        "    header_values   Array(String),\n"
        "    written_at      Nullable(DateTime64(3, 'UTC')),\n"
        "    problems        Array(String)\n"
        ")\nENGINE = Null"
    )


def _consumer_ddl(db: str, source: KafkaSource) -> str:
    return (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {_name(db, source, 'consumer')}\n"
        f"TO {_name(db, source, 'landing')} AS\n"
        "SELECT if(_error = '', value, _raw_message) AS message,\n"
        "       _topic AS topic,\n"
        "       _partition AS kafka_partition,\n"
        "       _offset AS kafka_offset,\n"
        "       `_headers.name` AS header_names,\n"
        "       `_headers.value` AS header_values,\n"
        "       _timestamp_ms AS written_at,\n"
        f"       if(_error = '', {source.problems()}, ['(value)']) AS problems\n"
        f"FROM {_name(db, source, 'queue')}"
    )


def _rows_ddl(db: str, source: KafkaSource) -> str:
    cols = ",\n       ".join(f"{expr} AS {name}" for name, expr in source.columns.items())
    return (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {_name(db, source, 'rows')}\n"
        f"TO {db}.{source.table} AS\n"
        f"SELECT {cols}\n"
        f"FROM {_name(db, source, 'landing')}\n"
        "WHERE empty(problems)"
    )


def _rejects_ddl(db: str, source: KafkaSource) -> str:
    """refusal_audit.sink._undecodable in SQL: created_at is the message's timestamp (a
    redelivered message gives the same row); dead_letter_id is a SHA-256 prefix."""
    location = "concat('partition ', toString(kafka_partition), ' offset ', toString(kafka_offset))"
    reason = f"concat({_lit(f'not {source.what}: ')}, arrayStringConcat(problems, ', '))"
    exprs = {
        "dead_letter_id": (
            f"lower(hex(substring(SHA256(concat(topic, '|', {location}, message)), 1, 16)))"
        ),
        "stage": "'store'",
        "reason_code": "'sink_decode'",
        "reason": f"substringUTF8({reason}, 1, {_MAX_REASON_CHARS})",
        "source": "topic",
        "location": location,
        "raw": f"substring(message, 1, {_MAX_REJECT_RAW_BYTES})",
        "raw_length": "length(message)",
        "raw_sha256": "lower(hex(SHA256(message)))",
        "raw_truncated": f"toBool(length(message) > {_MAX_REJECT_RAW_BYTES})",
        "log_id": "CAST(NULL, 'Nullable(String)')",
        "created_at": "ifNull(written_at, now64(3, 'UTC'))",
    }
    cols = ",\n       ".join(f"{exprs[n]} AS {n}" for n in DEAD_LETTER_COLUMNS)
    return (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {_name(db, source, 'rejects')}\n"
        f"TO {db}.dead_letters AS\n"
        f"SELECT {cols}\n"
        f"FROM {_name(db, source, 'landing')}\n"
        "WHERE notEmpty(problems)"
    )


def kafka_engine_statements(
    config: KafkaEngineConfig | None = None, *, stand_in: bool = False
) -> list[str]:
    """The DDL statements, in order, that make ClickHouse consume the result topics into
    the warehouse tables of ``config.database`` (default ``KafkaEngineConfig()``), which must
    already be migrated. Per topic: landing table, rows view, rejects view, Kafka table,
    consumer view (module docstring). Every statement is ``IF NOT EXISTS``: applying them
    again changes nothing (change a view by dropping first, see
    :func:`kafka_engine_drop_statements`).

    ``stand_in=True`` renders each Kafka table as a ``Null`` table of the same name with the
    value and the virtual columns the consumer view reads as ordinary columns
    (``QUEUE_COLUMNS``): inserting what the Kafka engine would hand over into it runs the
    same views (for tests, and to load messages by hand). Raises ``ValueError`` for an
    invalid ``config`` (``KafkaEngineConfig.validate``).
    """
    cfg = config or KafkaEngineConfig()
    cfg.validate()
    db = quote_identifier(cfg.database)
    out: list[str] = []
    for source in KAFKA_SOURCES:
        out += [
            _landing_ddl(db, source),
            _rows_ddl(db, source),
            _rejects_ddl(db, source),
            _queue_ddl(cfg, db, source, stand_in),
            _consumer_ddl(db, source),
        ]
    return out


def kafka_engine_drop_statements(config: KafkaEngineConfig | None = None) -> list[str]:
    """``DROP ... IF EXISTS`` of everything :func:`kafka_engine_statements` creates, the
    consumer views first (consumption stops before anything it writes to goes away). The
    warehouse tables and their rows stay; the consumer groups' offsets stay in Kafka.
    Raises ``ValueError`` for an invalid ``config``."""
    cfg = config or KafkaEngineConfig()
    cfg.validate()
    db = quote_identifier(cfg.database)
    out: list[str] = []
    for kind, what in (("consumer", "VIEW"), ("queue", "TABLE"), ("rows", "VIEW"),
                       ("rejects", "VIEW"), ("landing", "TABLE")):  # fmt: skip
        out += [f"DROP {what} IF EXISTS {_name(db, s, kind)}" for s in KAFKA_SOURCES]
    return out


def render_kafka_engine_sql(config: KafkaEngineConfig | None = None) -> str:
    """The statements of :func:`kafka_engine_statements` as one script for
    ``clickhouse-client --multiquery``, with a header saying what it is for. Raises
    ``ValueError`` for an invalid ``config``."""
    cfg = config or KafkaEngineConfig()
    statements = kafka_engine_statements(cfg)
    topics = ", ".join(cfg.topic(s) for s in KAFKA_SOURCES)
    header = [
        "-- ClickHouse's Kafka table engine in place of `refusal-audit sink` (docs/streaming.md,",
        '-- "ClickHouse\'s Kafka engine instead of the sink"). Generated by',
        "-- `python -m warehouse.kafka_engine` (warehouse/kafka_engine.py); do not edit by hand.",
        f"--   database {cfg.database} (migrated first: `refusal-audit migrate`)",
        f"--   topics   {topics}",
        f"--   brokers  {cfg.broker_list}",
        f"--   groups   {cfg.group}-<topic suffix>",
        "-- Apply: clickhouse-client --multiquery < kafka_engine.sql",
        "-- Consumers read with librdkafka's default isolation.level=read_committed (pinned for",
        "-- these topics by refusal-audit-kafka.xml in the server's config.d).",
    ]
    body = []
    for i, stmt in enumerate(statements):
        if i % 5 == 0:
            source = KAFKA_SOURCES[i // 5]
            body.append(f"-- {cfg.topic(source)} -> {cfg.database}.{source.table}")
        body.append(stmt + ";")
    return "\n".join(header) + "\n\n" + "\n\n".join(body) + "\n"


def render_kafka_consumer_config(config: KafkaEngineConfig | None = None) -> str:
    """A ClickHouse server configuration file (for ``config.d/``) setting librdkafka's
    ``isolation.level`` to ``read_committed`` for the consumers of these topics: the
    workers' outputs are transactional, and only committed ones may reach the warehouse.
    It is librdkafka's default and ClickHouse does not change it; this pins it against a
    server-wide ``read_uncommitted``. Raises ``ValueError`` for an invalid ``config``."""
    cfg = config or KafkaEngineConfig()
    cfg.validate()
    topics = "\n".join(
        "            <kafka_topic>\n"
        f"                <name>{xml_escape(cfg.topic(s))}</name>\n"
        "                <isolation_level>read_committed</isolation_level>\n"
        "            </kafka_topic>"
        for s in KAFKA_SOURCES
    )
    return (
        "<!-- refusal-audit: Kafka consumers of the result topics read committed transactions\n"
        "     only. Generated by `python -m warehouse.kafka_engine`; goes to the server's\n"
        "     config.d/. -->\n"
        "<clickhouse>\n    <kafka>\n        <consumer>\n"
        f"{topics}\n"
        "        </consumer>\n    </kafka>\n</clickhouse>\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m warehouse.kafka_engine``: write ``kafka_engine.sql`` and
    ``refusal-audit-kafka.xml`` for the given settings into ``--out-dir`` (default
    ``deploy/clickhouse``). Returns the exit status (2 for invalid settings)."""
    parser = argparse.ArgumentParser(prog="python -m warehouse.kafka_engine",
                                     description=main.__doc__)  # fmt: skip
    parser.add_argument("--database", default=DEFAULT_DATABASE)
    parser.add_argument("--topic-prefix", default=DEFAULT_TOPIC_PREFIX)
    parser.add_argument("--brokers", default=DEFAULT_BROKER_LIST)
    parser.add_argument("--group", default=DEFAULT_GROUP)
    parser.add_argument("--num-consumers", type=int, default=1)
    parser.add_argument("--out-dir", type=Path, default=Path("deploy/clickhouse"))
    args = parser.parse_args(argv)
    cfg = KafkaEngineConfig(args.database, args.topic_prefix, args.brokers, args.group,
                            args.num_consumers)  # fmt: skip
    try:
        sql, xml = render_kafka_engine_sql(cfg), render_kafka_consumer_config(cfg)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "kafka_engine.sql").write_text(sql, encoding="utf-8")
    (args.out_dir / "refusal-audit-kafka.xml").write_text(xml, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
