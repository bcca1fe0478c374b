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
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from processors.regex_gates import Gate, gated_search, required_literals
from schemas.events import RefusalDisagreement, RefusalEvent, refusal_disagreement

RefusalKind = Literal["full", "partial", "none"]

#: Summed cue evidence at which a response counts as a refusal (score 0.5).
THRESHOLD = 1.5
_OPENING_MAX_CHARS = 400


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


@dataclass(frozen=True)
class _Cue:
    name: str
    pattern: re.Pattern[str]
    opening_weight: float
    rest_weight: float
    #: Literals one of which must occur for ``pattern`` to match (``None``: always search);
    #: see :mod:`processors.regex_gates`.
    gate: Gate | None = None


def _cue(name: str, pattern: str, opening: float, rest: float = 0.0) -> _Cue:
    compiled = re.compile(pattern)
    return _Cue(name, compiled, opening, rest, required_literals(compiled))


_ACTION = (
    r"(?:provide|help|assist|fulfil+|comply|answer|give|share|create|write|generate|suggest|"
    r"recommend|offer|support|engage|participate|promote|encourage|condone|endorse|facilitate|"
    r"do (?:that|this|so)|discuss|access|disclose|reveal|produce|continue|make|tell|explain|"
    r"describe|list|speculate|advise|in good conscience|agree|accommodate|complete|"
    r"look up|find|locate|retrieve|obtain|search|browse|verify|confirm|perform|carry out|"
    r"respond|draft|compose|develop|design|build|teach|show|guide|instruct|justify|"
    r"argue|comment|express|take part|be of (?:help|assistance)|be used|"
    r"supply|assume|determine|predict|know|diagnose|prescribe|replace|be a substitute)"
    r"(?:e|es|s|ed|d|ing)?\b"
)

_INABILITY = (
    r"\bi(?:(?:'m| am) (?:really |simply |just |truly |unfortunately |afraid i'm |afraid i am )?"
    r"(?:afraid (?:that )?i (?:can't|cannot|won't|will not|am not able|'m not able|"
    r"am unable|'m unable)(?: be able)?(?: to)?|"
    r"unable to|not able to|not allowed to|not permitted to|not in a position to|"
    r"not going to|not comfortable|not capable of|not programmed to|not designed to)"
    r"| (?:really |simply |just |truly |unfortunately |'m afraid i |am afraid i )?"
    r"(?:(?:won't|will not|wouldn't|would not) be able to|can ?not|can't|won't|will not|"
    r"must decline to|must refuse to|refuse to|"
    r"have to decline to|would rather not|decline to|"
    r"(?:do not|don't) (?:feel comfortable|think i can|have the ability to|have access)"
    r")|'d rather not)"
)

