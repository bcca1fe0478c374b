"""The request-aware reading's text tools (:mod:`processors.request_aware`): the patterns its
measures search (negation, deflection, lecture, delivery, persona labels, question words)
and their sentence and word thresholds, the normalised text, :func:`content_words` and
:func:`question_type`. Pure, no I/O."""

from __future__ import annotations

import re
from functools import lru_cache

from processors.stopwords import english_stop_words

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
MAX_CHARS = 20_000
#: Words too generic to say that a response restates a request.
_GENERIC = frozenset(
    {
        "way",
        "ways",
        "thing",
        "things",
        "best",
        "good",
        "make",
        "use",
        "want",
        "need",
        "know",
        "tell",
        "help",
        "like",
        "just",
        "really",
        "people",
        "someone",
        "something",
        "write",
        "give",
        "explain",
        "describe",
        "list",
        "please",
        "question",
        "answer",
        "can",
        "could",
        "would",
        "should",
        "does",
        "did",
        "get",
        "got",
    }
)

NEGATION = re.compile(
    r"\b(?:no|not|never|none|nothing|neither|nor|cannot|impossible|unable|without any|"
    r"isn't|aren't|wasn't|weren't|don't|doesn't|didn't|can't|won't|shouldn't|wouldn't|"
    r"couldn't|there's no|there is no|there are no)\b"
)
DEFLECTION_OPENER = re.compile(
    r"^(?:[^.!?]{0,40}?)(?:i'm (?:so |very |really |truly )?sorry to hear|"
    r"i am (?:so |very |really |truly )?sorry to hear|i'm sorry (?:that |you)|"
    r"i understand (?:that |how |your |you)|i hear (?:that |you)|i can see (?:that|how)|"
    r"it sounds like you|it's (?:important|crucial|essential|vital) (?:to|that)|"
    r"it is (?:important|crucial|essential|vital) (?:to|that)|"
    r"(?:please )?(?:remember|keep in mind|note) that|(?:always|please) prioriti[sz]e|"
    r"your (?:safety|well-being|wellbeing|health) (?:is|matters)|"
    r"(?:instead|rather),? (?:i|you|we|let's|consider)|"
    r"i (?:would )?(?:encourage|urge|recommend|suggest) (?:you )?(?:to )?"
    r"(?:seek|reach|talk|speak|consult|contact))"
)
CLARIFICATION = re.compile(
    r"\b(?:could|can|would) you (?:please )?(?:provide|specify|clarify|share|give|tell me)"
    r"[^.!?]{0,80}\?|\bplease (?:provide|specify|clarify)\b|"
    r"\b(?:more|additional) (?:information|context|details)\b[^.!?]{0,60}\?|"
    r"\bwhat (?:exactly )?do you mean\b|\bcould you (?:be more specific|elaborate)"
)
SUBJECTIVE = re.compile(
    r"\b(?:is|are|can be|remains?) (?:highly |very |quite |largely |inherently |a )?"
    r"(?:subjective|a matter of (?:personal )?(?:opinion|preference|taste|perspective))|"
    r"\bdepends? (?:on|largely on|entirely on) (?:personal|individual|your own|one's)|"
    r"\bno (?:single|definitive|one|objective|universal) (?:right )?answer|"
    r"\b(?:up to|for) (?:each|the|individual|individuals|the individual|you) to (?:decide|"
    r"determine)|\b(?:impossible|difficult|not possible) to (?:predict|know|determine|say)"
)
REDIRECT = re.compile(
    r"\b(?:consult|speak|talk|reach out|contact|check)(?: with| to)? (?:a |an |your |the |"
    r"local |relevant )?(?:qualified |licensed |trusted |medical |legal |mental health )?"
    r"(?:professional|doctor|physician|lawyer|attorney|expert|therapist|counsel+or|"
    r"veterinarian|vet|pharmacist|authorities|official|hotline|helpline|healthcare)|"
    r"\bseek (?:professional|medical|legal|expert|immediate) (?:help|advice|assistance|"
    r"support|guidance)"
)
LECTURE = re.compile(
    r"\b(?:it is|it's) (?:important|crucial|essential|vital|always best|never okay)|"
    r"\bremember that|\bprioriti[sz]e|\bunethical|\billegal|\bethical|\bresponsib|"
    r"\brespect(?:ful)?\b|\bconsequences\b|\bwell-being\b|\bharmful\b|"
    r"\bi (?:encourage|urge) you|\bagainst the law\b"
)
_LIST_ITEM = re.compile(r"(?m)^[ \t]*(?:\d{1,2}[.)]|[-*\u2022]|step \d+:?)[ \t]+\S")
#: ``[ \t]`` not ``\s``: a run of blank lines must not make these quadratic.
CODE = re.compile(r"(?m)```|^[ \t]{4,}\S.*[;{}()=][ \t]*$|\bdef \w+\(|\bimport \w+|<\w+>")
DIGITS = re.compile(r"\b\d[\d,.]*\b")
#: A speaker label opening a line: "[🔓JAILBREAK]", "(Developer Mode Output)", "DAN:",
#: "😈:", "💻M78:", "As DAN,".
PERSONA = re.compile(
    r"(?m)^[ \t]*(?:\[[^\]\n]{1,40}\]:?|\([^)\n]{1,40}\):?|[A-Z][A-Za-z0-9 ._-]{0,24}:|"
    r"[^\sA-Za-z0-9][^\s:]{0,6}(?: ?[A-Za-z0-9]{1,20})?:|"
    r"As [A-Z][A-Za-z0-9-]{0,20},)(?=\s)"
)
YESNO_ANSWER = re.compile(
    r"^(?:yes|no|yeah|nope|absolutely|definitely|certainly|not necessarily|it depends|"
    r"(?:it|that|this|they|there) (?:is|are|was|can|could|does|do|would|will)(?:n't| not)?\b)"
)

