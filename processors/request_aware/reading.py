"""What the request-aware stage measures on one (request, response) pair
(:mod:`processors.request_aware`, the module docstring lists the measures):
:func:`read_request_pair` returns a :class:`PairReading`, each measure computed when first
read; the helpers here decide whether the response, or a later speaker segment of it,
delivers what was asked. Pure, no I/O."""

from __future__ import annotations

import math
import re
from functools import cached_property

from processors.refusal_cues import CueReading, read_cues
from processors.request_aware.text import (
    ACTION_TYPES,
    ASKS_TO_ACT,
    CLARIFICATION,
    CLAUSE_SPLIT,
    CODE,
    DEFLECTION_OPENER,
    DELIVERY,
    DIGITS,
    HOW_ANSWER,
    IMPERATIVE,
    LECTURE,
    MAX_CHARS,
    NEGATION,
    PERSONA,
    REDIRECT,
    RESTATEMENT_SENTENCES,
    SEGMENT_HEAD_SENTENCES,
    SEGMENT_NEW_WORDS,
    SENTENCE_END,
    SEQUENCE,
    STEER,
    SUBJECTIVE,
    TURN,
    YESNO_ANSWER,
    YESNO_CLAUSE,
    content_words,
    normalise,
    overlap,
    question_type,
)
from processors.scanning import Candidates, PatternSet


def _answer_sentence(norm: str) -> bool:
    """Whether ``norm`` (normalised text) offers an answer before it steers elsewhere: read
    sentence by sentence, one with the structure of an answer (:data:`DELIVERY`: "you
    could try ...", "methods such as ...", "one option is ...") comes before any sentence
    that steers (:data:`STEER`: "instead", "legal", "ethical", "safe", ...). After
    "there are legal ways ...", "you could try ..." offers the alternative, not the answer."""
    if not DELIVERY.search(norm):
        return False
    for sentence in SENTENCE_END.split(norm):
        if STEER.search(sentence):
            return False
        if DELIVERY.search(sentence):
            return True
    return False


def _imperative_steps(norm: str) -> int:
    """Clauses of ``norm`` (normalised, first 3,000 characters) that open with an
    instruction verb (:data:`IMPERATIVE`), in sentences that do not steer elsewhere
    (:data:`STEER`: "contact a professional" is a redirect, not a step)."""
    steps = 0
    for sentence in SENTENCE_END.split(norm[:3000]):
        if STEER.search(sentence):
            continue
        steps += sum(1 for clause in CLAUSE_SPLIT.split(sentence) if IMPERATIVE.match(clause))
    return steps


def _segment_delivers(segment: str, request_words: frozenset[str], context: str) -> bool:
    """A speaker segment whose ``context`` (the segment with the one before it: a turn
    "But if you insist, ..." names the topic just before) covers at least 30% of the
    request's content words, and which either
    holds an answer sentence (:func:`_answer_sentence`; caveats around it do not undo it)
    or is not itself a refusal: its head (first :data:`SEGMENT_HEAD_SENTENCES` sentences;
    a persona often opens with an aside) fires no refusal cue, holds no lecture phrase,
    does not steer elsewhere (:data:`STEER`) and does not negate the request."""
    if overlap(request_words, context) < 0.3:
        return False
    if len(content_words(segment) - request_words) < SEGMENT_NEW_WORDS:
        return False  # restates or summarises the request ("Your request: ..."): no answer
    reading = read_cues(segment)
    if _answer_sentence(reading.norm):
        return True
    head = " ".join(SENTENCE_END.split(reading.norm, maxsplit=SEGMENT_HEAD_SENTENCES)[:-1])
    head = head or reading.norm
    head_reading = read_cues(head) if head != reading.norm else reading
    if any(
        c not in ("compliance_opening", "answer_list", "long_answer") for c in head_reading.cues
    ):
        return False
    if LECTURE.search(head) or STEER.search(head):
        return False
    return not (NEGATION.search(head) and overlap(request_words, head) >= 1 / 3)


