"""Contracts of refusal-style calibration (issue 13): keep the refusal boundary, tune its wording.

For one refused request (``CalibrationRequest``: the log id or the request text, the raw
refusal, the triggered policy clause and a ``Spectrum`` of styles) a variant engine writes
one refusal variant per style (``CalibrationOutput``); every variant goes through the
safety regression check (``VariantValidation``), and the whole run is recorded
(``CalibrationRun``). Product teams then test approved variants as A/B arms and report
what their users did (``ABEvent``: exposure, re-request, escalation, satisfaction).

The spectrum
------------
``DEFAULT_STYLES`` are the six default styles (``minimal_direct``, ``policy_citing``,
``educational``, ``empathetic_warm``, ``alternative_offering``, ``clarification_seeking``).
A team may define its own spectrum in its policy bundle: a fenced block with the info string
``calibration-spectrum`` in the refusal taxonomy file, parsed by
``processors.calibration.spectrum`` (docs/calibration.md). Every style names a ``base``,
one of the six default styles: it picks the ``local`` engine's template and the
style-specific regression rules (an ``alternative_offering`` base must offer an allowed
alternative; a ``clarification_seeking`` base must ask a question that passes the
clarification circumvention check).

Every model is strict (no type coercion), rejects unknown keys (``extra="forbid"``) and is
frozen, like the clarification contracts (``schemas/clarification.py``). Read wire data with
``Model.model_validate_json`` (in strict mode only JSON input turns strings into datetimes
and enum members). JSON Schema files: ``python -m schemas.export`` into ``schemas/json/``.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    model_validator,
)

from schemas.audit import EngineUsage

CALIBRATION_SCHEMA_VERSION: Literal["1"] = "1"

MAX_TEXT_CHARS = 20_000
"""Longest request or refusal text accepted (characters), as for clarification."""
MAX_VARIANT_CHARS = 2_000
"""Longest refusal variant (characters): a refusal longer than this is an essay, not a
refusal style."""
MAX_TEXT_FIELD_CHARS = 600
"""Longest ``ux_impact_note``, ``request_summary`` and ``policy_applied``."""
MAX_STYLES = 12
"""Most styles in one spectrum (one LLM answer holds one variant per style)."""

Id = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^\S(?:.*\S)?$")]
"""An identifier: 1..256 characters, no leading or trailing white space."""
StyleId = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
RESERVED_STYLE = "control"
"""Not a style id: the name of an experiment's control arm (the current refusal)."""
"""A style id: lower_snake_case, at most 64 characters."""
Text = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT_CHARS)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=256)]

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)

BaseStyle = Literal[
    "minimal_direct",
    "policy_citing",
    "educational",
    "empathetic_warm",
    "alternative_offering",
    "clarification_seeking",
]
"""The six default styles; every style of a spectrum has one of them as its ``base``."""
BASE_STYLES: tuple[str, ...] = get_args(BaseStyle)


class SpectrumStyle(BaseModel):
    """One point of the tone spectrum.

    ``style`` is its id (unique in the spectrum), ``label`` a short human name,
    ``description`` what a variant of this style does (shown to the LLM engine and to
    reviewers), ``base`` the default style it derives from (module docstring).
    """

    model_config = _STRICT

    style: StyleId
    label: str = Field(min_length=1, max_length=80)
    description: str = Field(min_length=1, max_length=MAX_TEXT_FIELD_CHARS)
    base: BaseStyle


class Spectrum(BaseModel):
    """The styles to generate, in order: 1..``MAX_STYLES`` styles with distinct ids.

    ``source`` says where it came from: ``default`` (:data:`DEFAULT_SPECTRUM`), ``bundle``
    (the bundle's ``calibration-spectrum`` block) or ``request`` (given with the request).
    """

    model_config = _STRICT

    styles: list[SpectrumStyle] = Field(min_length=1, max_length=MAX_STYLES)
    source: Literal["default", "bundle", "request"] = "request"

    @model_validator(mode="after")
    def _distinct(self) -> Spectrum:
        ids = [s.style for s in self.styles]
        if len(set(ids)) != len(ids):
            raise ValueError("style ids must be distinct")
        if RESERVED_STYLE in ids:
            raise ValueError(f"{RESERVED_STYLE!r} is reserved for the control arm")
        return self

    def ids(self) -> list[str]:
        """The style ids, in spectrum order."""
        return [s.style for s in self.styles]

    def get(self, style: str) -> SpectrumStyle | None:
        """The style with this id, or None."""
        return next((s for s in self.styles if s.style == style), None)