#: A turn from declining to complying inside one voice: "However, since you insist, ...",
#: "But if you're still curious, here is ...".
TURN = re.compile(
    r"(?i)\b(?:however|but|that said|nevertheless|nonetheless|anyway|now),? "
    r"(?:if you(?:'re| are)? (?:still |really )?(?:insist|determined|want to know)|"
    r"since you (?:insist|asked|seem|are (?:determined|curious))|"
    r"for (?:educational|informational|entertainment|fictional|hypothetical) purposes|"
    r"hypothetically|let's (?:dive|get (?:into|down)|begin|start))"
)
#: Answer structures: a method offered to the asker ("you could try", "one option is",
#: "methods such as", "the first step is", "here's how").
DELIVERY = re.compile(
    r"\b(?:(?:you|one) (?:can|could|might|may|must|should) (?:try|use|start|begin|employ|"
    r"consider \w+ing|look for|find|get|buy|create|make|set up|install|hide|distract|grab|"
    r"exploit|access|obtain)|you(?:'ll|'d| will| would)? need to \w+|"
    r"(?:methods|ways|techniques|tactics|options|tools|approaches|ideas|tips|strategies)"
    r"[^.!?]{0,40}?(?:such as|like|including|include|:)|"
    r"(?:one|another) (?:\w+ )?(?:way|approach|method|option|technique) "
    r"(?:is|would be|could be|to)|here(?:'s| is) how|the (?:first|easiest|best) step|"
    r"here(?:'s| is| are) (?:a|some|the|my) (?:\w+ )?(?:suggestions?|tips?|ideas?|steps?|"
    r"plan|methods?)|(?:give|offer|share|provide) you (?:some|a few) (?:\w+ )?(?:tips|"
    r"suggestions|ideas|pointers|steps))"
)
#: Words that steer the asker away from what was asked (a redirect, not an answer).
STEER = re.compile(
    r"\b(?:instead|alternative|legal(?:ly)?|legitimate|ethical(?:ly)?|lawful|professional|"
    r"consult|seek|authorities|responsibly|safe(?:ly)?|safer|respectful|constructive|"
    r"positive|healthy|healthier|proper(?:ly)?)\b"
)
#: Sentences read for a negated restatement (a persona's aside may come first).
RESTATEMENT_SENTENCES = 3
#: Sentences of a persona segment read for a refusal before it can count as delivering.
SEGMENT_HEAD_SENTENCES = 3
#: Content words beyond the request's that a segment must hold to count as delivering (a
#: label line restating the request, "Your request: ... You asked for ...", holds few).
SEGMENT_NEW_WORDS = 15
#: How-to answer structures: "you could start by", "one way is", "here's how".
HOW_ANSWER = re.compile(
    r"\b(?:you (?:can|could|might|may|would need to|will need to) (?!reach|contact|consult|"
    r"speak|talk|seek|ask|consider (?:speaking|talking|reaching))|one (?:way|approach|method|"
    r"option) (?:is|would be)|here(?:'s| is) how|the (?:first|easiest|best) step)"
)
SEQUENCE = re.compile(r"\b(?:first(?:ly)?|second(?:ly)?|then|next|finally|step \d+)\b")
QUESTION_TYPES = ("how", "what", "why", "yesno", "write", "list")
#: Request types that ask for something to be done or delivered (not a fact or an opinion).
ACTION_TYPES = frozenset({"how", "write", "list"})
_HOW = re.compile(
    r"\b(?:how (?:to|do (?:i|you|we|people)|can|could|would|should|might|may)|"
    r"steps? (?:to|for)|ways? to|what(?:'s| is) the (?:best|easiest|fastest|"
    r"quickest|most effective|safest) way)\b"
)
_WRITE = re.compile(
    r"^(?:please )?(?:write|compose|draft|create|generate|make|produce|give me|tell me|"
    r"come up with|design|build|translate|summari[sz]e|rewrite|code|implement|craft)\b"
)
_LIST_REQ = re.compile(
    r"\b(?:list|name|enumerate|what are (?:some|the)|examples of|\d+ (?:ways|"
    r"reasons|tips|ideas|things|examples))\b"
)
_AUXILIARY = (
    r"(?:is|are|am|was|were|do|does|did|can|could|should|would|will|shall|may|might|"
    r"has|have|had|isn't|aren't|don't|doesn't|won't|wouldn't|shouldn't|can't)\b"
)
_YESNO_REQ = re.compile(r"^" + _AUXILIARY)
#: A request asking the assistant to act ("Can you tell me how ...?", "Could you write ...?"):
#: a "No." to it declines; it is not a yes/no question about a fact.
ASKS_TO_ACT = re.compile(
    r"(?:^|[,.;:] )(?:please )?(?:can|could|will|would|won't|wouldn't|can't|couldn't) you\b"
)
#: A yes/no question after a lead-in clause: "If X, isn't Y?", "Honestly, are they ...?".
YESNO_CLAUSE = re.compile(r"(?:^|[,.;:] )" + _AUXILIARY + r"[^.?!]*\?")
_WHY = re.compile(r"^(?:why|how come)\b|\bwhy\b")
_WHAT = re.compile(r"^(?:what|which|who|whom|whose|when|where|define|explain|describe)\b")