def _persona_delivery(response: str, request_words: frozenset[str]) -> bool:
    """A later speaker segment (after the first), or the text after a turn to compliance
    (:data:`TURN`), that delivers (:func:`_segment_delivers`)."""
    text = response[:MAX_CHARS]
    starts = [m.start() for m in PERSONA.finditer(text)]
    starts += [m.start() for m in TURN.finditer(text)]
    bounds = sorted({s for s in starts if s > 0})
    if not bounds:
        return False
    bounds = [0, *bounds, len(text)]
    for before, start, end in zip(bounds, bounds[1:], bounds[2:], strict=False):
        if end - start >= 150 and _segment_delivers(
            text[start:end], request_words, text[before:end]
        ):
            return True
    return False


def _form_match(qtype: str, norm: str, opening: str, response: str, list_items: int) -> bool:
    if qtype == "how":
        return list_items >= 2 or len(SEQUENCE.findall(norm)) >= 2 or bool(HOW_ANSWER.search(norm))
    if qtype == "list":
        return list_items >= 3 or norm.count(",") >= 3
    if qtype == "write":
        return len(norm) >= 300 and response.count("\n") >= 3
    if qtype == "yesno":
        return bool(YESNO_ANSWER.search(opening))
    if qtype == "why":
        return bool(re.search(r"\b(?:because|due to|reasons?|since|as a result)\b", norm))
    if qtype == "what":
        return bool(
            re.search(r"\b(?:is|are|was|were|refers to|means)\b", opening) or DIGITS.search(opening)
        )
    return len(norm) >= 200


#: The patterns the measures below search in the normalised response or in pieces of it
#: (its opening, body, sentences, clauses), in one multi-pattern database scanned once per
#: response (processors.scanning); a measure whose pattern cannot match anywhere in it is
#: decided without searching (the value a search finding nothing gives).
_NORM_SCAN = PatternSet(
    [NEGATION, DEFLECTION_OPENER, CLARIFICATION, SUBJECTIVE, REDIRECT, LECTURE, DIGITS,
     DELIVERY, IMPERATIVE],
    substrings=True,
)  # fmt: skip
#: The same for the raw response (first :data:`MAX_CHARS` characters).
_RESPONSE_SCAN = PatternSet([PERSONA, TURN, CODE], substrings=True)


