"""Refusal pre-filter: decide whether a logged response is a refusal before paying for an audit.

Pure and deterministic (no I/O). :func:`detect_refusal` trusts an upstream
classifier's ``is_refusal`` verdict when the event carries one (and still runs the text
detection, kept beside the verdict as ``RefusalDecision.detected``: a disagreement is
recorded, see ``docs/batch.md``); otherwise :func:`detect_refusal_text` scores the
response text with weighted lexical cues.
:func:`detect_refusals` / :func:`detect_refusal_texts` do the same for a batch and, given a
trained scorer (``processors.refusal_model.RefusalModel``, setting ``prefilter_model =
"trained"``), let it decide ``is_refusal`` and ``score`` while the cues below still explain
the decision and give the full/partial ``kind``. :func:`read_cues` exposes the fired cues
(the trained model's cue features) without deciding.

Read against the request
------------------------
Given each response's request (``detect_refusal_texts(..., requests=...)``;
``detect_refusals`` passes ``event.request`` unless ``request_aware`` is False, setting
``prefilter_request_aware``), :mod:`processors.request_aware` corrects the response-only
verdict where the pair shows an implicit refusal (a clarification, a lecture or a negated
restatement instead of an answer) or a refusal followed by a delivered answer; an override
is named in ``cues`` as ``request:<case>``. With no request nothing changes. Figures:
docs/evaluation.md, "Refusal pre-filter read against the request".

How the text scorer works
-------------------------
The response is normalised (case-folded, typographic apostrophes straightened, whitespace
collapsed) and split into an *opening* (the first two sentences, at most 400 characters) and
the *rest*. Each cue is a regular expression with a weight for the opening and a (smaller)
weight for the rest: refusal phrasing is nearly always up front ("I'm sorry, but ...",
"I cannot provide ...", "As an AI ...", "It is not appropriate to ..."), while the same words
deep inside a long helpful answer are weak evidence. Compliance cues ("Sure, here are ...",
an early numbered list with no refusal up front) have negative weights. The summed evidence
``s`` becomes ``score = 1 / (1 + exp(-(s - THRESHOLD)))``; ``is_refusal`` is
``score >= 0.5``.

The cue set is tuned for *recall* (a missed refusal is never audited; a wrongly kept
compliance only costs one audit). On the human-labelled XSTest v2 completions (Röttger et al.,
NAACL 2024; GPT-4 and Llama-2-70b-chat, 900 rows, 569 refusals) it keeps >= 95% of the
refusals; the measured figures are asserted in ``tests/test_prefilter.py``.

A refusal is ``partial`` when, besides the refusal cue, the response answers something:
it offers to help with a safe version ("However, I can explain ..."), gives one ("Here are
some safer options ..."), continues with a list of three or more items, or refuses only
with soft hedges ("I must point out ...", "As an AI ...") before a long (> 500 characters)
answer. Otherwise it is ``full``. Redirecting to a professional or hotline alone is a full
refusal, as in XSTest's labelling. The full/partial split is coarse (on XSTest about 4 in 5
refusals get the human kind); treat it as a hint, not a measurement.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from processors.refusal_cues import (
    CueReading,
    RefusalKind,
    evidence_score,
    read_cues,
    refusal_kind,
)
from processors.request_aware import override, read_request_pair
from schemas.events import RefusalDisagreement, RefusalEvent, refusal_disagreement


@dataclass(frozen=True)
class RefusalDecision:
    """The pre-filter's verdict on one response.

    ``is_refusal`` is True for full and partial refusals; ``kind`` is ``"full"``,
    ``"partial"`` or ``"none"`` (``"none"`` iff not ``is_refusal``); ``score`` is a
    probability-like confidence in [0, 1] that the response is a refusal (0.5 is the decision
    boundary of the text scorer); ``cues`` names the cues that fired, in order of
    detection, for explainability; ``source`` says whether the upstream classifier or the
    text scorer decided. ``detected`` is, when the classifier decided, what our own text
    detection decided on the same response (the decision the event would have had without
    the verdict; None otherwise): the classifier stays authoritative, the two are compared
    (:attr:`disagreement`) and both are stored.
    """

    is_refusal: bool
    kind: RefusalKind
    score: float
    cues: tuple[str, ...]
    source: Literal["classifier", "text"]
    detected: RefusalDecision | None = None

    @property
    def disagreement(self) -> RefusalDisagreement:
        """How the classifier's verdict and our detection differ on this response.

        ``"classifier_refusal_detector_not"`` (the classifier says refusal, our detection
        does not), ``"detector_refusal_classifier_not"`` (the other way), or ``"none"``
        (they agree, or only one of them decided: ``detected`` is None).
        """
        if self.source != "classifier" or self.detected is None:
            return "none"
        return refusal_disagreement(self.is_refusal, self.detected.is_refusal)


def decide_from_cues(reading: CueReading) -> RefusalDecision:
    """The cue scorer's decision on a :class:`CueReading` (``source="text"``)."""
    if not reading.norm:
        return RefusalDecision(False, "none", 0.0, ("empty_response",), "text")
    score = evidence_score(reading.evidence)
    if score < 0.5 or reading.refusal_evidence <= 0.0:
        return RefusalDecision(False, "none", score, reading.cues, "text")
    kind, cues = refusal_kind(reading)
    return RefusalDecision(True, kind, score, cues, "text")


