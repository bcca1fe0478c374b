"""Tokenisation of the offline ``local`` engine (``processors.engines.local``): lower-cased
word tokens without stop words or the refusal's boilerplate, British/American spellings
unified and lightly stemmed. Shared by the clause index, the cues' stems, the clarification
screen and the calibration regression check."""

from __future__ import annotations

import re

from processors.stopwords import english_stop_words

_KEEP_WORDS = frozenset(
    {
        "fire",
        "call",
        "bill",
        "find",
        "show",
        "take",
        "describe",
        "detail",
        "empty",
        "fill",
        "side",
        "top",
        "bottom",
        "back",
        "front",
        "cry",
        "serious",
        "found",
        "move",
        "put",
        "full",
        "part",
        "name",
        "someone",
        "anyone",
        "everyone",
        "kill",
        "made",
    }
)
_STOP_WORDS = (english_stop_words() - _KEEP_WORDS) | {
    "s",
    "t",
    "d",
    "ll",
    "m",
    "re",
    "ve",
    "don",
    "doesn",
    "didn",
    "isn",
    "wasn",
    "aren",
    "won",
    "wouldn",
    "couldn",
    "shouldn",
    "let",
    "like",
    "just",
    "want",
    "need",
    "know",
    "tell",
    "way",
    "ways",
    "best",
    "good",
    "use",
    "used",
    "using",
    "make",
    "does",
    "did",
    "doing",
    "im",
    "ive",
    "house",
}
_RESPONSE_BOILERPLATE = frozenset(
    {
        "sorry",
        "apologize",
        "apologise",
        "apologies",
        "unfortunately",
        "assist",
        "assistance",
        "help",
        "helpful",
        "provide",
        "providing",
        "able",
        "unable",
        "request",
        "fulfill",
        "fulfil",
        "comply",
        "appropriate",
        "inappropriate",
        "ethical",
        "unethical",
        "guideline",
        "guidelines",
        "policy",
        "policies",
        "openai",
        "important",
        "note",
        "instead",
        "however",
        "understand",
        "respect",
        "respectful",
        "harmful",
        "harm",
        "illegal",
        "promote",
        "promoting",
        "encourage",
        "dangerous",
        "safe",
        "safety",
        "responsible",
        "consequence",
        "consequences",
        "information",
        "question",
        "answer",
        "response",
        "happy",
        "glad",
        "suggest",
        "recommend",
        "additionally",
        "remember",
        "behavior",
        "behaviour",
        "activity",
        "activities",
        "content",
        "support",
        "resources",
        "seek",
        "professional",
    }
)
_SPELLING = {
    "neighbour": "neighbor",
    "neighbours": "neighbors",
    "colour": "color",
    "favourite": "favorite",
    "favourites": "favorites",
    "behaviour": "behavior",
    "defence": "defense",
    "offence": "offense",
    "licence": "license",
    "mould": "mold",
    "organisation": "organization",
    "humour": "humor",
    "authorised": "authorized",
    "authorisation": "authorization",
    "dehumanise": "dehumanize",
    "dehumanises": "dehumanizes",
    "analyse": "analyze",
    "programme": "program",
    "centre": "center",
    "recognise": "recognize",
    "recognising": "recognizing",
    "sexualising": "sexualizing",
    "synthesising": "synthesizing",
    "practise": "practice",
    "judgement": "judgment",
}
_WORD_RE = re.compile(r"[a-z0-9]+")


def _stem(word: str) -> str:
    """A light, deterministic suffix stripper (plural -s/-es/-ies, -ied, -ing, -ed, final -e).

    Only used so that "killing"/"kills"/"killed" and "drugs" meet "kill"/"drug" in BM25;
    it is applied identically to clauses and queries, so imperfect stems still match.
    """
    w = _SPELLING.get(word, word)
    if len(w) <= 3:
        return w
    if w.endswith(("ies", "ied")) and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith(("sses", "xes", "zes", "ches", "shes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is", "ous")):
        w = w[:-1]
    for suffix in ("ing", "ed"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)]
            if len(w) >= 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]  # stabbed -> stabb -> stab
            break
    if w.endswith("e") and len(w) > 4:
        w = w[:-1]  # browse/browsing -> brows, practice/practicing -> practic
    return w


_TOKEN_CACHE_SIZE = 200_000
"""Distinct words whose token (:func:`tokenize`) is remembered; the cache is emptied when full."""
_REQUEST_TOKENS: dict[str, str | None] = {}
_RESPONSE_TOKENS: dict[str, str | None] = {}


def _token(word: str, response: bool) -> str | None:
    """The token of one lower-cased word (``None``: dropped), remembered per word."""
    if word in _STOP_WORDS or (response and word in _RESPONSE_BOILERPLATE):
        token = None
    else:
        token = _stem(word)
    cache = _RESPONSE_TOKENS if response else _REQUEST_TOKENS
    if len(cache) >= _TOKEN_CACHE_SIZE:
        cache.clear()
    cache[word] = token
    return token


def tokenize(text: str, *, response: bool = False) -> list[str]:
    """Lower-case word tokens without stop words, stemmed (see :func:`_stem`).

    With ``response=True`` refusal boilerplate words are dropped too. Returns a list that
    keeps duplicates and order (BM25 uses term frequency). Each distinct word's token is
    computed once and remembered (a pure function of the word).
    """
    cache = _RESPONSE_TOKENS if response else _REQUEST_TOKENS
    out: list[str] = []
    for word in _WORD_RE.findall(text.lower().replace("\u2019", "'").replace("'", "")):
        token = cache[word] if word in cache else _token(word, response)
        if token is not None:
            out.append(token)
    return out


def topic_words(text: str) -> list[str]:
    """The words of ``text``, lower-cased and unstemmed, without stop words, in order (with
    repeats): what a policy-gap flag names as the requests' topic."""
    return [w for w in _WORD_RE.findall(text.lower()) if w not in _STOP_WORDS]
