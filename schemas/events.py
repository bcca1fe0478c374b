"""The refusal event: one logged request and the model's (possible) refusal of it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal, NamedTuple

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints, field_validator

EVENT_SCHEMA_VERSION: Literal["1"] = "1"

EARLIEST_EVENT_TIME = datetime(1970, 1, 1, tzinfo=UTC)
"""Event times before this are refused: ClickHouse's ``Date`` (the day every trend query
groups by, ``toDate``) starts here, and an earlier time would wrap to another day."""
LATEST_EVENT_TIME = datetime(2149, 6, 6, tzinfo=UTC)
"""Event times at or after this are refused: the end of ClickHouse's ``Date`` range."""

NonEmptyId = Annotated[str, StringConstraints(min_length=1, max_length=256, strip_whitespace=True)]


class ClassifierSignal(BaseModel):
    """An upstream safety classifier's verdict on the exchange, when the platform logs one.

    ``flagged`` is the classifier's binary decision; ``score`` its probability-like score in
    [0, 1]; ``labels`` its harm labels. When ``is_refusal`` is set, the refusal pre-filter
    trusts it instead of reading the text.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    flagged: bool | None = None
    score: float | None = Field(default=None, ge=0.0, le=1.0)
    labels: list[str] = Field(default_factory=list)
    is_refusal: bool | None = Field(
        default=None, description="Upstream refusal detector's verdict on the response, if any."
    )


class RefusalEvent(BaseModel):
    """One logged model response to a user request, as platform teams send it.

    Wire format: a JSON object; ``event_time`` is RFC 3339 with an offset (``Z`` or ``+hh:mm``);
    naive timestamps are rejected. ``log_id`` must be unique per event: it is the
    idempotency key of the whole pipeline (storage deduplicates on it).

    ``event_time`` must fall in [``EARLIEST_EVENT_TIME``, ``LATEST_EVENT_TIME``), ClickHouse's
    day range (1970-01-01 to 2149-06-05 UTC).

    Raises ``pydantic.ValidationError`` on missing or mistyped fields, unknown top-level keys
    or an event time outside that range.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)

    schema_version: Literal["1"] = EVENT_SCHEMA_VERSION
    log_id: NonEmptyId = Field(description="Unique id of this logged exchange.")
    event_time: AwareDatetime = Field(
        description="When the model responded (RFC 3339), from 1970-01-01 to 2149-06-05 UTC."
    )
    request: str = Field(description="The user's request text (the last user turn).")
    response: str = Field(description="The model's response text, usually a refusal.")
    model: NonEmptyId = Field(description="Model id, e.g. 'gpt-4o-2024-08-06'.")
    product: str = Field(
        default="unknown",
        min_length=1,
        max_length=256,
        description="Product or surface that served the exchange.",
    )
    policy_bundle: str = Field(
        default="default",
        min_length=1,
        max_length=128,
        description="Name of the policy bundle to audit against.",
    )
    conversation_id: str | None = Field(default=None, max_length=256)
    classifier: ClassifierSignal | None = None
    attributes: dict[str, str] = Field(
        default_factory=dict, description="Free-form string attributes (labels, source, ...)."
    )

    @field_validator("event_time")
    @classmethod
    def _in_day_range(cls, value: datetime) -> datetime:
        if not EARLIEST_EVENT_TIME <= value < LATEST_EVENT_TIME:
            raise ValueError(
                f"event_time {value.isoformat()} is outside 1970-01-01 to 2149-06-05 UTC, "
                "the days the warehouse can count by"
            )
        return value


RefusalDisagreement = Literal[
    "none", "classifier_refusal_detector_not", "detector_refusal_classifier_not"
]
"""How the platform classifier's ``is_refusal`` verdict and our own detection differ on one
response: the classifier says refusal and our detection does not, the other way round, or
``"none"`` (they agree, or only one of them decided)."""


#: The two directions of a :data:`RefusalDisagreement` (every value but ``"none"``).
DISAGREEMENT_DIRECTIONS: tuple[RefusalDisagreement, ...] = (
    "classifier_refusal_detector_not",
    "detector_refusal_classifier_not",
)


def refusal_disagreement(classifier: bool, detected: bool) -> RefusalDisagreement:
    """The :data:`RefusalDisagreement` of a classifier verdict and our detection's verdict."""
    if classifier == detected:
        return "none"
    return "classifier_refusal_detector_not" if classifier else "detector_refusal_classifier_not"


class StoredEvent(BaseModel):
    """A refusal event as the warehouse keeps it: redacted, with the pre-filter's decision.

    ``event`` holds the *redacted* texts. ``redactions`` counts placeholders per PII kind.
    ``is_refusal`` / ``refusal_kind`` (``full``, ``partial`` or ``none``) / ``refusal_score``
    (in [0, 1]) / ``refusal_cues`` come from the refusal pre-filter; non-refusals are stored
    too, they are only not audited. ``source`` is the file path or topic it came from.
    ``content_fingerprint`` identifies the event's content as it arrived (BLAKE2b-128 hex of
    the decoded event before redaction, ``processors.intake.content_fingerprint``): a later
    copy of the ``log_id`` with another fingerprint is a different event under a used id
    (dead-lettered ``duplicate_log_id``; the first stored copy wins), one with the same
    fingerprint a harmless redelivery. Empty for rows stored before it existed.

    ``detected_is_refusal`` / ``detected_refusal_score`` are what our own refusal detection
    (the text pre-filter, or its trained model) decided on the response, whoever decided
    ``is_refusal``: for an event carrying the platform classifier's ``is_refusal`` verdict
    the verdict is authoritative and these keep our detection beside it; otherwise they equal
    ``is_refusal`` / ``refusal_score``. None when nothing was detected (the pre-filter was
    off) and for rows stored before they existed. ``refusal_disagreement`` compares the
    classifier's verdict with ours (:data:`RefusalDisagreement`; ``"none"`` when they agree
    or either is missing).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    event: RefusalEvent
    redactions: dict[str, int] = Field(default_factory=dict)
    is_refusal: bool
    refusal_kind: Literal["full", "partial", "none"]
    refusal_score: float = Field(ge=0.0, le=1.0)
    refusal_cues: list[str] = Field(default_factory=list)
    source: str
    ingested_at: AwareDatetime
    content_fingerprint: str = Field(default="", max_length=64)
    detected_is_refusal: bool | None = None
    detected_refusal_score: float | None = Field(default=None, ge=0.0, le=1.0)
    refusal_disagreement: RefusalDisagreement = "none"


class StoredIdentity(NamedTuple):
    """What the warehouse holds of one stored event, for the duplicate-log-id rule.

    ``content_fingerprint`` of its first stored copy ("" for rows stored before
    fingerprints existed: any copy then counts as identical), whether its current row is a
    refusal (``is_refusal``), and ``audited_by``, the audit configuration of its newest
    assessment under its bundle (``audit_config_key``; "" when it has none).
    """

    content_fingerprint: str
    is_refusal: bool
    audited_by: str = ""


def audit_config_key(
    policy_bundle: str,
    bundle_version: str,
    engine: str,
    engine_model: str,
    engine_version: str,
    prompt_version: str,
) -> str:
    """What decides an assessment: bundle and its version, engine, model, engine and prompt
    versions, joined with ``|`` (the warehouse builds the same string in SQL)."""
    return "|".join(
        (policy_bundle, bundle_version, engine, engine_model, engine_version, prompt_version)
    )