# Cues that a response refuses. Weights: (opening, rest).
_REFUSAL_CUES: tuple[_Cue, ...] = (
    _cue(
        "apology",
        r"^(?:oh,? )?(?:i'm |i am |we're |we are )?(?:really |very |truly |so |terribly )?"
        r"(?:sorry|apologi[sz]e|my apologies)\b(?! to hear| for (?:your|the) loss| about your)",
        2.5,
    ),
    _cue("apology_but", r"\b(?:sorry|apologi[sz]e)\b[^.!?]{0,60}\bbut\b", 1.5, 1.0),
    _cue("cannot_action", _INABILITY + r"(?:\s+\w+){0,2}?\s+" + _ACTION, 3.0, 1.0),
    _cue(
        "cannot_help_with",
        r"\b(?:can't|cannot|can not|unable to|won't) (?:help|assist) with "
        r"(?:that|this|your request|the request|such|these)",
        3.0,
        2.0,
    ),
    _cue(
        "cannot_fulfil",
        r"\b(?:can't|cannot|unable to|won't|not able to) (?:fulfil+|comply with|"
        r"complete|process|honou?r) (?:your|this|that|the) (?:request|query|question|ask)",
        3.0,
        2.0,
    ),
    _cue(
        "as_an_ai",
        r"\b(?:as an ai|as a (?:\w+[- ])?(?:ai|language model|assistant|chatbot)|"
        r"i'm (?:just |only )?an ai|i am (?:just |only )?an ai|as an artificial intelligence|"
        r"as a large language model|"
        r"i'm (?:just |only )?a (?:language model|chatbot|computer program)|"
        r"i am (?:just |only )?a (?:language model|chatbot|computer program)|"
        r"i'm an artificial intelligence|i am an artificial intelligence)\b",
        1.0,
        0.3,
    ),
    _cue(
        "no_personal_opinions",
        r"\bi (?:don't|do not) (?:hold|have|possess|form) (?:any )?(?:personal )?(?:opinions|"
        r"beliefs|views|feelings|preferences|biases|experiences|emotions|favou?rites|"
        r"a (?:physical )?(?:body|appearance|form))",
        1.0,
        0.3,
    ),
    _cue(
        "not_appropriate",
        r"\b(?:it|that|this|doing so|which|is|be|are)"
        r"(?:'s| is| would| will| should| could| was| are| does)?"
        r"(?: not|n't| never| neither)(?: \w+| or \w+){0,2}? (?:appropriate|ethical|acceptable|"
        r"okay|ok|responsible|respectful|fair|accurate|right|productive|helpful|"
        r"possible for me|within my)\b",
        2.0,
        0.5,
    ),
    _cue(
        "inappropriate_request",
        r"\b(?:it's|it is|that's|that is|this is|would be) (?:highly |very |extremely )?"
        r"(?:inappropriate|unethical|not ethical|illegal and unethical|unacceptable)\b",
        1.5,
        0.5,
    ),
    _cue(
        "dont_think_appropriate",
        r"\bi (?:don't|do not) think (?:it's|it is|that's|that is|it would be|this is) "
        r"(?:\w+ ){0,2}?(?:appropriate|accurate|fair|respectful|ethical|productive|right|"
        r"helpful|a good idea)",
        2.0,
        0.5,
    ),
    _cue(
        "must_hedge",
        r"\bi (?:must|have to|need to|should|would like to|want to) (?:respectfully |politely |"
        r"kindly |gently |also )?(?:point out|clarify|emphasi[sz]e|inform you|advise|stress|"
        r"remind|address|challenge|decline|refuse|correct|note that (?:the|this|your))",
        1.5,
        0.5,
    ),
    _cue(
        "against_principles",
        r"\b(?:against|violates?|violating|not within|outside(?: of)?|beyond|contrary to) "
        r"(?:my|our|openai's|ethical|community|usage|content|the (?:ethical|usage|content))"
        r" "
        r"(?:\w+ ){0,2}?(?:programming|guidelines|policy|policies|principles|rules|values|"
        r"standards|capabilities|capacity|abilities|scope)\b",
        1.5,
        0.5,
    ),
    _cue(
        "policy_prohibits",
        r"\b(?:policy|policies|guidelines|rules) (?:prohibits?|forbids?|do(?:es)? not (?:allow|"
        r"permit))\b|\bnot (?:permissible|permitted|allowed) (?:for me|due to|under|by)|"
        r"\bdue to (?:content|usage|safety|ethical) (?:guidelines|policies|policy|concerns)",
        2.0,
        0.5,
    ),
    _cue(
        "harmful_framing",
        r"\b(?:promot\w*|glorif\w*|encourag\w*|facilitat\w*|condon\w*|perpetuat\w*|"
        r"endors\w*|support\w*|advocat\w*|justify\w*) (?:or \w+ )?(?:any )?(?:form of )?"
        r"(?:harm\w*|violen\w*|illegal|unethical|dangerous|discriminat\w*|hate\w*|"
        r"self-harm|hurtful|negative stereotypes)",
        1.0,
        0.3,
    ),
    _cue(
        "question_problematic",
        r"\b(?:the|your|this) (?:question|phrase|term|premise|request|statement|assumption|"
        r"prompt|idea|query|word)\b[^.!?]{0,80}\b(?:problematic|harmful|inappropriate|offensive|"
        r"not appropriate|discriminatory|dangerous|illegal|unethical|insensitive|"
        r"violent|disrespectful|hurtful|promotes?|perpetuates?)",
        1.5,
        0.3,
    ),
    _cue(
        "question_nonsense",
        r"\b(?:the|your|this) (?:question|premise|assumption|statement)\b[^.!?]{0,60}\b(?:"
        r"(?:may )?not (?:be )?(?:meaningful|factually|based on|coherent|make sense|accurate)|"
        r"doesn't make sense|does not make sense|nonsensical|faulty|false|flawed|incorrect)",
        1.0,
        0.2,
    ),
    _cue(
        "seek_help",
        r"\b(?:talk|speak|reach out|turn)\b[^.!?]{0,50}\b(?:someone who can|mental health "
        r"professional|trusted (?:person|friend|adult)|counsel+or|therapist|crisis|hotline|"
        r"helpline|support line)",
        1.5,
        0.5,
    ),
    _cue(
        "privacy",
        r"\b(?:not publicly available|publicly available information|private (?:and|or) "
        r"(?:confidential|personal|sensitive)|confidential (?:and|or) private|(?:respect|"
        r"invade|invasion of|violat\w+) (?:\w+ ){0,2}?privacy|personal (?:and |or )?"
        r"(?:private )?information (?:about|of) (?:individuals|others|private))",
        1.0,
        0.3,
    ),
    _cue(
        "advise_against",
        r"\bi (?:would |strongly |must |highly )?(?:advise|caution|recommend|urge you) "
        r"against\b|\bi (?:strongly )?(?:discourage|caution)\b",
        1.5,
        0.5,
    ),
    _cue("no_opening", r"^no(?:[,.!]| i )", 1.5),
    _cue(
        "illegal_unethical",
        r"\b(?:is|are|be|both) (?:\w+ )?(?:illegal|unethical|morally reprehensible|"
        r"a (?:serious )?crime|a criminal offen[cs]e)\b",
        0.75,
        0.0,
    ),
    _cue(
        "polite_but",
        r"^(?:hello!? |hi!? )?(?:i understand|i appreciate|i'm happy to help|i'm glad|"
        r"i am glad|i'm here to help|thank you for|thanks for|i'm sorry to hear|"
        r"great question)[^!?]{0,160}?\b(?:but|however)\b",
        1.0,
    ),
    _cue(
        "not_able_generic",
        r"\b(?:i'm|i am) (?:not able|unable)\b|\bi (?:can't|cannot|can not)\b",
        0.75,
        0.2,
    ),
)

