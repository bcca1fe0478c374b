"""Human review contracts: a reviewer's verdict on one assessment (issue 10).

A ``VerdictInput`` is what a reviewer says (a form in the review app, or a row of an imported
file); a ``Verdict`` is the stored row: the input plus a snapshot of the assessment it
judged (the model's category, false-positive estimate and clause, engine and prompt
version, and the assessment's ``audited_at``, which tells a re-audit's assessment from the
one judged). Verdicts are append-only; a reviewer's newest verdict on an assessment counts.
"""

from __future__ import annotations

import hashlib
from datetime import date, datetime
from typing import Literal, get_args

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

MAX_NOTE_CHARS = 4000
"""The longest note (characters) a reviewer may write with a verdict: ``VerdictInput.note``,
the review app's verdict and retry forms and the clarification pages' verdict form."""

VerdictKind = Literal["agree", "disagree"]


class VerdictInput(BaseModel):
    """What a reviewer says about the current assessment of ``log_id``.

    ``agree`` takes no corrections. ``disagree`` needs ``corrected_category`` (a taxonomy
    code of the bundle) and ``corrected_false_positive``; ``corrected_clause`` is the clause
    that applies, or None for "no clause applies" (a policy gap); ``note`` is free text.
    Raises ``ValueError`` (pydantic ``ValidationError``) for an inconsistent combination.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    log_id: str = Field(min_length=1, max_length=256)
    reviewer: str = Field(min_length=1, max_length=128)
    verdict: VerdictKind
    corrected_category: str | None = Field(default=None, min_length=1, max_length=128)
    corrected_false_positive: bool | None = None
    corrected_clause: str | None = Field(default=None, min_length=1, max_length=128)
    note: str = Field(default="", max_length=MAX_NOTE_CHARS)

    @model_validator(mode="after")
    def _corrections_match_the_verdict(self) -> VerdictInput:
        corrections = (self.corrected_category, self.corrected_false_positive,
                       self.corrected_clause)  # fmt: skip
        if self.verdict == "agree" and any(c is not None for c in corrections):
            raise ValueError("an agree verdict takes no corrections")
        if self.verdict == "disagree" and (
            self.corrected_category is None or self.corrected_false_positive is None
        ):
            raise ValueError(
                "a disagree verdict needs corrected_category and corrected_false_positive"
            )
        return self


class Verdict(VerdictInput):
    """A stored verdict: the input, the assessment it judged, and when and how it came.

    ``verdict_id`` is deterministic (``verdict_id``), so the same verdict submitted or
    imported twice is one row. ``submitted_at`` orders a reviewer's revisions; ``source``
    is ``web`` or ``import:<file name>``.
    """

    verdict_id: str
    policy_bundle: str
    assessment_audited_at: AwareDatetime
    model: str
    product: str
    model_category: str
    model_false_positive: bool
    model_clause: str | None
    engine: str
    engine_model: str
    engine_version: str
    prompt_version: str
    bundle_version: str
    review_reason: str
    submitted_at: AwareDatetime
    source: str

    @property
    def human_category(self) -> str:
        """The category the reviewer holds right: the model's on agree, else the correction."""
        return self.model_category if self.corrected_category is None else self.corrected_category

    @property
    def human_false_positive(self) -> bool:
        """Whether the reviewer holds the refusal a false positive (over-refusal)."""
        if self.corrected_false_positive is None:
            return self.model_false_positive
        return self.corrected_false_positive


def verdict_id(item: VerdictInput, policy_bundle: str, assessment_audited_at: datetime) -> str:
    """BLAKE2b-128 hex of the judged assessment (bundle, log id, audit time), the reviewer and
    everything they said: equal verdicts on one assessment share an id."""
    parts = (
        policy_bundle,
        item.log_id,
        assessment_audited_at.isoformat(),
        item.reviewer,
        item.verdict,
        item.corrected_category or "",
        "" if item.corrected_false_positive is None else str(item.corrected_false_positive),
        item.corrected_clause or "",
        item.note,
    )
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        data = part.encode()
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


# why an item is in review, as the queues filter it (``processors.review_queue.reasons_of``)
ReviewReason = Literal[
    "estimated_false_positive", "policy_gap", "gray_zone", "low_confidence", "random_sample",
    "uncertainty",
]  # fmt: skip
REVIEW_REASONS: tuple[ReviewReason, ...] = (
    "estimated_false_positive", "policy_gap", "gray_zone", "low_confidence", "random_sample",
    "uncertainty",
)  # fmt: skip
Role = Literal["reviewer", "approver", "admin"]
ROLES: tuple[Role, ...] = get_args(Role)
"""The review-app roles, in order of what they add."""
_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$"


class ReviewQueue(BaseModel):
    """A saved filter over the review items: every ``None`` field means "any".

    ``name`` is the queue's key (letters, digits, ``.``, ``_``, ``@``, ``-``; 1-64 chars);
    ``category`` matches an assessment's category or its top-level code; ``since``/``until``
    bound the event time in UTC days (``until`` inclusive). Raises ``ValueError`` (pydantic
    ``ValidationError``) for a bad name or ``since`` after ``until``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME_PATTERN)
    description: str = Field(default="", max_length=500)
    policy_bundle: str | None = Field(default=None, min_length=1, max_length=128)
    model: str | None = Field(default=None, min_length=1, max_length=256)
    product: str | None = Field(default=None, min_length=1, max_length=256)
    category: str | None = Field(default=None, min_length=1, max_length=128)
    review_reason: ReviewReason | None = None
    since: date | None = None
    until: date | None = None

    @model_validator(mode="after")
    def _period_in_order(self) -> ReviewQueue:
        if self.since is not None and self.until is not None and self.since > self.until:
            raise ValueError("since is after until")
        return self


ALL_ITEMS = ReviewQueue(name="all", description="Every review item")


class ReviewerAccount(BaseModel):
    """A review app login: ``name``, ``role`` (``reviewer`` reviews; ``approver`` reviews
    and approves or rejects refusal-style calibration variants,
    ``processors.calibration.approval``; ``admin`` reviews, manages queues and sees
    everyone's progress, but does not approve variants), ``password_hash`` (argon2id, PHC
    string; empty for an account that only logs in through the trusted proxy header) and
    ``active``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME_PATTERN)
    role: Role
    password_hash: str = ""
    active: bool = True
    updated_at: AwareDatetime