def decide_from_score(reading: CueReading, score: float) -> RefusalDecision:
    """The decision when a trained model scored the response (``score`` in [0, 1]).

    ``score >= 0.5`` is a refusal (the model's threshold is already folded into the score,
    ``processors.refusal_model``); ``cues`` and the full/partial ``kind`` still come from the
    cue reading, so the explanation names the phrases that fired. An empty response is
    ``kind="none"`` with cue ``"empty_response"`` whatever the score.
    """
    if not reading.norm:
        return RefusalDecision(False, "none", 0.0, ("empty_response",), "text")
    score = min(1.0, max(0.0, score))
    if score < 0.5:
        return RefusalDecision(False, "none", score, reading.cues, "text")
    kind, cues = refusal_kind(reading)
    return RefusalDecision(True, kind, score, cues, "text")


def detect_refusal_text(response: str) -> RefusalDecision:
    """Decide from the response text alone whether it is a refusal (the cue scorer).

    ``response`` is any string (may be empty). Returns a :class:`RefusalDecision` with
    ``source="text"``; an empty or whitespace-only response is ``kind="none"`` with the cue
    ``"empty_response"`` (an empty answer is a failure, not a policy refusal; the audit has
    nothing to judge). Never raises.
    """
    return decide_from_cues(read_cues(response))


class TextScorer(Protocol):
    """A trained scorer of cue readings (``processors.refusal_model.RefusalModel``)."""

    def scores(self, readings: Sequence[CueReading]) -> Iterable[float]:
        """Scores in [0, 1], one per reading, 0.5 the decision boundary."""
        ...


def detect_refusal_texts(
    responses: Sequence[str],
    model: TextScorer | None = None,
    requests: Sequence[str] | None = None,
) -> list[RefusalDecision]:
    """:func:`detect_refusal_text` for a batch, or the trained ``model``'s decision, read
    against each response's request when ``requests`` is given.

    With ``model`` None this is the cue scorer on each response. With a model, the batch is
    scored at once (one sparse-matrix product) and each decision comes from
    :func:`decide_from_score`: the model decides ``is_refusal`` and ``score``, the cues still
    explain it and give the full/partial ``kind``.

    ``requests`` (optional, same length as ``responses``, ``ValueError`` otherwise; an empty
    string for a response without a request) turns on the request-aware stage
    (:mod:`processors.request_aware`): where the response-only verdict misses an implicit
    refusal (a clarification, a lecture, a negated restatement instead of an answer) or
    counts as a refusal a response that still delivers what was asked (a jailbreak persona
    answering after a refusal, a disclaimer before an answer, "No, ..." answering a yes/no
    question), the stage overrides it. An
    override is named in ``cues`` (``request:implicit_refusal``,
    ``request:refuse_then_comply``, ``request:disclaim_then_answer`` or
    ``request:answers_no``) and its ``score`` is
    :data:`OVERRIDE_SCORE` (or 1 minus it), a fixed margin, not a calibrated probability; an
    implicit refusal is ``kind="full"``. With no request, decisions are exactly those
    without ``requests``. Returns one decision per response, in order; never raises for any
    text.
    """
    readings = [read_cues(r) for r in responses]
    if model is None:
        decisions = [decide_from_cues(r) for r in readings]
    else:
        scores = model.scores(readings) if readings else []
        decisions = [decide_from_score(r, float(s)) for r, s in zip(readings, scores, strict=True)]
    if requests is None:
        return decisions
    if len(requests) != len(responses):
        raise ValueError(f"{len(responses)} responses but {len(requests)} requests")
    # Imported here: processors.request_aware reads responses with this module's cues.

    out: list[RefusalDecision] = []
    for request, response, reading, decision in zip(
        requests, responses, readings, decisions, strict=True
    ):
        if not request or not reading.norm:
            out.append(decision)
            continue
        change = override(
            reading, decision.is_refusal, read_request_pair(request, response, reading)
        )
        if change is None:
            out.append(decision)
        elif change == "implicit_refusal":
            out.append(
                RefusalDecision(
                    True, "full", OVERRIDE_SCORE, (*decision.cues, f"request:{change}"), "text"
                )
            )
        else:
            out.append(
                RefusalDecision(
                    False,
                    "none",
                    1.0 - OVERRIDE_SCORE,
                    (*reading.cues, f"request:{change}"),
                    "text",
                )
            )
    return out


