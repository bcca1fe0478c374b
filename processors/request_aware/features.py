"""The request-aware reading as a feature vector (:func:`pair_features`, columns
:data:`FEATURE_NAMES`): what ``benchmarks/refusal_detection_loso.py`` fits a logistic model
over, to compare with the written rules of :mod:`processors.request_aware.decision`. Pure."""

from __future__ import annotations

from processors.refusal_cues import CueReading
from processors.request_aware.decision import SOFT_CUES, delivers
from processors.request_aware.reading import PairReading
from processors.request_aware.text import QUESTION_TYPES

#: The columns of :func:`pair_features`, in order.
FEATURE_NAMES: tuple[str, ...] = (
    "cue_evidence",
    "cue_refusal",
    "hard_opening",
    "soft_opening_only",
    "compliance_opening",
    "negated_restatement",
    "deflection_opener",
    "clarification",
    "subjective",
    "redirect_professional",
    "lecture",
    "opening_overlap",
    "body_overlap",
    "delivery_form",
    "persona_delivery",
    "refusal_then_delivery",
    "delivers",
    "deflects",
    "implicit_refusal",
    "cue_refusal_no_delivery",
    "soft_then_delivery",
    "form_match",
    "length",
    *(f"qtype_{q}" for q in QUESTION_TYPES),
)


def pair_features(cues: CueReading, pair: PairReading) -> tuple[float, ...]:
    """The feature vector (:data:`FEATURE_NAMES`) of one response read by the cue scorer
    (``cues``) and against its request (``pair``). ``cue_evidence`` is the cue scorer's
    summed evidence clipped to [-3, 8]; ``cue_refusal`` its decision (1.0/0.0)."""
    opening_cues = [c for c in cues.cues if not c.endswith("@later")]
    refusal_opening = [
        c
        for c in opening_cues
        if c != "compliance_opening" and c not in ("answer_list", "long_answer")
    ]
    hard = any(c not in SOFT_CUES for c in refusal_opening)
    soft_only = bool(refusal_opening) and not hard
    cue_refusal = cues.norm != "" and cues.evidence >= 1.5 and cues.refusal_evidence > 0.0
    delivered = delivers(pair)
    deflects = (
        pair.negated_restatement
        or pair.deflection_opener
        or pair.clarification
        or pair.subjective
        or pair.redirect_professional
        or pair.lecture >= 0.3
    )
    return (
        max(-3.0, min(8.0, cues.evidence)),
        float(cue_refusal),
        float(hard),
        float(soft_only),
        float("compliance_opening" in opening_cues),
        float(pair.negated_restatement),
        float(pair.deflection_opener),
        float(pair.clarification),
        float(pair.subjective),
        float(pair.redirect_professional),
        pair.lecture,
        pair.opening_overlap,
        pair.body_overlap,
        float(pair.delivery_form),
        float(pair.persona_delivery),
        float(bool(refusal_opening) and delivered),
        float(delivered),
        float(deflects),
        float(deflects and not delivered and not cue_refusal),
        float(cue_refusal and not delivered),
        float(soft_only and delivered),
        float(pair.form_match),
        pair.length,
        *(float(pair.qtype == q) for q in QUESTION_TYPES),
    )
