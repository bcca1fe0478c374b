"""The tables' columns and how the pipeline's records become their rows.

``EVENT_COLUMNS``, ``ASSESSMENT_COLUMNS``, ``BATCH_COLUMNS``, ``DEAD_LETTER_COLUMNS`` and
``ALERT_COLUMNS`` in insert order (``TABLE_COLUMNS``: the first four by table); the row
builders ``Warehouse`` inserts with (``event_row``, ``assessment_row``, ``batch_row``,
``dead_letter_row``: one list of values per record, in its table's column order, datetimes
as aware UTC; the warehouse sink builds its rows with them too, see
``Warehouse.insert_built``); ``dedup_token``, the content-derived insert deduplication
token; ``to_utc``. The Kafka engine's column mappings
(``warehouse.kafka_columns``) follow the same order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from schemas import BatchRecord, DeadLetter, StoredAssessment, StoredEvent
from schemas.audit import PolicyGapFlag

__all__ = [
    "ALERT_COLUMNS",
    "ASSESSMENT_COLUMNS",
    "BATCH_COLUMNS",
    "DEAD_LETTER_COLUMNS",
    "EVENT_COLUMNS",
    "TABLE_COLUMNS",
    "assessment_row",
    "batch_row",
    "dead_letter_row",
    "dedup_token",
    "event_row",
    "to_utc",
]

EVENT_COLUMNS = (
    "log_id", "event_time", "schema_version", "request", "response", "model", "product",
    "policy_bundle", "conversation_id", "has_classifier", "classifier_flagged",
    "classifier_score", "classifier_labels", "classifier_is_refusal", "attributes",
    "redactions", "is_refusal", "refusal_kind", "refusal_score", "refusal_cues", "source",
    "ingested_at", "content_fingerprint", "detected_is_refusal", "detected_refusal_score",
    "refusal_disagreement",
)  # fmt: skip

ASSESSMENT_COLUMNS = (
    "log_id", "category", "is_estimated_false_positive", "policy_clause_cited",
    "assessment_rationale", "requires_human_review", "batch_id", "policy_bundle",
    "bundle_version", "engine", "engine_model", "engine_version", "prompt_version",
    "audited_at", "event_time", "model", "product", "false_positive_score",
    "sampled_for_review", "review_reason",
)  # fmt: skip

BATCH_COLUMNS = (
    "batch_id", "policy_bundle", "bundle_version", "engine", "engine_model", "engine_version",
    "prompt_version", "audited_at", "log_ids", "total_refusals", "estimated_false_positives",
    "categorization", "policy_gap_flags", "trends", "prompt_tokens", "cached_tokens",
    "completion_tokens", "latency_ms",
)  # fmt: skip

DEAD_LETTER_COLUMNS = (
    "dead_letter_id", "stage", "reason_code", "reason", "source", "location", "raw",
    "raw_length", "raw_sha256", "raw_truncated", "log_id", "created_at",
)  # fmt: skip

#: The columns of the tables the row builders fill, by table, in insert order.
TABLE_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "refusal_events": EVENT_COLUMNS,
    "assessments": ASSESSMENT_COLUMNS,
    "audit_batches": BATCH_COLUMNS,
    "dead_letters": DEAD_LETTER_COLUMNS,
}

#: Columns of the ``alerts`` table: name -> default for an optional key (``...``: required).
ALERT_COLUMNS: Mapping[str, Any] = {
    "alert_id": ...,
    "kind": ...,
    "severity": ...,
    "created_at": ...,
    "policy_bundle": "",
    "model": "",
    "product": "",
    "window_start": None,
    "window_end": None,
    "message": "",
    "payload": "{}",
}


def to_utc(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime; a naive value is taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _json_default(value: object) -> object:
    if isinstance(value, datetime):
        return to_utc(value).isoformat()
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    return str(value)


_TOKEN_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def dedup_token(table: str, rows: Sequence[Sequence[Any]]) -> str:
    """A deterministic insert deduplication token for ``rows`` going into ``table``.

    The rows are serialised with orjson (sorted keys; ``_json_default`` for what it does
    not know), several times faster than ``json`` on a window of events; values orjson
    cannot encode (e.g. an int beyond 64 bits) fall back to ``json``.
    """
    try:
        payload = orjson.dumps([table, rows], default=_json_default, option=_TOKEN_OPTIONS)
    except (orjson.JSONEncodeError, TypeError):
        text = json.dumps([table, rows], default=_json_default, sort_keys=True, ensure_ascii=False)
        payload = text.encode("utf-8")
    return f"{table}:{hashlib.sha256(payload).hexdigest()}"


def event_row(item: StoredEvent) -> list[Any]:
    """A ``refusal_events`` row (``EVENT_COLUMNS``) of a stored event."""
    event = item.event
    signal = event.classifier
    return [
        event.log_id,
        to_utc(event.event_time),
        event.schema_version,
        event.request,
        event.response,
        event.model,
        event.product,
        event.policy_bundle,
        event.conversation_id,
        signal is not None,
        signal.flagged if signal is not None else None,
        signal.score if signal is not None else None,
        list(signal.labels) if signal is not None else [],
        signal.is_refusal if signal is not None else None,
        dict(event.attributes),
        dict(item.redactions),
        item.is_refusal,
        item.refusal_kind,
        item.refusal_score,
        list(item.refusal_cues),
        item.source,
        to_utc(item.ingested_at),
        item.content_fingerprint,
        item.detected_is_refusal,
        item.detected_refusal_score,
        item.refusal_disagreement,
    ]


def assessment_row(item: StoredAssessment) -> list[Any]:
    """An ``assessments`` row (``ASSESSMENT_COLUMNS``) of an assessment."""
    return [
        item.log_id,
        item.category,
        item.is_estimated_false_positive,
        item.policy_clause_cited,
        item.assessment_rationale,
        item.requires_human_review,
        item.batch_id,
        item.policy_bundle,
        item.bundle_version,
        item.engine,
        item.engine_model,
        item.engine_version,
        item.prompt_version,
        to_utc(item.audited_at),
        to_utc(item.event_time),
        item.model,
        item.product,
        item.false_positive_score,
        item.sampled_for_review,
        item.review_reason,
    ]


def batch_row(batch: BatchRecord) -> list[Any]:
    """An ``audit_batches`` row (``BATCH_COLUMNS``) of an audited batch."""
    summary = batch.summary
    return [
        batch.batch_id,
        batch.policy_bundle,
        batch.bundle_version,
        batch.engine,
        batch.engine_model,
        batch.engine_version,
        batch.prompt_version,
        to_utc(batch.audited_at),
        list(batch.log_ids),
        summary.total_refusals,
        summary.estimated_false_positives,
        dict(summary.categorization),
        [(flag.description, list(flag.example_log_ids)) for flag in summary.policy_gap_flags],
        list(summary.trends_identified),
        batch.usage.prompt_tokens,
        batch.usage.cached_tokens,
        batch.usage.completion_tokens,
        batch.usage.latency_ms,
    ]


def gap_flag(value: Any) -> PolicyGapFlag:
    """A stored ``policy_gap_flags`` element (a named tuple: a dict from chDB, a pair from a
    server) as a ``PolicyGapFlag``."""
    if isinstance(value, Mapping):
        return PolicyGapFlag.model_validate(value)
    description, examples = value
    return PolicyGapFlag(description=description, example_log_ids=list(examples))


def dead_letter_row(item: DeadLetter) -> list[Any]:
    """A ``dead_letters`` row (``DEAD_LETTER_COLUMNS``) of a dead letter."""
    return [
        item.dead_letter_id,
        item.stage,
        item.reason_code,
        item.reason,
        item.source,
        item.location,
        bytes(item.raw),
        item.raw_length,
        item.raw_sha256,
        item.raw_truncated,
        item.log_id,
        to_utc(item.created_at),
    ]


def alert_row(alert: Mapping[str, Any]) -> list[Any]:
    """The ``alerts`` column values of ``alert``, in ``ALERT_COLUMNS`` order; ValueError on unknown
    fields."""
    unknown = set(alert) - set(ALERT_COLUMNS)
    if unknown:
        raise ValueError(f"unknown alert field(s) {sorted(unknown)}; known: {list(ALERT_COLUMNS)}")
    row: list[Any] = []
    for name, default in ALERT_COLUMNS.items():
        if name not in alert and default is ...:
            raise ValueError(f"alert is missing required field {name!r}")
        value = alert.get(name, default)
        if name == "payload" and not isinstance(value, str):
            value = json.dumps(value, default=_json_default, sort_keys=True, ensure_ascii=False)
        elif isinstance(value, datetime):
            value = to_utc(value)
        elif name in ("alert_id", "kind", "severity") and not (isinstance(value, str) and value):
            raise ValueError(f"alert field {name!r} must be a non-empty string, got {value!r}")
        row.append(value)
    return row
