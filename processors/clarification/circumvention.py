"""The circumvention check: deterministic rules a question set must pass before any user sees it.

Clarification questions must never teach a user how to get an unsafe request through. A set
is rejected, with one reason code per rule it breaks (issue 12, step 3):

``gives_examples``
    shows examples of safe or unsafe requests ("for example", "such as", "a safe request
    would be ...", a quoted text of five or more words or one the request does not contain);
``suggests_wording``
    suggests wording ("you could ask", "if you rephrase", "try asking", "reframe", ...);
``asks_method``
    asks about methods or implementation ("what tools", "which chemicals", "how would you
    get access", "step by step", ...) or about the depth of the answer ("how much detail",
    "what level of detail", "how detailed", "how in-depth") instead of intent and context;
``harmful_vocabulary``
    introduces harm vocabulary the request did not contain: a word of :data:`HARM_WORDS`
    (compared by stem, ``processors.engines.local_text.tokenize``), or a harmful-intent cue family
    of the audit engine (``processors.engines.local_cues.HARM_FAMILIES``) that fires on the
    question but not on the request; or **quotes a harmful operation**, even in the
    request's own words: a quoted span containing a word of :data:`HARM_WORDS` (by stem) or
    on which a cue family of :data:`ACT_FAMILIES` fires (:func:`quoted_harm`); or uses any
    term of the harm lexicon (``processors.clarification.harm_lexicon.HARM_AREAS``), quoted
    or not, whether or not the request used it. Echoing the harmful object back as the
    question's topic ("... about \"toxic gas\"", "why do you want to kill it?") is rejected;
``restates_refusal``
    restates the refusal reason: policy or refusal vocabulary ("policy", "not allowed",
    "harmful", "I can't help", ...) or five consecutive words of the refusal text that the
    request does not contain;
``leading_question``
    leads toward an answer: a tag question ("..., right?"), a suggested benign purpose or
    role ("is this for a school project?", "are you a nurse?"), an assumption ("I assume");
``asks_declaration``
    asks the user to declare they mean no harm (promise, confirm, "no harmful intent",
    "legitimate reason"): the answer proves nothing and teaches what to say;
``too_many_questions`` / ``too_few_questions``
    more than ``MAX_QUESTIONS`` (4) or fewer than ``MIN_QUESTIONS`` (2) questions.

The rules read the user-visible ``question_text`` only, lower-cased with typographic quotes
folded. They are deliberately broad: a false rejection costs an escalation to a reviewer, a
missed one could teach circumvention. Measured on the labelled fixture
``tests/fixtures/clarification_question_sets.jsonl``: see docs/clarification.md.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from processors.clarification.harm_lexicon import lexicon_hits
from processors.engines.local_cues import HARM_FAMILIES, find_cues
from processors.engines.local_text import tokenize
from schemas.clarification import (
    CIRCUMVENTION_REASONS,
    MAX_QUESTIONS,
    MIN_QUESTIONS,
    RULE_REASONS,
    QuestionSet,
)

GIVES_EXAMPLES = "gives_examples"
SUGGESTS_WORDING = "suggests_wording"
ASKS_METHOD = "asks_method"
HARMFUL_VOCABULARY = "harmful_vocabulary"
RESTATES_REFUSAL = "restates_refusal"
LEADING_QUESTION = "leading_question"
ASKS_DECLARATION = "asks_declaration"
TOO_MANY_QUESTIONS = "too_many_questions"
TOO_FEW_QUESTIONS = "too_few_questions"

REASON_CODES: tuple[str, ...] = RULE_REASONS
"""The rules' reason codes, in report order (``schemas.clarification.RuleReason``: the LLM
judge, ``processors.clarification.judge``, answers with the same vocabulary)."""

QUOTE_MAX_WORDS = 4
"""A quotation of more words than this reads as an example request (spans the ``local``
engine quotes are at most ``processors.clarification.ambiguity.MAX_SPAN_WORDS`` = 4)."""
SHINGLE_WORDS = 5
"""Consecutive words shared with the refusal (and absent from the request) that count as
restating it."""

HARM_WORDS: tuple[str, ...] = (
    "kill", "murder", "weapon", "gun", "firearm", "rifle", "ammunition", "silencer", "bomb",
    "explosive", "detonate", "grenade", "poison", "toxin", "lethal", "overdose", "drug",
    "meth", "methamphetamine", "cocaine", "heroin", "fentanyl", "narcotic", "hack", "hacker",
    "malware", "ransomware", "keylogger", "exploit", "phishing", "steal", "theft", "shoplift",
    "fraud", "scam", "launder", "counterfeit", "forge", "forgery", "smuggle", "trafficking",
    "stalk", "dox", "spy", "kidnap", "abduct", "torture", "assault", "attack", "shoot",
    "stab", "strangle", "suicide", "rape", "porn", "pornography", "nude", "explicit",
    "harass", "threaten", "extort", "blackmail", "evade", "untraceable", "undetectable",
    "illegal", "illegally", "terrorist", "terrorism", "extremist", "radicalise", "radicalize",
    "slur", "impersonate", "jailbreak", "trespass", "burglary", "burgle", "arson", "anthrax",
    "ricin", "sarin", "pathogen", "weaponise", "weaponize", "bypass", "crack", "breach",
    "victim", "hostage", "massacre", "genocide", "bully",
)  # fmt: skip
"""Harm vocabulary a question may only use when the request used it (hand-written from the
harm areas of the example taxonomy, refusal_audit/example_policies/refusal_taxonomy.md)."""

_HARM_STEMS = frozenset(s for w in HARM_WORDS for s in tokenize(w))

ACT_FAMILIES = HARM_FAMILIES - {"private_data", "private_relation", "personal_data"}
"""Harm cue families that name a harmful act or intent; a quote on which one fires quotes a
harmful operation. The data families are left out: they name whose information a request
is about ("my neighbour's phone number"), which a whose-data question must be able to
quote."""


def harm_words(text: str) -> list[str]:
    """The stems of :data:`HARM_WORDS` that occur in ``text`` (sorted, distinct)."""
    return sorted(set(tokenize(text)) & _HARM_STEMS)


def quoted_harm(span: str) -> list[str]:
    """What makes quoting ``span`` a quote of a harmful operation: its harm-vocabulary stems,
    the terms of the harm lexicon (``processors.clarification.harm_lexicon``, as
    ``<area>:<text>``) and the :data:`ACT_FAMILIES` cue families that fire on it (as
    ``cue:<family>``); empty when it may be quoted."""
    families = {c.family for c, _ in find_cues(span, "")} & ACT_FAMILIES
    lexicon = [str(h) for h in lexicon_hits(span)]
    return harm_words(span) + lexicon + [f"cue:{f}" for f in sorted(families)]


_EXAMPLES = re.compile(
    r"\b(?:for example|for instance|e\.g\.|such as|examples? of|an example|like asking|"
    r"something like|(?:requests?|questions?|prompts?) like|"
    r"(?:a |an )?(?:safe|safer|acceptable|allowed|permitted|appropriate|unsafe|harmful|"
    r"forbidden|disallowed|inappropriate) (?:requests?|questions?|prompts?|versions?|"
    r"alternatives?|phrasings?|ways? to ask))\b"
)
_QUOTED = re.compile(r"\"([^\"]+)\"|(?<!\w)'([^']{3,})'(?!\w)")
_WORDING = re.compile(
    r"\b(?:you (?:could|can|might|may|should|would) (?:instead )?(?:ask|say|phrase|word|put|"
    r"try|frame|request|write|mention|specify that)|if you (?:rephrase|reword|reframe|"
    r"phrase|word|say|tell me|frame|ask|put it|describe it as|explain that|mention)|"
    r"try (?:asking|saying|rephrasing|rewording|phrasing|framing|again)|rephras\w*|"
    r"reword\w*|refram\w*|phrase (?:it|this|your)|word (?:it|this|your)|"
    r"(?:ask|say|put) (?:it |this )?(?:instead|differently|another way)|"
    r"instead,? (?:ask|say|try)|(?:better|different|safer) way to (?:ask|phrase|put|word|say)|"
    r"(?:put|say) it (?:this|that) way|framed as|if it (?:were|was) (?:framed|phrased|worded|"
    r"asked))\b"
)
_METHOD = re.compile(
    r"\b(?:what|which) (?:[\w']+ (?:and |or )?){0,3}?"
    r"(?:methods?|techniques?|tools?|software|materials?|ingredients?|equipment|chemicals?|"
    r"substances?|steps?|procedures?|recipes?|quantit(?:y|ies)|amounts?|doses?|dosages?|"
    r"tactics?|approach(?:es)?|code|commands?|scripts?|exploits?|payloads?|components?|"
    r"instructions?|means|mechanism|configuration)\b"
    r"|\bhow (?:exactly |precisely |specifically )?(?:would|will|do|did|could|can|are|were|"
    r"might) you (?:go about|plan|intend|want to (?:do|make|build|get|carry)|try|be able|"
    r"carry|make|build|create|do it|do this|get|access|obtain|acquire|bypass|perform|"
    r"execute|implement|achieve|accomplish|produce|hide|conceal|avoid|disable|break|crack|"
    r"install|deploy)"
    r"|\bhow (?:much|many) (?:\w+ )?(?:would|will|do|did) you (?:need|use|want|take)"
    r"|\bhow (?:much|many) (?:more |further )?(?:detail|details|depth|specifics|information)\b"
    r"|\b(?:what|which|the) (?:level|degree|amount) of (?:detail|depth|specificity)\b"
    r"|\bhow (?:detailed|in-depth|in depth|deep|specific|thorough|technical)\b"
    r"|\b(?:full|fuller|complete|exact|precise|specific) details?\b"
    r"|\b(?:step[- ]by[- ]step|implementation|implement(?:ing|ed)?|technical (?:details?|"
    r"specifics?|approach)|by what means|in what way would you)\b"
)
_RESTATES = re.compile(
    r"\b(?:polic(?:y|ies)|guidelines?|terms of (?:service|use)|rules?|not (?:allowed|permitted)|"
    r"(?:is|was|be|are) (?:allowed|permitted|prohibited|forbidden)|prohibit\w*|forbidden|"
    r"violat\w+|against (?:the|our|my) \w+|refus\w+|declin\w+|"
    r"(?:can'?t|cannot|unable to|won'?t|will not) (?:help|assist|answer|provide|comply)|"
    r"flagged|restricted|content filter|safety (?:reasons?|concerns?|rules?)|harmful|unsafe|"
    r"dangerous|sensitive (?:topic|content|request|subject))\b"
)
_LEADING = re.compile(
    r"(?:,|\s)\s*(?:right|correct|yes|no|isn'?t (?:it|that)|aren'?t you|don'?t you|"
    r"won'?t you|wouldn'?t you|is that (?:right|correct|so)|ok(?:ay)?|true)\s*\?\s*$"
    r"|\b(?:is|are|was) (?:this|it|that|you|the request) (?:just |only |simply |purely |"
    r"perhaps |maybe |probably |mainly |possibly )?(?:for|about|a|an|part of|asking for) "
    r"(?:a |an |your |some |the )?(?:school|class|college|university|homework|assignment|"
    r"research|academic|educational|education|study|studies|novel|story|fiction|book|game|"
    r"film|movie|curiosity|curious|hypothetical|thought experiment|project|paper|thesis|"
    r"training|safety|prevention|awareness|protect\w*|self-defen[cs]e|work|job|professional|"
    r"medical|legal|good)"
    r"|\b(?:i assume|i take it|i guess|presumably|surely|i'?m guessing|i suppose|"
    r"you probably|you must be|you(?:'re| are) (?:just|only|simply|probably) )"
    r"|\b(?:just curious|out of curiosity|hypothetically|for (?:educational|research|"
    r"academic|school) purposes)\b"
    r"|^\W*(?:is|are|was|were) (?:this|it|that|the request|these) (?:[\w']+ ){0,3}?for\b"
    r"|^\W*(?:are|were) you (?:a|an|the|working as|part of) "
    r"|^\W*(?:do|did) you work (?:as|in|for) "
)
_DECLARATION = re.compile(
    r"\b(?:promise|swear|guarantee|certify|assure (?:me|us)|confirm|affirm|attest|pledge|"
    r"vouch|acknowledge)\b"
    r"|\b(?:no|any|without) (?:harm|harmful|bad|ill|malicious|criminal|evil) ?(?:intent\w*|"
    r"purposes?|plans?|uses?|motives?)\b"
    r"|\bmeans? no harm\b|\bno harm (?:is |will be )?(?:meant|intended|done)\b"
    r"|\b(?:harmless|good|benign|innocent|honest|legitimate|lawful|legal|peaceful) "
    r"(?:intent\w*|purposes?|reasons?|uses?|motives?)\b"
    r"|\b(?:won'?t|will not|wouldn'?t|would not|don'?t|do not|not going to|never) "
    r"(?:use|hurt|harm|misuse|abuse|do anything|break|plan|intend)\b"
    r"|\b(?:do|would|will|can) you (?:agree|accept|consent)\b"
)
_WORD = re.compile(r"[\w']+")


@dataclass(frozen=True)
class Finding:
    """One broken rule: its reason ``code``, the 0-based ``question`` it concerns (None for
    the whole set) and ``detail``, the matched text or words."""

    code: str
    question: int | None
    detail: str


@dataclass(frozen=True)
class CheckResult:
    """The check's verdict: ``ok`` when no rule is broken; ``findings`` in question order.

    ``score`` and ``threshold`` are the learned check's set score and reject threshold
    (``processors.clarification.circumvention_model``; None for the rules). They are kept
    out of the findings: :meth:`describe` (escalations, for reviewers) shows them, a retry
    turn sent to the question model is built from the findings alone.
    """

    findings: tuple[Finding, ...]
    score: float | None = None
    threshold: float | None = None

    @property
    def ok(self) -> bool:
        """True when the set may be surfaced."""
        return not self.findings

    @property
    def reasons(self) -> list[str]:
        """The distinct reason codes, in ``schemas.clarification.CIRCUMVENTION_REASONS``
        order (the rules', then the learned check's rubric codes,
        ``processors.clarification.circumvention_model``), then any other code sorted."""
        codes = {f.code for f in self.findings}
        known = [c for c in CIRCUMVENTION_REASONS if c in codes]
        return known + sorted(codes - set(known))

    def describe(self) -> str:
        """The findings as ``code (question N: detail); ...``, then ``score S >= T`` when the
        learned check decided (for escalations and reviewers; not for a retry turn)."""
        parts = []
        for f in self.findings:
            where = f"question {f.question + 1}: " if f.question is not None else ""
            parts.append(f"{f.code} ({where}{f.detail})")
        if self.score is not None and self.threshold is not None and self.findings:
            relation = ">=" if self.score >= self.threshold else "<"
            parts.append(f"score {self.score:.2f} {relation} {self.threshold:.2f}")
        return "; ".join(parts)


_LOOK_FROM = "абвгдеёзийклмнопрстуфхцчшщъыьэюяіјѕԁɡοαεικνρτυχ"
_LOOK_TO = "abvgdeeziiklmnoprstufhccss'y'eyaijsdgoaeiknptux"
_LOOKALIKES = str.maketrans(_LOOK_FROM + _LOOK_FROM.upper(), _LOOK_TO + _LOOK_TO.upper())
"""Cyrillic and Greek letters folded to the Latin letters they look or sound like, so a
question cannot slip a word past the patterns by spelling it with look-alikes (a word in a
Cyrillic-script language is folded too; the patterns are English)."""


_LEET = str.maketrans("0134579@$", "oieastgas")
_LEET_WORD = re.compile(
    r"(?<![\w@$.+-])"  # a whole token, not part of an address, a number or a compound
    r"(?=[\w@$]*[A-Za-z][\w@$]*[A-Za-z])"  # at least two letters
    r"(?![0-9]+[A-Za-z]+(?![\w@$]))"  # not a quantity with its unit (70kg, 500ml)
    r"(?![A-Za-z]+[0-9]+(?![\w@$]))"  # not a name with a trailing number (WW1, MP3)
    r"[A-Za-z0134579@$]*[0134579@$][A-Za-z0134579@$]*"
    r"(?![\w@$]|\.[A-Za-z])"  # not followed by a domain (name@mail.com)
)
_SPACED_LETTERS = re.compile(r"(?<![\w@$])[A-Za-z]([ .\-_*])(?:[A-Za-z]\1)+[A-Za-z](?![\w@$])")


def fold_obfuscation(text: str) -> str:
    """Undo two spellings that hide a word from the patterns: letters spaced out with one
    repeated separator (``w e a p o n``, ``m.e.t.h``, ``g-u-n``: three letters or more) are
    joined, and a word mixing letters with the digits and signs of leetspeak (``b0mb``,
    ``p@ssw0rd``, ``3xpl0it``) is spelled with letters (0 o, 1 i, 3 e, 4 a, 5 s, 7 t, 9 g,
    @ a, $ s). Quantities with units (``70kg``), names ending in a number (``WW1``), numbers
    and e-mail addresses are left alone. On the 1,540 texts of datasets/circumvention it
    changes one (``Log4Shell``)."""
    text = _SPACED_LETTERS.sub(lambda m: m.group()[::2], text)
    return _LEET_WORD.sub(lambda m: m.group().translate(_LEET), text)


def clean_text(text: str) -> str:
    """``text`` as every rule reads it, before any pattern: NFKC (compatibility forms
    folded), invisible format characters removed (zero-width spaces and joiners, soft
    hyphens, direction marks: Unicode category Cf), Cyrillic/Greek look-alikes folded to
    Latin, and spaced-out letters and leetspeak undone (:func:`fold_obfuscation`). Case and
    other spacing are kept."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf").translate(_LOOKALIKES)
    return fold_obfuscation(text)