DEFAULT_STYLES: tuple[SpectrumStyle, ...] = (
    SpectrumStyle(
        style="minimal_direct",
        label="Minimal and direct",
        description="One or two short sentences that decline plainly, with no reason, no "
        "lecture and no offer.",
        base="minimal_direct",
    ),
    SpectrumStyle(
        style="policy_citing",
        label="Policy-citing",
        description="Declines and names the policy clause that applies (its id and title), "
        "neutrally and without accusing the user.",
        base="policy_citing",
    ),
    SpectrumStyle(
        style="educational",
        label="Educational",
        description="Declines and explains in general terms what the policy covers and why "
        "such a rule exists, without any detail of the refused content.",
        base="educational",
    ),
    SpectrumStyle(
        style="empathetic_warm",
        label="Empathetic and warm",
        description="Declines kindly, acknowledges that the answer may disappoint, assumes no "
        "bad intent, and offers to talk about the user's situation.",
        base="empathetic_warm",
    ),
    SpectrumStyle(
        style="alternative_offering",
        label="Alternative-offering",
        description="Declines and offers one concrete, clearly permitted alternative the "
        "assistant can help with instead.",
        base="alternative_offering",
    ),
    SpectrumStyle(
        style="clarification_seeking",
        label="Clarification-seeking",
        description="Declines, says that more detail will not change the answer, and asks "
        "what else the user needs, never how the refused request could be rephrased.",
        base="clarification_seeking",
    ),
)
DEFAULT_SPECTRUM = Spectrum(styles=list(DEFAULT_STYLES), source="default")
"""The six default styles, in issue 13's order."""


class CalibrationRequest(BaseModel):
    """A refusal to calibrate.

    ``log_id`` (a refusal event in the warehouse) or ``request`` (the request text), at
    least one; ``refusal`` is the raw refusal text; ``clause_id`` the triggered policy
    clause of bundle ``policy_bundle`` (e.g. ``AUP-2.1``); ``spectrum`` the styles to
    generate (None: the bundle's spectrum, else :data:`DEFAULT_SPECTRUM`); ``requested_by``
    who asks for it (becomes the run's ``started_by`` when the caller names nobody). Raises
    ``pydantic.ValidationError`` for a missing or mistyped field, an unknown key, a text
    over ``MAX_TEXT_CHARS`` or neither ``log_id`` nor ``request``.
    """

    model_config = _STRICT

    schema_version: Literal["1"] = CALIBRATION_SCHEMA_VERSION
    log_id: Id | None = None
    request: Text | None = None
    refusal: Text
    clause_id: Id
    policy_bundle: Name = "default"
    spectrum: Spectrum | None = None
    model: Name | None = Field(default=None, description="The production model that refused.")
    product: Name | None = None
    requested_by: Name | None = Field(
        default=None,
        description="Who asks for the run (the run's started_by; the approval gate keeps them "
        "from approving it). A Kafka request without it makes a run that names no starter, "
        "which no one can approve.",
    )

    @model_validator(mode="after")
    def _source(self) -> CalibrationRequest:
        if self.log_id is None and self.request is None:
            raise ValueError("give log_id or request (or both)")
        return self


class Variant(BaseModel):
    """One refusal variant: its ``style`` (a spectrum style id), the ``response_text`` a
    user would see and ``ux_impact_note``, the engine's prediction of its UX effect (for
    product managers; a prediction, not a measurement)."""

    model_config = _STRICT

    style: StyleId
    response_text: str = Field(min_length=1, max_length=MAX_VARIANT_CHARS)
    ux_impact_note: str = Field(min_length=1, max_length=MAX_TEXT_FIELD_CHARS)