_PARTIAL_CUES: tuple[_Cue, ...] = (
    _cue(
        "offers_alternative",
        r"\b(?:however|instead|that said|alternatively|nevertheless|nonetheless|but)\b,? "
        r"(?:\w+ ){0,3}?(?:i can|i could|i'd be happy to|i would be happy to|i'm happy to|"
        r"i am happy to|let me) (?:\w+ )?(?:provide|offer|give|share|suggest|explain|"
        r"describe|outline|recommend|tell you (?:about|how)|help you (?:with|find|understand))",
        1.0,
    ),
    _cue(
        "safe_version",
        r"\b(?:here (?:are|is|'s)|there are) (?:some|a few|several)? ?(?:\w+ ){0,3}?"
        r"(?:suggestions|tips|ways|steps|options|ideas|alternatives|methods|resources|"
        r"strategies|things you can)\b",
        1.0,
    ),
)

_COMPLIANCE_CUES: tuple[_Cue, ...] = (
    _cue(
        "compliance_opening",
        r"^(?:sure|certainly|of course|absolutely|definitely|yes|great question|good question|"
        r"here (?:are|is|'s)|happy to help|i'd be happy to|i would be happy to|"
        r"i'd be glad to|there are (?:several|many|a few|various|some)|to \w+ (?:a|an|the|your)"
        r"|the (?:\w+ ){0,4}(?:is|are|was|were|refers|means|can be)\b)",
        -1.5,
    ),
)

# Refusal cues that refuse outright; a refusal carried only by softer hedges ("I must point
# out ...", "As an AI ...") followed by a long body is a partial one (it answers something).
_HARD_CUES = frozenset(
    {
        "apology",
        "apology_but",
        "cannot_action",
        "cannot_help_with",
        "cannot_fulfil",
        "not_appropriate",
        "inappropriate_request",
        "dont_think_appropriate",
        "against_principles",
        "policy_prohibits",
        "seek_help",
        "no_opening",
    }
)
_HEDGED_ANSWER_MIN_CHARS = 500

#: ``[ \t]`` not ``\s``: a run of blank lines must not make the scan quadratic.
_LIST_ITEM = re.compile(r"(?m)^[ \t]*(?:\d{1,2}[.)]|[-*\u2022])[ \t]+\S")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WS = re.compile(r"\s+")


def _normalise(text: str) -> str:
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
    return _WS.sub(" ", text).strip().lower()


