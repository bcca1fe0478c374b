"""The audit result as LLMs send it: a strict-mode JSON Schema and its conversion.

OpenAI's strict structured outputs accept a subset of JSON Schema: every object must set
``additionalProperties: false`` and list every property in ``required`` (an optional value
is a required property that may be null), and open maps are not allowed. ``AuditResult``
has one open map, ``audit_summary.categorization`` (category -> count), so on the wire it is
a list of ``{"category", "count"}`` pairs. Length and range constraints are left out (not
every OpenAI-compatible server accepts them); pydantic and the harness check them.
``batch_wire_schema`` narrows the schema to one batch (its log ids, the bundle's categories
and clauses, bounded texts and lists) for servers that turn it into a grammar (llama.cpp).

``WIRE_JSON_SCHEMA`` is the schema; ``to_audit_result`` turns a decoded answer into an
``AuditResult``. The prompt template (``prompts/audit_v1.md``) shows the model the same
schema, and a test keeps the two equal.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, NonNegativeInt

from schemas.audit import AuditResult, AuditSummary, IndividualAssessment, PolicyGapFlag

WIRE_SCHEMA_NAME = "audit_result"
"""The ``json_schema.name`` sent with ``response_format``."""


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


WIRE_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "audit_summary": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "total_refusals": {
                    "type": "integer",
                    "description": "Number of refusal events assessed.",
                },
                "categorization": {
                    "type": "array",
                    "description": "Number of assessments per category code.",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "category": _string("A category code of the refusal taxonomy."),
                            "count": {"type": "integer"},
                        },
                        "required": ["category", "count"],
                    },
                },
                "estimated_false_positives": {
                    "type": "integer",
                    "description": "Number of assessments estimated to be false positives.",
                },
                "policy_gap_flags": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "description": _string(
                                "What was refused that no policy clause covers."
                            ),
                            "example_log_ids": {
                                "type": "array",
                                "items": {"type": "string"},
                                "description": "log_id values of the batch showing the gap.",
                            },
                        },
                        "required": ["description", "example_log_ids"],
                    },
                },
                "trends_identified": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Patterns seen across the batch, one sentence each.",
                },
            },
            "required": [
                "total_refusals",
                "categorization",
                "estimated_false_positives",
                "policy_gap_flags",
                "trends_identified",
            ],
        },
        "individual_assessments": {
            "type": "array",
            "description": "Exactly one assessment per input event.",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "log_id": _string("The event's log_id, copied exactly."),
                    "category": _string("One category code of the refusal taxonomy."),
                    "is_estimated_false_positive": {"type": "boolean"},
                    "policy_clause_cited": {
                        "anyOf": [
                            _string("A clause id of the given policies, e.g. AUP-2.3."),
                            {"type": "null"},
                        ]
                    },
                    "assessment_rationale": _string("Why, in one to three sentences."),
                    "requires_human_review": {"type": "boolean"},
                },
                "required": [
                    "log_id",
                    "category",
                    "is_estimated_false_positive",
                    "policy_clause_cited",
                    "assessment_rationale",
                    "requires_human_review",
                ],
            },
        },
    },
    "required": ["audit_summary", "individual_assessments"],
}
"""The strict-mode JSON Schema of the audit answer. Use as::

    response_format={"type": "json_schema", "json_schema": {"name": WIRE_SCHEMA_NAME,
                     "strict": True, "schema": WIRE_JSON_SCHEMA}}
"""


class WireCategoryCount(BaseModel):
    """One ``{category, count}`` pair of the wire ``categorization`` list."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    category: str
    count: NonNegativeInt


class WireSummary(BaseModel):
    """``audit_summary`` as sent on the wire (categorization as a list of pairs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    total_refusals: NonNegativeInt
    categorization: list[WireCategoryCount]
    estimated_false_positives: NonNegativeInt
    policy_gap_flags: list[PolicyGapFlag]
    trends_identified: list[str]


class WireResult(BaseModel):
    """The whole wire answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    audit_summary: WireSummary
    individual_assessments: list[IndividualAssessment]