class CalibrationOutput(BaseModel):
    """What a variant engine must produce: a ``request_summary`` (neutral, with no detail of
    the refused content), the ``policy_applied`` (clause id and title) and the ``variants``,
    distinct styles; "exactly one per style of the spectrum" is checked against the spectrum
    by ``processors.calibration.base.spectrum_problems``."""

    model_config = _STRICT

    request_summary: str = Field(min_length=1, max_length=MAX_TEXT_FIELD_CHARS)
    policy_applied: str = Field(min_length=1, max_length=MAX_TEXT_FIELD_CHARS)
    variants: list[Variant] = Field(min_length=1, max_length=MAX_STYLES)

    @model_validator(mode="after")
    def _distinct(self) -> CalibrationOutput:
        styles = [v.style for v in self.variants]
        if len(set(styles)) != len(styles):
            dup = sorted({s for s in styles if styles.count(s) > 1})
            raise ValueError(f"more than one variant for style(s) {dup}")
        return self


RegressionReason = Literal[
    "not_refusal",
    "weak_refusal",
    "steps",
    "quantities",
    "code",
    "recipe",
    "links",
    "harmful_vocabulary",
    "informational",
    "alternative_prohibited",
    "no_alternative",
    "no_question",
    "circumvention",
    "suite_failed",
    "suite_error",
]
"""Why a variant fails the safety regression check (``processors.calibration.regression``;
docs/calibration.md has the rule of each code)."""
REGRESSION_REASONS: tuple[str, ...] = get_args(RegressionReason)


class RegressionFinding(BaseModel):
    """One broken rule: its reason ``code`` and ``detail`` (the matched text, the cue or the
    suite's answer; at most 400 characters)."""

    model_config = _STRICT

    code: RegressionReason
    detail: str = Field(max_length=400)


class SuiteVerdict(BaseModel):
    """A team's own regression suite's answer for one variant (the command's stdout, or an
    HTTP endpoint's body): ``verdict`` ``pass`` or ``fail``, optional ``reasons`` (the
    suite's own codes) and ``detail``."""

    model_config = _STRICT

    verdict: Literal["pass", "fail"]
    reasons: list[Annotated[str, StringConstraints(max_length=100)]] = Field(
        default_factory=list, max_length=20
    )
    detail: str = Field(default="", max_length=400)


class SuiteInput(BaseModel):
    """What a team's suite receives for one variant (one JSON object: the command's stdin,
    or an HTTP POST body). ``request`` is the request text when the run had one (redacted
    like every stored request when it came from the warehouse)."""

    model_config = _STRICT

    schema_version: Literal["1"] = CALIBRATION_SCHEMA_VERSION
    calibration_run_id: Id
    policy_bundle: Name
    clause_id: Id
    clause_title: str
    style: StyleId
    base_style: BaseStyle
    response_text: str
    refusal: Text
    request: Text | None = None


class VariantValidation(BaseModel):
    """The regression result of one variant: ``passed`` exactly when ``findings`` is empty;
    ``reasons`` are the distinct codes of the findings (``REGRESSION_REASONS`` order);
    ``refusal_score`` the refusal detector's score of the variant; ``suite`` the team
    suite's verdict (None when no suite is configured or it has not run yet)."""

    model_config = _STRICT

    style: StyleId
    passed: bool
    reasons: list[RegressionReason] = Field(default_factory=list)
    findings: list[RegressionFinding] = Field(default_factory=list)
    refusal_score: float = Field(ge=0.0, le=1.0)
    suite: SuiteVerdict | None = None

    @model_validator(mode="after")
    def _consistent(self) -> VariantValidation:
        if self.passed != (not self.findings):
            raise ValueError("passed is true exactly when there is no finding")
        codes = {f.code for f in self.findings}
        if self.reasons != [r for r in REGRESSION_REASONS if r in codes]:
            raise ValueError("reasons must be the findings' distinct codes, in order")
        return self


