"""Configuration: one frozen pydantic-settings model.

Sources, highest precedence first: keyword arguments, environment variables prefixed
``REFUSAL_AUDIT_`` (nested values as JSON, e.g. ``REFUSAL_AUDIT_POLICY_BUNDLES``), the TOML
config file (``--config FILE``, else ``$REFUSAL_AUDIT_CONFIG``, else ``./refusal-audit.toml``
when it exists), then the defaults below. Secrets are ``SecretStr`` and never printed.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from contextvars import ContextVar
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from processors.redaction import ALL_REDACTION_KINDS, RedactionKind

DEFAULT_CONFIG_FILE = Path("refusal-audit.toml")
_config_file: ContextVar[Path | None] = ContextVar("refusal_audit_config_file", default=None)


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


def _header_safe(key: str, where: str) -> str:
    """``key`` when an HTTP Authorization header can carry it (printable ASCII, no whitespace
    inside); else ``ConfigError`` naming ``where`` only."""
    if any(not c.isascii() or not c.isprintable() or c.isspace() for c in key.strip()):
        raise ConfigError(
            f"the API key in {where} has non-ASCII, whitespace or control characters inside "
            "(an HTTP header carries printable ASCII only): check it was not pasted with a "
            "typographic dash or quote"
        )
    return key


class Settings(BaseSettings):
    """All settings of refusal-audit. See docs/configuration.md (generated from this class)."""

    model_config = SettingsConfigDict(
        env_prefix="REFUSAL_AUDIT_", frozen=True, extra="forbid", env_nested_delimiter=None
    )

    # storage
    data_dir: Path = Field(
        default=Path(".refusal-audit"), description="Local state directory (embedded warehouse)."
    )
    warehouse_dsn: str | None = Field(
        default=None,
        description="chdb:///abs/path (embedded) or http(s)://user@host:8123 (server); "
        "unset means chdb://<data_dir>/chdb.",
    )
    warehouse_database: str = Field(
        default="refusal_audit", description="ClickHouse database holding the tables."
    )
    warehouse_password: SecretStr | None = Field(
        default=None, description="Password for an http(s) warehouse, if not in the DSN."
    )
    warehouse_insert_retries: int = Field(
        default=5, ge=0, description="Attempts per insert on transient errors (backoff)."
    )

    # kafka (the streaming worker and its tools)
    kafka_bootstrap_servers: str = Field(
        default="127.0.0.1:9092", description="Kafka bootstrap servers for the streaming side."
    )
    kafka_topic_prefix: str = Field(
        default="refusal-audit.", description="Prefix of every topic name."
    )
    kafka_consumer_group: str = Field(
        default="refusal-audit-worker", description="Consumer group (faust app id) of the worker."
    )
    kafka_topic_partitions: int = Field(
        default=3, ge=1, description="Partitions of the topics `topics create` makes."
    )
    kafka_replication_factor: int = Field(
        default=1, ge=1, description="Replication factor of the topics `topics create` makes."
    )
    kafka_static_membership: bool = Field(
        default=True,
        description="Join the consumer group as a static member (KIP-345): a restarted "
        "worker takes its partitions back at once.",
    )
    kafka_group_instance_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=249,
        description="The worker's group.instance.id; unset: <host name>-<hash of data_dir>. "
        "Unique per live worker.",
    )
    kafka_session_timeout_seconds: float = Field(
        default=45.0,
        ge=6.0,
        le=300.0,
        description="Consumer session timeout: how long a worker that died without leaving "
        "keeps its partitions when no process with its instance id comes back.",
    )

    # worker
    worker_take_max: int = Field(
        default=1000, ge=1, description="Max events the worker takes from the stream per window."
    )
    worker_take_within_seconds: float = Field(
        default=2.0,
        gt=0.0,
        description="Tumbling time bound of a window: a partly filled "
        "window is audited after this many seconds.",
    )
    worker_windows_in_flight: int = Field(
        default=2,
        ge=1,
        le=16,
        description="Windows a transactional worker (--outputs topics) has in hand at once: "
        "it reads and audits the next ones while the oldest is committed (in order).",
    )
    worker_recovery_seconds: float = Field(
        default=600.0,
        ge=10.0,
        description="How long a transactional worker keeps retrying to recover its producer "
        "and rewind its consumer (after a broker restart) before it exits 70.",
    )
    worker_web_host: str = Field(
        default="127.0.0.1", description="Bind address of the worker's /metrics and /health."
    )
    worker_web_port: int = Field(
        default=6066, ge=0, le=65535, description="Port of the worker's /metrics and /health."
    )

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

    # sentence encoders (refusal-audit encoders; docs/encoders.md)
    encoder_dir: Path | None = Field(
        default=None,
        description="Private cache of the fetched sentence encoders (ONNX model, tokenizer, "
        "manifest; dirs 0700, files 0600); unset: <data_dir>/encoders.",
    )
    encoder_repository_url: str = Field(
        default="https://repo1.maven.org/maven2/",
        pattern=r"^https?://",
        description="Maven repository (Central or a mirror) `encoders fetch` downloads the "
        "pinned jars from; only fetching uses it, never loading.",
    )
    encoder_fetch_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Connect/read timeout of one encoder jar download attempt (4 attempts "
        "on transient errors).",
    )
    encoder_threads: int = Field(
        default=1,
        ge=1,
        le=64,
        description="onnxruntime intra-op threads of one loaded encoder.",
    )

    # batching
    batch_max_events: int = Field(default=25, ge=1, description="Max events per audit batch.")
    batch_token_budget: int = Field(
        default=6000, ge=64, description="Max o200k_base tokens of events per audit batch."
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

    # human review sampling
    review_sample_rate: float = Field(
        default=0.2,
        ge=0.0,
        le=1.0,
        description="Share of unflagged assessments sampled for review.",
    )
    review_uncertainty_band: float = Field(
        default=0.0,
        ge=0.0,
        le=0.5,
        description="Also send to review (reason `uncertainty`) the unflagged assessments the "
        "random sample did not draw whose engine over-refusal score lies within this distance "
        "of the engine's threshold; 0 is off. Never part of the random sample that estimates "
        "the verified false-positive rate (see docs/review.md).",
    )
    review_seed: int = Field(default=0, description="Seed of the review sampling.")
    review_reviews_per_item: int = Field(
        default=1, ge=1, le=10, description="Reviewers' verdicts each review item needs."
    )

    # the review web app (refusal-audit review serve)
    review_web_host: str = Field(
        default="127.0.0.1",
        description="Bind address of the review web app (loopback unless you put it behind "
        "a TLS-terminating proxy).",
    )
    review_web_port: int = Field(
        default=8090, ge=0, le=65535, description="Port of the review web app."
    )
    review_lease_seconds: int = Field(
        default=300,
        ge=30,
        le=86400,
        description="How long a reviewer holds a claimed item before it returns to the queue.",
    )
    review_session_secret: SecretStr | None = Field(
        default=None,
        description="Key signing the review app's session cookie and CSRF tokens; unset: a random "
        "key kept in <data_dir>/review-session.key (mode 0600).",
    )
    review_session_max_age_seconds: int = Field(
        default=12 * 3600, ge=300, le=30 * 86400, description="Lifetime of a review login."
    )
    review_cookie_secure: bool = Field(
        default=False,
        description="Mark the review app's cookies Secure (set it when served over HTTPS).",
    )
    review_login_attempts_per_minute: int = Field(
        default=5,
        ge=1,
        le=1000,
        description="Wrong passwords in a row allowed per account name and client address "
        "together before each further attempt from that address waits 60 s, doubling per "
        "further failure (at most 1 h); four times this many attempts per client address in "
        "a moving minute. More are refused with 429.",
    )
    review_proxy_user_header: str | None = Field(
        default=None,
        description="Header naming the reviewer, set by an authenticating reverse proxy "
        "(e.g. X-Forwarded-User); trusted only from review_trusted_proxies. Unset: log in "
        "with a password.",
    )
    review_trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses of the reverse proxies whose forwarding headers are believed: "
        "X-Forwarded-For (the client address for the login limit), X-Forwarded-Host (the "
        "origin check) and review_proxy_user_header. Empty (default): none, the connection's "
        "peer is the client.",
    )

    # the HTTP servers (refusal-audit review serve, clarify serve)
    http_header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="Seconds a client has to send a request's line and headers (from the "
        "connection's start or the previous response); then the connection is closed.",
    )
    http_body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Seconds a client has to send a request's body after its headers; then "
        "the connection is closed.",
    )
    http_keep_alive_seconds: int = Field(
        default=5, ge=1, le=600, description="Seconds an idle keep-alive connection is kept."
    )
    http_max_connections: int = Field(
        default=1000,
        ge=1,
        le=1_000_000,
        description="Open connections a server accepts in all (at most half the process's "
        "open-file limit); more are answered 503 and closed.",
    )
    http_max_connections_per_client: int = Field(
        default=100,
        ge=1,
        le=1_000_000,
        description="Open connections a server accepts from one peer address (behind a "
        "reverse proxy every connection comes from the proxy: raise it to the proxy's pool); "
        "more are answered 503 and closed.",
    )

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

    # drift detectors and policy-gap alerts
    alerts_window_seconds: int = Field(
        default=3600,
        ge=60,
        le=31 * 86400,
        description="Tumbling event-time window of the drift detectors (60 s to 31 days).",
    )
    alerts_grace_seconds: int = Field(
        default=300,
        ge=0,
        le=366 * 86400,
        description="Late events arriving within this after a window ends still count in it.",
    )
    alerts_baseline_windows: int = Field(
        default=24, ge=1, le=10_000, description="Trailing windows pooled as the baseline."
    )
    alerts_baseline_start: datetime | None = Field(
        default=None, description="Pinned reference period start (UTC); needs the end too."
    )
    alerts_baseline_end: datetime | None = Field(
        default=None, description="Pinned reference period end (UTC, exclusive)."
    )
    report_max_interval_width: float = Field(
        default=0.2,
        gt=0,
        le=1,
        description="`refusal-audit report` notes a rate whose Wilson 95% interval is wider "
        "than this (0.2 = 20 percentage points) as resting on too few events.",
    )
    alerts_min_events: int = Field(
        default=300, ge=1, description="Refusals a window and its baseline need before testing."
    )
    alerts_fdr: float = Field(
        default=0.05, gt=0, lt=1, description="Benjamini-Hochberg false-discovery rate."
    )
    alerts_js_threshold: float = Field(
        default=0.1, ge=0, le=1, description="Min Jensen-Shannon distance of a category-mix alert."
    )
    alerts_rate_shift_pp: float = Field(
        default=5.0, ge=0, le=100, description="Min rate change (percentage points) to alert."
    )
    alerts_volume_ratio: float = Field(
        default=1.5, ge=1, description="Min refusal-volume ratio (or its inverse) to alert."
    )
    alerts_new_category_min: int = Field(
        default=20, ge=1, description="Refusals a category absent from the baseline needs."
    )
    alerts_lookback_windows: int = Field(
        default=3, ge=1, le=1000, description="Closed windows re-evaluated at each detector run."
    )
    alerts_interval_seconds: float = Field(
        default=60.0, gt=0, description="How often the worker runs the detectors."
    )
    gaps_similarity: float = Field(
        default=0.3, gt=0, le=1, description="Cosine similarity for two gap flags to be one gap."
    )
    gaps_cooldown_seconds: int = Field(
        default=86400, ge=1, description="A growing policy gap re-alerts at most once per this."
    )
    gaps_reread_margin_seconds: int = Field(
        default=3600, ge=0, description="Batches re-read before the newest gap sighting."
    )

    # refusal-style calibration (refusal-audit calibrate, docs/calibration.md)
    calibration_token: SecretStr | None = Field(
        default=None,
        description="API token of a review-app account (`review token create`) with which "
        "`calibrate run` verifies its starter without a password (CI, scripts); unset: "
        "`--token-file`, else the account's password.",
    )
    calibrate_engine: Literal["local", "openai"] | None = Field(
        default=None,
        description="Engine that writes refusal variants; unset: as `engine`.",
    )
    calibrate_model: str | None = Field(
        default=None, description="Model of an openai variant engine; unset: `openai_model`."
    )
    calibrate_suite_command: list[str] | None = Field(
        default=None,
        description="A team's own regression suite: a command (argv list, no shell) that reads "
        'one variant as JSON on stdin and prints its verdict, `{"verdict": "pass"}` or '
        '`{"verdict": "fail", "reasons": [...]}`; '
        "unset: none.",
    )
    calibrate_suite_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="Time a suite command gets per variant; a timeout fails the variant.",
    )
    calibrate_suite_url: str | None = Field(
        default=None,
        pattern=r"^https?://\S+$",
        description="A team's own regression suite as an HTTP endpoint: each variant is POSTed "
        "as the same JSON a suite command reads and the answer is the same verdict JSON; "
        "unset: none. Not together with `calibrate_suite_command`.",
    )
    calibrate_suite_token: SecretStr | None = Field(
        default=None,
        description="Bearer token sent to `calibrate_suite_url` (Authorization header).",
    )

    @field_validator("prefilter_cascade_band")
    @classmethod
    def _band_in_unit_interval(cls, value: tuple[float, float]) -> tuple[float, float]:
        low, high = value
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"[{low}, {high}) must have 0 <= low <= high <= 1")
        return value

    @field_validator("data_dir", mode="before")
    @classmethod
    def _data_dir_named(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            raise ValueError("data_dir must not be empty (use . for the current directory)")
        return value

    @model_validator(mode="after")
    def _one_suite(self) -> Settings:
        if self.calibrate_suite_command and self.calibrate_suite_url:
            raise ValueError("set calibrate_suite_command or calibrate_suite_url, not both")
        return self

    @model_validator(mode="after")
    def _pinned_baseline(self) -> Settings:
        start, end = self.alerts_baseline_start, self.alerts_baseline_end
        if (start is None) != (end is None):
            raise ValueError("alerts_baseline_start and alerts_baseline_end go together")
        if start is not None and end is not None:
            if start.tzinfo is None or end.tzinfo is None:
                raise ValueError("alerts_baseline_start/end need a UTC offset, e.g. ...Z")
            if end <= start:
                raise ValueError("alerts_baseline_end must be after alerts_baseline_start")
        return self

    @property
    def resolved_warehouse_dsn(self) -> str:
        """The warehouse DSN, defaulting to an embedded chDB store under ``data_dir``."""
        if self.warehouse_dsn:
            return self.warehouse_dsn
        return f"chdb://{(self.data_dir / 'chdb').resolve()}"

    @property
    def resolved_encoder_dir(self) -> Path:
        """The sentence-encoder cache: ``encoder_dir``, else ``<data_dir>/encoders``."""
        return self.encoder_dir if self.encoder_dir is not None else self.data_dir / "encoders"

    @property
    def resolved_engine(self) -> Literal["local", "openai"]:
        """The engine to use: the setting, else openai when an endpoint or key is set."""
        if self.engine is not None:
            return self.engine
        configured = self.openai_base_url or self.openai_api_key or self.openai_api_key_file
        return "openai" if configured else "local"

    def openai_key(self) -> str | None:
        """The API key: the setting, else the key file's first line, else $OPENAI_API_KEY.

        Raises ``ConfigError`` when the key file cannot be read, or a key has characters an
        HTTP header cannot carry (non-ASCII, whitespace or control characters inside): the
        message names where the key came from, never the key or the character's position.
        """
        if self.openai_api_key is not None:
            return _header_safe(self.openai_api_key.get_secret_value(), "openai_api_key")
        if self.openai_api_key_file is not None:
            try:
                text = self.openai_api_key_file.read_text(encoding="utf-8").strip()
            except UnicodeDecodeError:
                raise ConfigError("openai_api_key_file is not UTF-8 text") from None
            except OSError as exc:
                raise ConfigError(f"cannot read openai_api_key_file: {exc}") from exc
            return _header_safe(text, "openai_api_key_file")
        key = os.environ.get("OPENAI_API_KEY")
        return None if key is None else _header_safe(key, "$OPENAI_API_KEY")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = _config_file.get()
        if path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return (*sources, file_secret_settings)


class ConfigError(ValueError):
    """Raised for a missing or invalid configuration file or setting."""


def load_settings(config_file: Path | None = None, **overrides: object) -> Settings:
    """Load settings from ``config_file`` (or the env/default file), the environment and overrides.

    Raises ``ConfigError`` when an explicitly named config file does not exist or a value is
    invalid.
    """
    from pydantic import ValidationError

    path = config_file
    if path is None and os.environ.get("REFUSAL_AUDIT_CONFIG"):
        path = Path(os.environ["REFUSAL_AUDIT_CONFIG"])
        if not path.is_file():
            raise ConfigError(f"REFUSAL_AUDIT_CONFIG names a missing file: {path}")
    elif path is None and DEFAULT_CONFIG_FILE.is_file():
        path = DEFAULT_CONFIG_FILE
    elif path is not None and not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    token = _config_file.set(path)
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigError(describe_invalid(exc)) from exc
    except SettingsError as exc:  # a value that is not valid JSON for a list/map setting
        raise ConfigError(describe_unparsable(exc)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    finally:
        _config_file.reset(token)


def _setting_names(field: str) -> str:
    """``field`` as a user writes it: the config key and its environment variable."""
    return f"{field} (REFUSAL_AUDIT_{field.upper()})"


def _example(field: str) -> str:
    """The field's default written as JSON (what a list or map setting looks like)."""
    info = Settings.model_fields.get(field)
    if info is None:
        return ""
    default = info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]
    try:
        return f", e.g. '{json.dumps(default)}'" if isinstance(default, (list, tuple, dict)) else ""
    except TypeError:
        return ""