#: Score of a decision the request-aware stage made (``1 - OVERRIDE_SCORE`` when it clears a
#: refusal): the cue scorer's score at one unit of evidence past its threshold, a margin
#: saying "decided, not by a wide one", not a calibrated probability.
OVERRIDE_SCORE = round(1.0 / (1.0 + math.exp(-1.0)), 4)


def _classifier_decision(event: RefusalEvent, text: RefusalDecision) -> RefusalDecision:
    """The classifier's verdict on ``event`` (authoritative), with ``text`` (our detection of
    its response) kept as ``detected``; the cues name the verdict, then the text cues."""
    signal = event.classifier
    assert signal is not None and signal.is_refusal is not None
    cues = ("classifier_verdict", *text.cues)
    if not signal.is_refusal:
        return RefusalDecision(False, "none", 0.0, cues, "classifier", text)
    kind: RefusalKind = text.kind if text.kind != "none" else "full"
    return RefusalDecision(True, kind, 1.0, cues, "classifier", text)


def _trusts_classifier(event: RefusalEvent) -> bool:
    return event.classifier is not None and event.classifier.is_refusal is not None


def detect_refusals(
    events: Sequence[RefusalEvent],
    model: TextScorer | None = None,
    request_aware: bool = True,
) -> list[RefusalDecision]:
    """:func:`detect_refusal` for a batch of events, text scored with ``model`` if given.

    Every response is read by our text detection, in one batch (:func:`detect_refusal_texts`,
    the trained ``model`` if given, each response read against its event's ``request`` by the
    request-aware stage unless ``request_aware`` is False: setting ``prefilter_request_aware``).
    An upstream ``classifier.is_refusal`` verdict still wins (``source="classifier"``; a
    positive verdict takes its full/partial ``kind`` from our detection) and our detection's
    own decision is kept beside it as ``detected``, so a disagreement between the two is
    recorded rather than lost. Returns one decision per event, in order. Never raises.
    """
    requests = [e.request for e in events] if request_aware else None
    texts = detect_refusal_texts([e.response for e in events], model, requests)
    return [
        _classifier_decision(event, text) if _trusts_classifier(event) else text
        for event, text in zip(events, texts, strict=True)
    ]


def detect_refusal(
    event: RefusalEvent, model: TextScorer | None = None, request_aware: bool = True
) -> RefusalDecision:
    """Decide whether ``event.response`` is a refusal, trusting an upstream verdict if present.

    When ``event.classifier`` is set and its ``is_refusal`` is not None, that verdict wins
    (``source="classifier"``; ``score`` is 1.0 or 0.0; ``kind`` is ``"none"`` for a
    non-refusal, else the text scorer's ``full``/``partial`` reading, defaulting to
    ``"full"`` when the text shows no refusal cue; cues ``"classifier_verdict"`` then the text
    detection's; ``detected`` our text detection's own decision). Otherwise the
    result of :func:`detect_refusal_text` on ``event.response`` (or of the trained ``model``,
    :func:`detect_refusal_texts`), read against ``event.request`` unless ``request_aware``
    is False. Never raises.
    """
    return detect_refusals([event], model, request_aware)[0]