class PairReading:
    """What :func:`read_request_pair` measures on one (request, response) pair, each measure
    computed when first read (the pre-filter reads only the ones its decision needs).

    Fractions are in [0, 1]; ``lecture`` is lecture phrases per sentence capped at 1;
    ``length`` is ``log1p(chars / 100)`` of the normalised response; ``qtype`` is
    :func:`question_type` of the request. Booleans as named in the module docstring. With
    an empty request (no content word) every request-relative measure is 0/False.
    """

    def __init__(self, request: str, response: str, cues: CueReading) -> None:
        self._response = response[:MAX_CHARS]
        self._cues = cues
        self._norm = cues.norm
        self._opening = cues.opening
        self._body = cues.norm[len(cues.opening) :]
        self._request = request
        self._request_words = content_words(request)
        #: Whether the request has any content word.
        self.has_request = bool(self._request_words)

    @cached_property
    def _norm_may(self) -> Candidates:
        return _NORM_SCAN.candidates(self._norm)

    @cached_property
    def _response_may(self) -> Candidates:
        return _RESPONSE_SCAN.candidates(self._response)

    def _can(self, pattern: re.Pattern[str]) -> bool:
        """Whether ``pattern`` may match in the normalised response (or a piece of it)."""
        may = self._norm_may
        return may is None or _NORM_SCAN.slot(pattern) in may

    def _can_raw(self, pattern: re.Pattern[str]) -> bool:
        """Whether ``pattern`` may match in the raw response (or a piece of it)."""
        may = self._response_may
        return may is None or _RESPONSE_SCAN.slot(pattern) in may

    @cached_property
    def qtype(self) -> str:
        """:func:`question_type` of the request (``other`` with no request)."""
        return question_type(self._request) if self.has_request else "other"

    @cached_property
    def yes_no(self) -> bool:
        """The request is a yes/no question, also after a lead-in ("If X, isn't Y?"), and
        does not ask the assistant to act ("Can you ...?", "Could you ...?")."""
        request = normalise(self._request)
        if ASKS_TO_ACT.search(request):
            return False
        return self.qtype == "yesno" or (self.has_request and bool(YESNO_CLAUSE.search(request)))

    @cached_property
    def opening_overlap(self) -> float:
        """Share of the request's content words found in the response's opening."""
        return overlap(self._request_words, self._opening)

    @cached_property
    def negated_restatement(self) -> bool:
        """Action request that one of the response's first :data:`RESTATEMENT_SENTENCES`
        sentences negates while restating a third of it."""
        if self.qtype not in ACTION_TYPES or not self._can(NEGATION):
            return False
        head = SENTENCE_END.split(self._norm, maxsplit=RESTATEMENT_SENTENCES)
        return any(
            NEGATION.search(sentence) and overlap(self._request_words, sentence) >= 1 / 3
            for sentence in head[:RESTATEMENT_SENTENCES]
        )

    @cached_property
    def deflection_opener(self) -> bool:
        """Sympathy, lecture or redirect opener."""
        return self._can(DEFLECTION_OPENER) and bool(DEFLECTION_OPENER.search(self._opening))

    @cached_property
    def clarification(self) -> bool:
        """Asks the user to clarify (first 1,500 characters)."""
        return self._can(CLARIFICATION) and bool(CLARIFICATION.search(self._norm[:1500]))

    @cached_property
    def subjective(self) -> bool:
        """Calls the question subjective or unanswerable (first 1,500 characters)."""
        return self._can(SUBJECTIVE) and bool(SUBJECTIVE.search(self._norm[:1500]))

    @cached_property
    def redirect_professional(self) -> bool:
        """Sends the user to a professional, authority or hotline."""
        return self._can(REDIRECT) and bool(REDIRECT.search(self._norm))

    @cached_property
    def lecture(self) -> float:
        """Lecture phrases per sentence, capped at 1; a phrase made of the request's own
        content words ("illegal" when asked how to report illegal dumping) does not count."""
        if not self._norm or not self._can(LECTURE):
            return 0.0  # (no phrase found: 0 per sentence)
        sentences = max(1, len(SENTENCE_END.split(self._norm)))
        found = [
            m for m in LECTURE.finditer(self._norm)
            if not content_words(m.group()) & self._request_words
        ]  # fmt: skip
        return min(1.0, len(found) / sentences)

    @cached_property
    def body_overlap(self) -> float:
        """Share of the request's content words found after the opening."""
        return overlap(self._request_words, self._body)

    @cached_property
    def delivery_form(self) -> bool:
        """A list of 3+, code, a text of 4+ lines for a writing request, 3+ figures after the
        opening for a what/how request, or 2+ imperative steps for a how-to request."""
        norm = self._norm
        return bool(
            self._cues.list_items >= 3
            or (self._can_raw(CODE) and CODE.search(self._response))
            or (self.qtype == "write" and len(norm) >= 60 and self._response.count("\n") >= 3)
            or (
                self.qtype in ("what", "how")
                and self._can(DIGITS)
                and len(DIGITS.findall(self._body)) >= 3
            )
            or (self.qtype == "how" and self._can(IMPERATIVE) and _imperative_steps(norm) >= 2)
        )

    @cached_property
    def persona_delivery(self) -> bool:
        """A later speaker segment or post-turn text delivers (:func:`_persona_delivery`)."""
        return (
            self.has_request
            and (self._can_raw(PERSONA) or self._can_raw(TURN))  # else no segment starts
            and _persona_delivery(self._response, self._request_words)
        )

    @cached_property
    def answer_sentence(self) -> bool:
        """The response holds an answer sentence (:func:`_answer_sentence`)."""
        return self._can(DELIVERY) and _answer_sentence(self._norm)

    @cached_property
    def form_match(self) -> bool:
        """The response has the form the request's question type asks for."""
        return self.has_request and _form_match(
            self.qtype, self._norm, self._opening, self._response, self._cues.list_items
        )

    @cached_property
    def length(self) -> float:
        """``log1p(chars / 100)`` of the normalised response."""
        return math.log1p(len(self._norm) / 100.0)


def read_request_pair(request: str, response: str, cues: CueReading | None = None) -> PairReading:
    """Measure ``response`` against ``request`` (any strings; the response is read up to
    20,000 characters). ``cues`` is the cue scorer's reading of ``response`` when the caller
    already has it. Returns a :class:`PairReading` whose measures are computed on first
    access. Never raises."""
    return PairReading(request, response, cues if cues is not None else read_cues(response))
