"""The column mappings of ClickHouse's Kafka engine views (``warehouse.kafka_engine``):
for each result topic, each warehouse column as an SQL expression of the message, exactly as
``warehouse.store``'s ``insert_*`` build rows from ``StoredEvent``, ``StoredAssessment``,
``BatchRecord`` and, for the dead-letter topic, from the headers
``streams.dead_letters.dead_letter_message`` writes. Pure: nothing here connects to a server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from schemas.audit import BatchRecord, StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent
from warehouse.kafka_checks import (
    concat_arrays,
    is_model,
    lit,
    lits,
    message_problems,
    split_annotation,
    sql_array,
)
from warehouse.rows import (
    ASSESSMENT_COLUMNS,
    BATCH_COLUMNS,
    DEAD_LETTER_COLUMNS,
    EVENT_COLUMNS,
)

__all__ = ["KAFKA_SOURCES", "KafkaSource", "source_columns"]

# ---- column mappings (warehouse.rows' event_row, assessment_row, ...) -----------------


def _field_info(model: type[BaseModel], path: str) -> FieldInfo:
    """The field at dotted ``path`` of ``model`` (through nested models, optional or not).
    Raises ``KeyError`` naming the path when a part is not a field."""
    current: type[BaseModel] = model
    info: FieldInfo | None = None
    for part in path.split("."):
        if info is not None:
            tp, _, _ = split_annotation(info.annotation)
            if not is_model(tp):
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
        return lit(value)
    if isinstance(value, bool | int | float):
        return repr(value).lower() if isinstance(value, bool) else repr(value)
    raise TypeError(f"no SQL literal for default {value!r}")


def _json(model: type[BaseModel], path: str, ch_type: str) -> str:
    """``JSONExtract`` of the field at dotted ``path`` of ``model`` as ``ch_type``, with the
    model's default for an absent key (a message not written by a worker may omit it).
    Raises ``KeyError`` when ``path`` is not a field of ``model``."""
    info = _field_info(model, path)
    args = ", ".join(["message", *(lit(p) for p in path.split("."))])
    extract = f"JSONExtract({args}, {lit(ch_type)})"
    default = (
        None if info.is_required() else _sql_default(info.get_default(call_default_factory=True))
    )
    return extract if default is None else f"if(JSONHas({args}), {extract}, {default})"


def _time(model: type[BaseModel], path: str) -> str:
    """The datetime field at ``path`` as ``DateTime64(3, 'UTC')`` (warehouse.store.to_utc:
    an offset converts to UTC, none means UTC; fractions beyond milliseconds are cut, as
    clickhouse-connect cuts them on insert). Raises ``KeyError`` for an unknown path."""
    _field_info(model, path)
    args = ", ".join(["message", *(lit(p) for p in path.split("."))])
    return f"parseDateTime64BestEffort(JSONExtractString({args}), 3, 'UTC')"


def _header(name: str) -> str:
    """The first value of header ``name`` ('' when absent), as dead_letter_from_message."""
    return f"header_values[indexOf(header_names, {lit(name)})]"


def _has_header(name: str) -> str:
    return f"has(header_names, {lit(name)})"


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
    "detected_is_refusal": _json(_E, "detected_is_refusal", "Nullable(Bool)"),
    "detected_refusal_score": _json(_E, "detected_refusal_score", "Nullable(Float64)"),
    "refusal_disagreement": _json(_E, "refusal_disagreement", "String"),
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

# streams.dead_letters.dead_letter_from_message: ids, stage, reason, source, location, log id and
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
        f"arrayFilter(h -> NOT has(header_names, h), {sql_array(_NEEDED_HEADERS)})",
        f"if({_has_header('x-stage')} AND {_header('x-stage')} NOT IN {lits(_STAGES)}, "
        "['x-stage'], [])",
        f"if({_has_header('x-dead-letter-created-at')} AND parseDateTime64BestEffortOrNull("
        f"{_header('x-dead-letter-created-at')}, 3, 'UTC') IS NULL, "
        "['x-dead-letter-created-at'], [])",
        f"if({_TRUNCATED} AND ({truncated} IS NULL OR {truncated} < -1), ['x-raw-truncated'], [])",
        f"if({_TRUNCATED} AND NOT {_has_header('x-raw-sha256')}, ['x-raw-sha256'], [])",
    ]
    return f"arraySort(arrayDistinct({concat_arrays(parts)}))"


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