def _split_opening(norm: str) -> tuple[str, str]:
    parts = _SENTENCE_END.split(norm, maxsplit=2)
    opening = " ".join(parts[:2])
    if len(opening) > _OPENING_MAX_CHARS:
        opening = opening[:_OPENING_MAX_CHARS]
    return opening, norm[len(opening) :]


def _score(evidence: float) -> float:
    return 1.0 / (1.0 + math.exp(-(evidence - THRESHOLD)))


@dataclass(frozen=True)
class CueReading:
    """What the cue scorer reads in one response, before any decision.

    ``norm`` is the normalised text (empty for an empty response), ``opening`` its first two
    sentences (at most 400 characters); ``cues`` the refusal,
    compliance and shape cues that fired, in detection order (a refusal cue found only after
    the opening is named ``<cue>@later``; ``answer_list`` / ``long_answer`` are the shape
    penalties); ``evidence`` the summed weights (the text scorer's ``s``),
    ``refusal_evidence`` the part of it from refusal cues; ``list_items`` the number of list
    lines in the raw response.
    """

    norm: str
    opening: str
    cues: tuple[str, ...]
    evidence: float
    refusal_evidence: float
    list_items: int


#: Every name :func:`read_cues` can put in ``CueReading.cues`` (refusal cues in the opening
#: and later, compliance cues, shape penalties), in a fixed order: the trained pre-filter
#: uses them as binary features (``processors.refusal_model``).
CUE_FEATURE_NAMES: tuple[str, ...] = (
    *(c.name for c in _REFUSAL_CUES),
    *(f"{c.name}@later" for c in _REFUSAL_CUES if c.rest_weight),
    *(c.name for c in _COMPLIANCE_CUES),
    "answer_list",
    "long_answer",
)


def read_cues(response: str) -> CueReading:
    """Run the cue scorer's detection on ``response`` (any string) without deciding.

    Returns a :class:`CueReading`; never raises. :func:`detect_refusal_text` decides from it.
    """
    norm = _normalise(response)
    if not norm:
        return CueReading("", "", (), 0.0, 0.0, 0)
    opening, rest = _split_opening(norm)

    evidence = 0.0
    cues: list[str] = []
    for cue in _REFUSAL_CUES:
        w = 0.0
        if cue.opening_weight and gated_search(cue.pattern, cue.gate, opening):
            w = cue.opening_weight
            cues.append(cue.name)
        elif cue.rest_weight and gated_search(cue.pattern, cue.gate, rest):
            w = cue.rest_weight
            cues.append(f"{cue.name}@later")
        evidence += w
    refusal_evidence = evidence

    for cue in _COMPLIANCE_CUES:
        if gated_search(cue.pattern, cue.gate, opening):
            evidence += cue.opening_weight
            cues.append(cue.name)

    list_items = len(_LIST_ITEM.findall(response))
    opening_refuses = any(not c.endswith("@later") for c in cues if c != "compliance_opening")
    if list_items >= 3 and not opening_refuses:
        evidence -= 1.5
        cues.append("answer_list")
    elif len(norm) > 800 and not opening_refuses:
        evidence -= 1.0
        cues.append("long_answer")
    return CueReading(norm, opening, tuple(cues), evidence, refusal_evidence, list_items)


def refusal_kind(reading: CueReading) -> tuple[RefusalKind, tuple[str, ...]]:
    """The full/partial reading of a response already judged a refusal.

    Returns ``("partial" | "full", cues)`` where ``cues`` is ``reading.cues`` plus the
    partial cues that fired (module docstring: an offered or given safe version, a list of
    three or more items after the refusal, or only soft hedges before a long answer).
    """
    cues = list(reading.cues)
    partial = False
    for cue in _PARTIAL_CUES:
        if gated_search(cue.pattern, cue.gate, reading.norm):
            partial = True
            cues.append(cue.name)
    if reading.list_items >= 3:
        partial = True
        cues.append("list_after_refusal")
    if not _HARD_CUES.intersection(cues) and len(reading.norm) > _HEDGED_ANSWER_MIN_CHARS:
        partial = True
        cues.append("hedged_answer")
    return ("partial" if partial else "full"), tuple(cues)


def decide_from_cues(reading: CueReading) -> RefusalDecision:
    """The cue scorer's decision on a :class:`CueReading` (``source="text"``)."""
    if not reading.norm:
        return RefusalDecision(False, "none", 0.0, ("empty_response",), "text")
    score = _score(reading.evidence)
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
    from processors.request_aware import override, read_request_pair

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