def normalise_text(text: str) -> str:
    """:func:`clean_text`, typographic quotes folded, lower-cased, whitespace collapsed."""
    folded = (
        clean_text(text)
        .replace("\u2019", "'")
        .replace("\u2018", "'")
        .replace("\u201c", '"')
        .replace("\u201d", '"')
    )
    return " ".join(folded.lower().split())


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


def _shingles(words: Sequence[str]) -> set[tuple[str, ...]]:
    n = SHINGLE_WORDS
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


class _Request:
    """What the rules need of the request and the refusal, computed once per check."""

    def __init__(self, request: str, refusal: str) -> None:
        request = clean_text(request)
        self.text = normalise_text(request)
        self.word_text = f" {' '.join(_words(self.text))} "
        self.stems = set(tokenize(request))
        self.harm_families = {c.family for c, _ in find_cues(request, "")} & HARM_FAMILIES
        self.refusal_shingles = _shingles(_words(normalise_text(refusal))) - _shingles(
            _words(self.text)
        )


def _question_findings(i: int, raw: str, req: _Request) -> list[Finding]:
    raw = clean_text(raw)
    q = normalise_text(raw)
    out: list[Finding] = []

    def rule(code: str, pattern: re.Pattern[str]) -> None:
        m = pattern.search(q)
        if m is not None:
            out.append(Finding(code, i, m.group(0).strip()))

    quoted_spans = [(m.group(1) or m.group(2) or "").strip() for m in _QUOTED.finditer(q)]
    for quoted in quoted_spans:
        quoted_words = _words(quoted)
        joined = f" {' '.join(quoted_words)} "
        if len(quoted_words) > QUOTE_MAX_WORDS or joined not in req.word_text:
            out.append(Finding(GIVES_EXAMPLES, i, f'quotes "{quoted[:60]}"'))
            break
    # the user's own words, quoted, are not the question's wording: the phrase rules read
    # the question with such quotes masked
    q = _QUOTED.sub(lambda m: '"' + "#" * len(m.group(0)) + '"', q) if out == [] else q
    rule(GIVES_EXAMPLES, _EXAMPLES)
    rule(SUGGESTS_WORDING, _WORDING)
    rule(ASKS_METHOD, _METHOD)
    new_harm = sorted({s for s in tokenize(raw) if s in _HARM_STEMS} - req.stems)
    new_families = sorted(
        {c.family for c, _ in find_cues(raw, "") if c.family in HARM_FAMILIES} - req.harm_families
    )
    lexicon = [str(h) for h in lexicon_hits(raw)]
    if new_harm or new_families or lexicon:
        words = ", ".join(new_harm + [f"cue:{f}" for f in new_families] + lexicon)
        out.append(Finding(HARMFUL_VOCABULARY, i, words))
    for quoted in quoted_spans:
        harm = quoted_harm(quoted)
        if harm:
            detail = f'quotes a harmful operation "{quoted[:60]}" ({", ".join(harm)})'
            out.append(Finding(HARMFUL_VOCABULARY, i, detail))
    rule(RESTATES_REFUSAL, _RESTATES)
    shared = _shingles(_words(q)) & req.refusal_shingles
    if shared:
        out.append(Finding(RESTATES_REFUSAL, i, "repeats the refusal: " + " ".join(min(shared))))
    rule(LEADING_QUESTION, _LEADING)
    rule(ASKS_DECLARATION, _DECLARATION)
    return out


def check_questions(questions: Sequence[str], request: str, refusal: str) -> CheckResult:
    """Check question texts (any number, unvalidated) against the rules (module docstring).

    ``request`` and ``refusal`` are the refused request and the refusal text the questions
    are about. Pure and deterministic; never raises for any input strings.
    """
    findings: list[Finding] = []
    if len(questions) > MAX_QUESTIONS:
        findings.append(Finding(TOO_MANY_QUESTIONS, None, f"{len(questions)} questions"))
    if len(questions) < MIN_QUESTIONS:
        findings.append(Finding(TOO_FEW_QUESTIONS, None, f"{len(questions)} questions"))
    req = _Request(request, refusal)
    for i, text in enumerate(questions):
        findings.extend(_question_findings(i, text, req))
    return CheckResult(tuple(findings))


def check_question_set(questions: QuestionSet, request: str, refusal: str) -> CheckResult:
    """:func:`check_questions` over a validated set's ``question_text`` values."""
    return check_questions([q.question_text for q in questions.questions], request, refusal)