def to_audit_result(data: dict[str, Any]) -> AuditResult:
    """Convert a decoded wire answer (``WIRE_JSON_SCHEMA`` shape) into an ``AuditResult``.

    ``categorization`` pairs become the ``{category: count}`` map (a category listed twice
    has its counts added; the harness recomputes every count anyway). Raises
    ``pydantic.ValidationError`` when ``data`` does not match the wire schema or the
    ``AuditResult`` constraints (e.g. an empty ``log_id`` or rationale, a negative count).
    """
    wire = WireResult.model_validate(data)
    categorization: dict[str, int] = {}
    for pair in wire.audit_summary.categorization:
        categorization[pair.category] = categorization.get(pair.category, 0) + pair.count
    summary = AuditSummary(
        total_refusals=wire.audit_summary.total_refusals,
        categorization=categorization,
        estimated_false_positives=wire.audit_summary.estimated_false_positives,
        policy_gap_flags=wire.audit_summary.policy_gap_flags,
        trends_identified=wire.audit_summary.trends_identified,
    )
    return AuditResult(audit_summary=summary, individual_assessments=wire.individual_assessments)


def to_wire(result: AuditResult) -> dict[str, Any]:
    """The wire form of ``result`` (the inverse of ``to_audit_result``), as JSON-ready data."""
    data = result.model_dump(mode="json")
    data["audit_summary"]["categorization"] = [
        {"category": c, "count": n} for c, n in result.audit_summary.categorization.items()
    ]
    return data


BATCH_RATIONALE_MAX_CHARS = 600
"""Longest ``assessment_rationale`` the per-batch schema allows (the prompt asks for one to
three sentences; 600 characters is about three long ones)."""
BATCH_MAX_GAP_FLAGS = 5
"""Most ``policy_gap_flags`` the per-batch schema allows (each must cite a reviewed event;
the harness keeps only those)."""
BATCH_MAX_TRENDS = 5
"""Most ``trends_identified`` the per-batch schema allows."""
BATCH_TEXT_MAX_CHARS = 300
"""Longest gap description or trend the per-batch schema allows (one sentence)."""


def batch_wire_schema(
    log_ids: Sequence[str], categories: Iterable[str], clause_ids: Iterable[str]
) -> dict[str, Any]:
    """``WIRE_JSON_SCHEMA`` narrowed to one batch, for servers that compile the schema into a
    decoding grammar (llama.cpp): every ``log_id`` and ``example_log_ids`` item one of
    ``log_ids``, exactly ``len(log_ids)`` assessments, ``category`` one of ``categories``
    (sorted), ``policy_clause_cited`` one of ``clause_ids`` or null, and every free text and
    list bounded (``BATCH_*`` constants). The answer can then neither invent ids nor run on
    past its last closing brace: its length is bounded by the grammar, not only by
    ``max_tokens``. Not sent to OpenAI (whose strict mode documents a smaller subset); the
    harness checks the same rules either way. Raises ``ValueError`` for an empty ``log_ids``
    or ``categories``."""
    ids = list(dict.fromkeys(log_ids))
    codes = sorted(set(categories))
    clauses = sorted(set(clause_ids))
    if not ids or not codes:
        raise ValueError("a batch schema needs at least one log id and one category")
    schema = copy.deepcopy(WIRE_JSON_SCHEMA)
    summary = schema["properties"]["audit_summary"]["properties"]
    summary["categorization"]["maxItems"] = len(codes)
    summary["categorization"]["items"]["properties"]["category"]["enum"] = codes
    flags = summary["policy_gap_flags"]
    flags["maxItems"] = BATCH_MAX_GAP_FLAGS
    flag = flags["items"]["properties"]
    flag["description"]["minLength"] = 1
    flag["description"]["maxLength"] = BATCH_TEXT_MAX_CHARS
    flag["example_log_ids"]["items"]["enum"] = ids
    flag["example_log_ids"]["minItems"] = 1
    flag["example_log_ids"]["maxItems"] = len(ids)
    summary["trends_identified"]["maxItems"] = BATCH_MAX_TRENDS
    summary["trends_identified"]["items"]["maxLength"] = BATCH_TEXT_MAX_CHARS
    assessments = schema["properties"]["individual_assessments"]
    assessments["minItems"] = assessments["maxItems"] = len(ids)
    item = assessments["items"]["properties"]
    item["log_id"]["enum"] = ids
    item["category"]["enum"] = codes
    item["assessment_rationale"]["minLength"] = 1
    item["assessment_rationale"]["maxLength"] = BATCH_RATIONALE_MAX_CHARS
    cited = item["policy_clause_cited"]["anyOf"][0]
    if clauses:
        cited["enum"] = clauses
    else:
        item["policy_clause_cited"] = {"type": "null"}
    return schema
