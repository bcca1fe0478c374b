"""The settings of auditing: policy bundles, the engine (local or an OpenAI-compatible server),
batching, intake limits, redaction and the refusal pre-filter: one group of
:class:`refusal_audit.config.Settings`, which composes every group (the field names are the
config keys; the environment variables are ``REFUSAL_AUDIT_`` plus the name in capitals;
docs/configuration.md lists them all).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from processors.redaction import ALL_REDACTION_KINDS, RedactionKind


class PolicyBundlePaths(BaseModel):
    """Where one policy bundle's three Markdown documents live (paths relative to the CWD)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allowed_use: Path
    product_safety: Path
    taxonomy: Path


EXAMPLE_POLICIES_DIR = Path(str(resources.files("refusal_audit") / "example_policies"))


def example_bundle_paths() -> PolicyBundlePaths:
    """The example policy bundle shipped inside the package (absolute paths).

    It resolves wherever the package is installed, from any working directory; it is the
    default ``policy_bundles`` entry ``default`` until a team configures its own.
    """
    return PolicyBundlePaths(
        allowed_use=EXAMPLE_POLICIES_DIR / "allowed_use_policy.md",
        product_safety=EXAMPLE_POLICIES_DIR / "product_safety_policy.md",
        taxonomy=EXAMPLE_POLICIES_DIR / "refusal_taxonomy.md",
    )


def _example_bundle() -> dict[str, PolicyBundlePaths]:
    return {"default": example_bundle_paths()}


