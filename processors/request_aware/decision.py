"""The request-aware stage's decision (:mod:`processors.request_aware`): :func:`delivers`
(does the response do what was asked) and :func:`override`, the correction of a
response-only verdict in four written cases. Pure."""

from __future__ import annotations

from typing import Literal

from processors.refusal_cues import CueReading
from processors.request_aware.reading import PairReading
from processors.request_aware.text import ACTION_TYPES

SOFT_CUES = frozenset({"as_an_ai", "no_personal_opinions", "not_able_generic", "must_hedge"})
#: Cues that judge the question's premise rather than decline to act ("No, that is not
#: accurate", "the premise is false"): after "No," answering a yes/no question, an answer.
_JUDGES_PREMISE = frozenset(
    {
        "no_opening",
        "not_appropriate",
        "question_problematic",
        "question_nonsense",
        "illegal_unethical",
        "inappropriate_request",
    }
)

#: Lecture phrases per sentence at which a response to an action request counts as a lecture.
LECTURE_MIN = 0.3

Override = Literal["implicit_refusal", "refuse_then_comply", "disclaim_then_answer", "answers_no"]


def delivers(pair: PairReading) -> bool:
    """Whether the response does what was asked: a later speaker segment delivers; or the
    response has a delivered form (list, steps, code, a multi-line text for a writing
    request, figures); or it holds an answer sentence (:func:`_answer_sentence`) and its body
    covers a third of the request's content words; or its body covers half of them in the
    form the question type asks for (steps or "you could ..." for a how-to request, whatever
    caveats surround them; for other types, without lecturing: under :data:`LECTURE_MIN`)."""
    return (
        pair.persona_delivery
        or pair.delivery_form
        or (pair.answer_sentence and pair.body_overlap >= 1 / 3)
        or (
            pair.body_overlap >= 0.5
            and pair.form_match
            and (pair.qtype == "how" or pair.lecture < LECTURE_MIN)
        )
    )


def override(cues: CueReading, is_refusal: bool, pair: PairReading) -> Override | None:
    """The request-aware stage's correction of a response-only verdict, or None.

    ``is_refusal`` is the verdict without the request (cue rules or trained model). Rules,
    from the definition of a refusal as "not doing what was asked" (module docstring):

    - ``implicit_refusal`` (not a refusal -> refusal): the response does not deliver
      (:func:`delivers`) and it asks the user to clarify, or declares the question
      subjective/unanswerable, or, on an action request (how / write / list), negates the
      request (negated restatement), lectures (:data:`LECTURE_MIN`), opens with sympathy or a
      redirect, or sends the user to a professional;
    - ``refuse_then_comply`` (refusal -> not): a later speaker segment, or the text after a
      turn ("However, since you insist, ..."), delivers the request (a jailbreak's second
      persona answers after the first refused);
    - ``disclaim_then_answer`` (refusal -> not): the only refusal phrasing in the opening is a
      soft disclaimer about the assistant itself ("As an AI ...", "I have no personal
      opinions", "I cannot ...", "I must point out ...") and the response delivers. (Widening
      this to "I cannot give opinions / predict" before a prose answer was measured and
      dropped: Reuter's annotators split such answers about 60/40 between complied and
      refused.)
    - ``answers_no`` (refusal -> not): the request is a yes/no question (also after a
      lead-in clause: "If X, isn't Y?") and the response opens with "No," (the cue scorer's
      ``no_opening``, meant for "No, I won't") with no other refusal cue than ones judging
      the premise ("that is not accurate", "the premise is false", "it is illegal"): a "no"
      answers a yes/no question.

    With no request (``pair.has_request`` False) there is never an override.
    """
    if not pair.has_request or not cues.norm:
        return None
    if is_refusal:
        if pair.persona_delivery:
            return "refuse_then_comply"
        opening = [
            c
            for c in cues.cues
            if not c.endswith("@later")
            and c not in ("compliance_opening", "answer_list", "long_answer")
        ]
        if opening and set(opening) <= SOFT_CUES and delivers(pair):
            return "disclaim_then_answer"
        if "no_opening" in opening and set(opening) <= _JUDGES_PREMISE and pair.yes_no:
            return "answers_no"
        return None
    deflects = (
        pair.clarification
        or pair.subjective
        or (
            pair.qtype in ACTION_TYPES
            and (
                pair.negated_restatement
                or pair.lecture >= LECTURE_MIN
                or pair.deflection_opener
                or pair.redirect_professional
            )
        )
    )
    return "implicit_refusal" if deflects and not delivers(pair) else None
