"""The refusal pre-filter's cue reading (:mod:`processors.prefilter` decides from it): the
response normalised and split into an opening and the rest, the weighted refusal, partial
and compliance cues found in each, list items, and the summed evidence as a score
(:func:`read_cues`, :class:`CueReading`). Pure and deterministic; read by the request-aware
stage (:mod:`processors.request_aware`), the refusal cascade and the trained pre-filter's
features too. How the cues are weighted: the module docstring of :mod:`processors.prefilter`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from processors.regex_gates import Gate, gated_search, required_literals
from processors.scanning import PatternSet

RefusalKind = Literal["full", "partial", "none"]

#: Summed cue evidence at which a response counts as a refusal (score 0.5).
THRESHOLD = 1.5
_OPENING_MAX_CHARS = 400


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

#: The refusal cues, then the compliance cues, in one multi-pattern database whose
#: candidates cover every piece of the scanned text (the opening and the rest of ``norm``).
_SCAN = PatternSet([c.pattern for c in (*_REFUSAL_CUES, *_COMPLIANCE_CUES)], substrings=True)

_COMPLIANCE_SLOTS = tuple(range(len(_REFUSAL_CUES), len(_REFUSAL_CUES) + len(_COMPLIANCE_CUES)))


def _plain_search(pattern: re.Pattern[str], gate: Gate | None, text: str) -> re.Match[str] | None:
    """``pattern.search(text)``, ``gate`` unused (the scan already ruled the other cues out)."""
    del gate
    return pattern.search(text)


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


def evidence_score(evidence: float) -> float:
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
    # One scan of norm says which cues may match any piece of it (the opening, the rest:
    # processors.scanning); only those are searched. Without the engine, every cue is (its
    # literal gate first). A cue that does not fire adds 0.0: skipping it changes nothing.
    may_match = _SCAN.candidates(norm)
    if may_match is None:
        refusal, compliance, search = _REFUSAL_CUES, _COMPLIANCE_CUES, gated_search
    else:
        refusal = tuple(_REFUSAL_CUES[i] for i in sorted(may_match) if i < len(_REFUSAL_CUES))
        compliance = tuple(
            c for c, i in zip(_COMPLIANCE_CUES, _COMPLIANCE_SLOTS, strict=True) if i in may_match
        )
        search = _plain_search

    evidence = 0.0
    cues: list[str] = []
    for cue in refusal:
        w = 0.0
        if cue.opening_weight and search(cue.pattern, cue.gate, opening):
            w = cue.opening_weight
            cues.append(cue.name)
        elif cue.rest_weight and search(cue.pattern, cue.gate, rest):
            w = cue.rest_weight
            cues.append(f"{cue.name}@later")
        evidence += w
    refusal_evidence = evidence

    for cue in compliance:
        if search(cue.pattern, cue.gate, opening):
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