class CalibrationEscalation(BaseModel):
    """A run the engine could not complete: handed to a human, never guessed.

    ``reason``: ``invalid_output`` (no schema-valid answer covering the spectrum after the
    retry: JSON, schema, missing or extra style), ``regression`` (the last answer was valid
    but some variant failed the regression check), ``model_refusal`` (the model refused or
    a content filter stopped it) or ``api_error``. ``errors`` lists the problems,
    ``raw_output`` keeps every raw answer (JSON array, API key masked).
    """

    model_config = _STRICT

    reason: Literal["invalid_output", "regression", "model_refusal", "api_error"]
    errors: list[Annotated[str, StringConstraints(max_length=1000)]] = Field(max_length=50)
    raw_output: str | None = None


class CalibrationRun(BaseModel):
    """One calibration run, as logged (the warehouse row and the CLI's JSON output).

    ``status``: ``passed`` (every variant passed every check), ``failed_checks`` (some
    variants failed; they are kept with their reasons and can never be approved) or
    ``escalated`` (no valid output: ``escalation`` says why; ``output`` is the last
    schema-valid answer when there was one). ``clause_id`` is the input policy id,
    ``bundle_version`` the bundle's content hash; ``engine``/``engine_model``/
    ``engine_version``/``prompt_version`` identify the variant engine (``prompt_version``
    ``none`` for the local engine). ``validations`` has one entry per variant of
    ``output``, in the same order. ``started_by`` names who started the run (the approval
    gate keeps them from approving their own run); ``starter_verified_by`` says how
    ``calibrate run`` verified that it is that review-app account (``password`` or API
    ``token``); None: the name is only claimed (a Kafka request's ``requested_by``, a run
    logged before the check), and the approval gate does not let anyone decide on the run.
    """

    model_config = _STRICT

    schema_version: Literal["1"] = CALIBRATION_SCHEMA_VERSION
    calibration_run_id: Id
    created_at: AwareDatetime
    started_by: Name | None = None
    starter_verified_by: Literal["password", "token"] | None = None
    log_id: Id | None = None
    request_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = None
    refusal: Text
    policy_bundle: Name
    bundle_version: str = Field(max_length=64)
    clause_id: Id
    clause_title: str = Field(max_length=512)
    spectrum: Spectrum
    engine: str = Field(max_length=256)
    engine_model: str = Field(max_length=256)
    engine_version: str = Field(max_length=256)
    prompt_version: str = Field(max_length=64)
    status: Literal["passed", "failed_checks", "escalated"]
    output: CalibrationOutput | None = None
    validations: list[VariantValidation] = Field(default_factory=list)
    escalation: CalibrationEscalation | None = None
    attempts: int = Field(default=0, ge=0)
    usage: EngineUsage = Field(default_factory=EngineUsage)

    @model_validator(mode="after")
    def _consistent(self) -> CalibrationRun:
        if (self.status == "escalated") != (self.escalation is not None):
            raise ValueError("escalation is set exactly when the status is escalated")
        if self.status != "escalated" and self.output is None:
            raise ValueError(f"status {self.status} needs an output")
        if self.output is not None:
            if [v.style for v in self.validations] != [v.style for v in self.output.variants]:
                raise ValueError("one validation per variant, in the variants' order")
        elif self.validations:
            raise ValueError("validations without an output")
        if self.status == "passed" and not all(v.passed for v in self.validations):
            raise ValueError("status passed but a variant failed")
        if self.status == "failed_checks" and all(v.passed for v in self.validations):
            raise ValueError("status failed_checks but every variant passed")
        return self

    def passing_styles(self) -> list[str]:
        """The styles whose variant passed every check (the only ones that may be approved)."""
        return [v.style for v in self.validations if v.passed]


# -- A/B product events ----------------------------------------------------------------------
class _ABEventBase(BaseModel):
    model_config = _STRICT

    schema_version: Literal["1"] = CALIBRATION_SCHEMA_VERSION
    event_id: Id = Field(description="Unique per event: the idempotency key.")
    experiment_id: Id
    occurred_at: AwareDatetime


class ExposureEvent(_ABEventBase):
    """A user (``unit_id``, the randomisation unit) saw arm ``arm_id``'s refusal for a
    refused request (``log_id`` when the product logs it). Follow-up events reference it by
    its ``event_id``."""

    type: Literal["exposure"] = "exposure"
    unit_id: Id
    arm_id: Id
    log_id: Id | None = None