def describe_invalid(exc: Exception) -> str:
    """A pydantic ``ValidationError`` of ``Settings`` as one line per bad setting: the config
    key and environment variable, what is wrong, and the value given (no documentation
    links, no traceback)."""
    errors: list[dict[str, Any]] = list(getattr(exc, "errors", list)())
    if not errors:
        return f"invalid configuration: {exc}"
    lines = []
    for e in errors:
        loc = [str(part) for part in e.get("loc", ())]
        field = loc[0] if loc else "?"
        where = ".".join(loc[1:])
        given = e.get("input")
        shown = "" if isinstance(given, dict) else f" (given: {given!r})"
        message = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        item = f" item {where}" if where else ""
        lines.append(f"{_setting_names(field)}{item}: {message}{shown}{_example(field)}")
    return "invalid configuration: " + "; ".join(lines)


_UNPARSABLE = re.compile(r'field "(?P<field>\w+)" from source "(?P<source>\w+)"')


def describe_unparsable(exc: Exception) -> str:
    """A pydantic-settings ``SettingsError`` (a list or map setting whose environment value
    is not JSON) as one line naming the setting, its environment value and the JSON form
    it needs."""
    m = _UNPARSABLE.search(str(exc))
    if m is None:
        return f"invalid configuration: {exc} (lists and maps are JSON)"
    field = m.group("field")
    given = os.environ.get(f"REFUSAL_AUDIT_{field.upper()}")
    shown = f" (given: {given!r})" if given is not None else ""
    return (
        f"invalid configuration: {_setting_names(field)} is not valid JSON{shown}: lists "
        f"and maps are written in JSON{_example(field)}"
    )


def settings_reference() -> str:
    """The table of docs/configuration.md (Markdown rows), generated from ``Settings``."""
    rows = [
        "| setting | environment variable | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for name, field in Settings.model_fields.items():
        if name == "policy_bundles":
            default = "example bundle"
        elif field.default_factory is not None:
            default = str(field.default_factory())  # type: ignore[call-arg]
        elif field.default is None:
            default = "unset"
        elif isinstance(field.default, tuple) and all(isinstance(v, str) for v in field.default):
            default = ",".join(field.default)
        elif isinstance(field.default, tuple):
            default = str(list(field.default))  # a JSON list, as the environment takes it
        else:
            default = str(field.default)
        rows.append(
            f"| `{name}` | `REFUSAL_AUDIT_{name.upper()}` | `{default}` | {field.description} |"
        )
    return "\n".join(rows)