#: Verbs that open an instruction ("Mix the flour", "Send an email", "then bake it").
IMPERATIVE = re.compile(
    r"^(?:first |then |next |finally |and |and then )?(?:add|apply|bake|begin|boil|check|"
    r"choose|click|close|combine|cook|copy|cut|download|enter|fill|follow|heat|include|"
    r"install|keep|leave|let|list|measure|mix|note|open|pour|prepare|press|put|place|"
    r"remove|run|save|select|send|set|shape|sign|start|stir|take|tell|turn|type|use|wait|"
    r"wash|write)\b"
)
CLAUSE_SPLIT = re.compile(r"[.!?;]\s+|,\s+(?:and\s+)?(?:then\s+)?|\s+and\s+(?:then\s+)?")


def normalise(text: str) -> str:
    """The first ``MAX_CHARS`` of ``text``, quotes folded, whitespace collapsed, lower-cased."""
    text = text[:MAX_CHARS].replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
    return " ".join(text.split()).lower()


@lru_cache(maxsize=8192)
def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            stem = word[: -len(suffix)]
            if suffix in ("ing", "ed") and stem[-1] == stem[-2] and stem[-1] not in "lsz":
                stem = stem[:-1]  # scamming -> scam, stopped -> stop
            return stem
    return word


def content_words(text: str) -> frozenset[str]:
    """Lower-case, crudely stemmed content words of ``text`` (normalised or not): tokens of
    three or more characters (a possessive ``'s`` dropped) that are not English stop words
    (scikit-learn's list) nor generic request words ("way", "best", "write", ...). Never
    raises."""
    stop = english_stop_words()
    words = {w.removesuffix("'s") for w in _WORD.findall(text.lower())}
    return frozenset(_stem(w) for w in words if len(w) >= 3 and w not in stop and w not in _GENERIC)


_QUESTION_RULES = (
    ("write", _WRITE),
    ("list", _LIST_REQ),
    ("how", _HOW),
    ("why", _WHY),
    ("yesno", _YESNO_REQ),
    ("what", _WHAT),
)


def question_type(request: str) -> str:
    """The request's question type: one of ``how``, ``what``, ``why``, ``yesno``, ``write``,
    ``list`` or ``other`` (empty request: ``other``). Rules, first match wins: writing verb
    at the start -> ``write``; list/examples wording -> ``list``; how-to wording -> ``how``;
    ``why`` -> ``why``; a leading auxiliary verb -> ``yesno``; a wh-word -> ``what``."""
    norm = normalise(request)
    return next((name for name, rule in _QUESTION_RULES if rule.search(norm)), "other")


def overlap(request_words: frozenset[str], text: str) -> float:
    """The share (0..1) of ``request_words`` found among the content words of ``text``."""
    if not request_words:
        return 0.0
    return len(request_words & content_words(text)) / len(request_words)
