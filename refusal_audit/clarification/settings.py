"""The settings of clarification after an ambiguous refusal: its service, engines, circumvention
check, store and review sampling: one group of :class:`refusal_audit.config.Settings`, which
composes every group (the field names are the config keys; the environment variables are
``REFUSAL_AUDIT_`` plus the name in capitals; docs/configuration.md lists them all).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr


class ClarificationSettings(BaseModel):
    """Clarification after an ambiguous refusal: its service, engines, circumvention check, store
    and review sampling: fields only (validated and read through
    :class:`refusal_audit.config.Settings`)."""

    # the clarification service (refusal-audit clarify serve)
    clarify_web_host: str = Field(
        default="127.0.0.1",
        description="Bind address of the clarification service (loopback unless behind a "
        "TLS-terminating proxy).",
    )
    clarify_web_port: int = Field(
        default=8091, ge=0, le=65535, description="Port of the clarification service."
    )
    clarify_api_token: SecretStr | None = Field(
        default=None,
        min_length=16,
        description="Shared API token callers send as `Authorization: Bearer <token>`; unset: "
        "a random token kept in <data_dir>/clarify-api.token (mode 0600).",
    )
    clarify_classifier_engine: Literal["local", "openai"] | None = Field(
        default=None,
        description="Engine that classifies refusals for clarification; unset: as `engine`.",
    )
    clarify_classifier_model: str | None = Field(
        default=None,
        description="Model of an openai classifier (may be cheaper); unset: `openai_model`.",
    )
    clarify_question_engine: Literal["local", "openai"] | None = Field(
        default=None,
        description="Engine that writes clarification questions; unset: as `engine`.",
    )
    clarify_question_model: str | None = Field(
        default=None, description="Model of an openai question engine; unset: `openai_model`."
    )
    clarify_circumvention_check: Literal["trained", "rules"] = Field(
        default="trained",
        description="Circumvention check of clarifying question sets: `trained` (the monotone "
        "model over rubric detectors: sign-constrained per-question scores pooled by "
        "noisy-OR, so a bad question cannot be diluted by good ones) or `rules` (the strict "
        "deterministic rules); figures in docs/clarification.md.",
    )
    clarify_circumvention_model_path: Path | None = Field(
        default=None,
        description="With clarify_circumvention_check = trained: the artifact to load, a path "
        "without suffix (e.g. .refusal-audit/models/circumvention_check); unset: the model "
        "shipped in the package.",
    )
    clarify_judge_engine: Literal["off", "openai"] = Field(
        default="off",
        description="Optional LLM judge after the deterministic circumvention check: `off` or "
        "`openai` (asked only about a set the rules passed; a rejected set, or a failed "
        "judge, is escalated, never surfaced).",
    )
    clarify_judge_model: str | None = Field(
        default=None,
        description="Model of the openai circumvention judge; unset: `clarify_question_model`, "
        "else `openai_model`.",
    )
    clarify_store: Literal["sqlite", "memory", "kafka"] | None = Field(
        default=None,
        description="Conversation state store: `sqlite` (a local file), `kafka` (the compacted "
        "topic `<prefix>clarify.state`; survives the loss of the machine) or `memory`; unset: "
        "`kafka` for `clarify serve --kafka`, else `sqlite`.",
    )
    clarify_consumer_group: str = Field(
        default="refusal-audit-clarify",
        min_length=1,
        description="Kafka consumer group of `clarify serve --kafka` (requests, answers, "
        "outcomes).",
    )
    clarify_audit_trail: bool = Field(
        default=True,
        description="Log every clarification step to the warehouse (`clarification_steps`).",
    )
    clarify_review_sample_rate: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="Share of finished clarification conversations sampled into the review "
        "app (escalations are always there).",
    )
    clarify_review_accepted_weight: float = Field(
        default=4.0,
        ge=1.0,
        le=100.0,
        description="How many times more likely a conversation whose clarified request was "
        "accepted is sampled than another (capped at 1).",
    )
    clarify_store_path: Path | None = Field(
        default=None,
        description="SQLite file of the conversation states; unset: <data_dir>/clarify.sqlite3.",
    )
    clarify_max_body_bytes: int = Field(
        default=256 * 1024,
        ge=1024,
        le=16 * 1024 * 1024,
        description="Largest HTTP request body the clarification service reads (413 beyond).",
    )
    clarify_max_clock_skew_seconds: int = Field(
        default=300,
        ge=0,
        le=86400,
        description="How far ahead of the clarification service's clock an answer's "
        "`answered_at` or an outcome's `decided_at` may be (clock skew); further is refused "
        "(422 `time_in_future`, a dead letter on Kafka).",
    )