class ModelPrice(BaseModel):
    """Prices of one model in USD per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    cached_input: float = Field(default=0.0, ge=0)
    output: float = Field(ge=0)


class AuditSettings(BaseModel):
    """Auditing: policy bundles, the engine (local or an OpenAI-compatible server),
    batching, intake limits, redaction and the refusal pre-filter: fields only (validated and
    read through :class:`refusal_audit.config.Settings`)."""

    # policies
    policy_bundles: dict[str, PolicyBundlePaths] = Field(
        default_factory=_example_bundle,
        description="Bundle name -> {allowed_use, product_safety, taxonomy} Markdown paths; "
        "default: the example bundle shipped in the package (refusal_audit/example_policies/).",
    )
    # engine
    engine: Literal["local", "openai"] | None = Field(
        default=None,
        description="Audit engine: `local` (offline, deterministic) or `openai` (any "
        "OpenAI-compatible server); unset: openai when an endpoint or key is set, else local.",
    )
    openai_base_url: str | None = Field(
        default=None, description="OpenAI-compatible API base URL (OpenAI, Azure, vLLM, Ollama)."
    )
    openai_api_key: SecretStr | None = Field(
        default=None, description="API key (else `openai_api_key_file`, else $OPENAI_API_KEY)."
    )
    openai_api_key_file: Path | None = Field(
        default=None, description="File holding the API key (e.g. a mounted secret)."
    )
    openai_model: str = Field(default="gpt-4o-mini", description="Model id of the LLM engine.")
    openai_timeout_seconds: float = Field(default=120.0, gt=0, description="Per-call timeout.")
    openai_max_retries: int = Field(
        default=5, ge=0, description="SDK retries for 429/5xx/timeouts (backoff, Retry-After)."
    )
    openai_response_format: Literal["auto", "json_schema", "json_object"] = Field(
        default="auto",
        description="Structured output mode: `auto` (json_schema; on llama.cpp the format "
        "measured best there), `json_schema`, or `json_object` for servers without json_schema.",
    )
    openai_max_concurrency: int = Field(default=4, ge=1, description="Max in-flight LLM calls.")
    openai_context_window: int | None = Field(
        default=None,
        ge=1024,
        description="Model context window (tokens); unset: asked from the server when the "
        "engine starts (llama.cpp /props, vLLM /v1/models), else 128000.",
    )
    openai_max_output_tokens: int = Field(
        default=8192,
        ge=256,
        description="Max completion tokens per call (each call asks for 512 + 256 per event, "
        "at most this).",
    )
    openai_batch_max_calls: int | None = Field(
        default=None,
        ge=1,
        description="LLM calls one audit batch may take (first call, retry, re-audit, splits); "
        "unset: 2 x events + 2. Then its remaining events are dead-lettered budget_exhausted.",
    )
    openai_batch_deadline_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Time one audit batch may take over all its LLM calls; then its "
        "remaining events are dead-lettered budget_exhausted.",
    )
    openai_request_deadline_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Time one clarification question set, judge verdict or calibration run "
        "may take over its LLM calls (first call and retry); then it escalates with the error.",
    )
    price_table: dict[str, ModelPrice] = Field(
        default_factory=dict,
        description="Model -> {input, cached_input, output} USD per 1M tokens, for `query cost`.",
    )
    local_false_positive_threshold: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Over-refusal score at or above which the local engine estimates a "
        "false positive.",
    )
    local_category_model: Literal["cues", "trained"] = Field(
        default="cues",
        description="Local engine's category: `cues` (hand-written rules) or `trained` (the "
        "shipped category model, `refusal-audit train`; its hash joins the engine version).",
    )
    local_category_model_path: Path | None = Field(
        default=None,
        description="With local_category_model = trained: the artifact to load, a path without "
        "suffix as `refusal-audit train` writes it (e.g. .refusal-audit/models/"
        "category_model); unset: the model shipped in the package.",
    )
    # batching
    batch_max_events: int = Field(default=25, ge=1, description="Max events per audit batch.")
    batch_token_budget: int = Field(
        default=6000,
        ge=64,
        description="Max o200k_base tokens of events per audit batch (LLM engines; the local "
        "engine's batches are bounded by batch_max_events alone).",
    )
    # input limits
    max_record_bytes: int = Field(
        default=262_144, ge=1024, description="Larger records are dead-lettered (oversized)."
    )
    max_text_chars: int = Field(
        default=32_000, ge=100, description="Longer request/response texts are dead-lettered."
    )
    dead_letter_max_raw_bytes: int = Field(
        default=1_048_576,
        ge=1024,
        le=8 * 1_048_576,
        description="A dead letter keeps a record's bytes whole up to this (at most 8 MiB: "
        "redacting them takes ~40x their size in memory); beyond, the first bytes plus the "
        "full length and SHA-256 (raw_truncated).",
    )
    # redaction and pre-filter
    redaction_enabled: bool = Field(
        default=True,
        description="Redact PII before anything is stored or sent to a model (the audit and "
        "the clarification service).",
    )
    redaction_kinds: tuple[RedactionKind, ...] = Field(
        default=ALL_REDACTION_KINDS,
        description="PII kinds to redact: email, phone, card, gov_id, ip, address.",
    )
    prefilter_enabled: bool = Field(
        default=True, description="Skip the audit of responses that are not refusals."
    )
    prefilter_model: Literal["cues", "trained"] = Field(
        default="cues",
        description="Refusal pre-filter: `cues` (hand-weighted cue scorer) or `trained` (the "
        "shipped logistic model, `refusal-audit train`; its hash joins the engine version).",
    )
    prefilter_request_aware: bool = Field(
        default=True,
        description="Read each response against its request in the pre-filter: an implicit "
        "refusal (clarification, lecture, negated restatement instead of an answer) counts as "
        "a refusal, a refusal followed by a delivered answer does not (docs/evaluation.md). "
        "Events without a request are unaffected. Off, the engine version gains "
        "`/prefilter=response-only` (another audit configuration).",
    )
    prefilter_model_path: Path | None = Field(
        default=None,
        description="With prefilter_model = trained: the artifact to load, a path without "
        "suffix as `refusal-audit train` writes it (e.g. .refusal-audit/models/"
        "refusal_prefilter); unset: the model shipped in the package.",
    )
    prefilter_cascade_band: tuple[float, float] = Field(
        default=(0.5, 0.5),
        description="The refusal cascade's uncertain band [low, high) of pre-filter scores "
        "that the encoder head re-decides, reading the response against the request; "
        "low = high (the default) turns the cascade off. Trade-off curve: docs/evaluation.md.",
    )
    prefilter_cascade_head_path: Path | None = Field(
        default=None,
        description="The cascade's encoder head artifact, a path without suffix; unset: "
        "the head shipped in the package (its encoder must be fetched: `refusal-audit "
        "encoders fetch`).",
    )

    @field_validator("prefilter_cascade_band")
    @classmethod
    def _band_in_unit_interval(cls, value: tuple[float, float]) -> tuple[float, float]:
        low, high = value
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"[{low}, {high}) must have 0 <= low <= high <= 1")
        return value