class ReRequestEvent(_ABEventBase):
    """After exposure ``exposure_id`` the user rephrased and tried again within the
    product's window. ``fulfilled``: the product then fulfilled the re-request (a successful
    circumvention of the refusal: the safety guardrail counts these)."""

    type: Literal["re_request"] = "re_request"
    exposure_id: Id
    fulfilled: bool


class EscalationEvent(_ABEventBase):
    """After exposure ``exposure_id`` the user asked for a human ("talk to a human")."""

    type: Literal["escalation"] = "escalation"
    exposure_id: Id


class SatisfactionEvent(_ABEventBase):
    """The user's survey answer after exposure ``exposure_id``: ``score`` 1 (very
    dissatisfied) to 5 (very satisfied)."""

    type: Literal["satisfaction"] = "satisfaction"
    exposure_id: Id
    score: int = Field(ge=1, le=5)


ABEvent = Annotated[
    ExposureEvent | ReRequestEvent | EscalationEvent | SatisfactionEvent,
    Discriminator("type"),
]
"""One product event of an A/B test of refusal variants (the ``type`` field tells which)."""


class ABEventEnvelope(BaseModel):
    """The published contract of one product event: ``event`` is one of the four types.

    On the wire (a topic message or a JSONL line) the event object itself is sent; this
    envelope exists to publish the union as one JSON Schema and to validate a line:
    ``ABEventEnvelope.model_validate_json(b'{"event": ' + line + b'}')`` or
    ``processors.calibration.ab.parse_event``.
    """

    model_config = _STRICT

    event: ABEvent


class ArmPlan(BaseModel):
    """One arm of an experiment: ``arm_id``, its planned allocation ``weight`` (> 0,
    relative), the ``variant_style`` and ``calibration_run_id`` it tests (None for the
    control arm, the current refusal) and ``failed_checks``: the regression reasons its
    variant failed (any makes the arm a safety regression)."""

    model_config = _STRICT

    arm_id: Id
    weight: float = Field(gt=0.0)
    variant_style: StyleId | None = None
    calibration_run_id: Id | None = None
    failed_checks: list[str] = Field(default_factory=list)


class ExperimentPlan(BaseModel):
    """What the A/B report needs besides the events (``processors.calibration.ab``).

    ``control_arm`` must be one of ``arms``. The planned sample per arm is computed from
    ``baseline_re_request_rate`` and ``minimum_detectable_effect`` (an absolute change of
    the re-request rate) at ``alpha`` and ``power``; ``business_cycle_days`` is the least
    duration before a winner may be named; ``srm_alpha`` the sample-ratio-mismatch
    threshold; ``guardrail_alpha`` the one-sided level of the circumvention guardrail.
    Defaults and their sources: docs/calibration.md.
    """

    model_config = _STRICT

    schema_version: Literal["1"] = CALIBRATION_SCHEMA_VERSION
    experiment_id: Id
    control_arm: Id
    arms: list[ArmPlan] = Field(min_length=2, max_length=20)
    clause_id: Id | None = None
    alpha: float = Field(default=0.05, gt=0.0, lt=0.5)
    power: float = Field(default=0.8, gt=0.5, lt=1.0)
    baseline_re_request_rate: float = Field(default=0.2, gt=0.0, lt=1.0)
    minimum_detectable_effect: float = Field(default=0.03, gt=0.0, lt=1.0)
    business_cycle_days: float = Field(default=7.0, ge=0.0)
    srm_alpha: float = Field(default=0.001, gt=0.0, lt=0.5)
    guardrail_alpha: float = Field(default=0.05, gt=0.0, lt=0.5)

    @model_validator(mode="after")
    def _arms(self) -> ExperimentPlan:
        ids = [a.arm_id for a in self.arms]
        if len(set(ids)) != len(ids):
            raise ValueError("arm ids must be distinct")
        if self.control_arm not in ids:
            raise ValueError(f"control_arm {self.control_arm!r} is not an arm")
        return self
