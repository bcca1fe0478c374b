"""The audit result contract: exactly the structure of the audit prompt's output.

``AuditResult`` is what an engine (``local`` or an LLM) returns for one batch.
``StoredAssessment`` and ``BatchRecord`` add what the warehouse keeps about who judged what,
when and with which prompt/engine version.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt


class PolicyGapFlag(BaseModel):
    """A refusal pattern that maps to no policy clause: a potential gap in the policy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = Field(min_length=1)
    example_log_ids: list[str] = Field(min_length=1)


class AuditSummary(BaseModel):
    """The batch-level summary. The harness recomputes the counts from the assessments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    total_refusals: NonNegativeInt
    categorization: dict[str, NonNegativeInt]
    estimated_false_positives: NonNegativeInt
    policy_gap_flags: list[PolicyGapFlag]
    trends_identified: list[str]


class IndividualAssessment(BaseModel):
    """The audit's judgement of one refusal.

    ``is_estimated_false_positive`` means an over-refusal: the request complied with every
    given policy. ``policy_clause_cited`` is a clause id of the bundle (e.g. ``"AUP-2.3"``) or
    null when no clause applies.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    log_id: str = Field(min_length=1)
    category: str = Field(min_length=1)
    is_estimated_false_positive: bool
    policy_clause_cited: str | None
    assessment_rationale: str = Field(min_length=1)
    requires_human_review: bool


class AuditResult(BaseModel):
    """One batch's audit output: a summary and one assessment per input refusal."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    audit_summary: AuditSummary
    individual_assessments: list[IndividualAssessment]


class EngineUsage(BaseModel):
    """Token usage and latency of one engine call (all zero tokens for the local engine)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_tokens: NonNegativeInt = 0
    cached_tokens: NonNegativeInt = 0
    completion_tokens: NonNegativeInt = 0
    latency_ms: float = Field(default=0.0, ge=0.0)


class AuditProvenance(BaseModel):
    """Who judged a batch, with which policies and prompt, and when.

    ``batch_id`` is deterministic (see ``BatchRecord``); ``bundle_version`` the policy
    bundle's content hash; ``engine``/``engine_model``/``engine_version`` the engine's
    identity; ``prompt_version`` the prompt template's content hash (``"none"`` for the
    local engine); ``audited_at`` the audit time (UTC).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch_id: str
    policy_bundle: str
    bundle_version: str
    engine: str
    engine_model: str
    engine_version: str
    prompt_version: str
    audited_at: datetime


class StoredAssessment(AuditProvenance, IndividualAssessment):
    """An assessment as the warehouse keeps it: the judgement plus provenance and context.

    ``false_positive_score`` is the engine's over-refusal score in [0, 1] when it has one
    (the local engine does; an LLM may not). ``sampled_for_review`` is the harness's review
    sampling decision (every flagged item plus a seeded random share of the rest and, with
    ``review_uncertainty_band``, unflagged undrawn items scored near the threshold);
    ``review_reason`` says why (``flagged``, ``random_sample``, ``uncertainty`` or ``""``).
    """

    event_time: datetime
    model: str
    product: str
    false_positive_score: float | None = Field(default=None, ge=0.0, le=1.0)
    sampled_for_review: bool = False
    review_reason: str = ""


class BatchRecord(AuditProvenance):
    """One audited batch: its validated (recomputed) summary, provenance, usage and latency.

    ``batch_id`` is deterministic: a hash of the bundle version, engine, engine version,
    prompt version and the sorted log ids, so re-running the same batch replaces the row.
    """

    log_ids: list[str]
    summary: AuditSummary
    usage: EngineUsage
