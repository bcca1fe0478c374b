"""The ``local`` engine's cue search (``processors.engines.local``, step 2 of its module
docstring): :func:`find_cues` finds which of the cue table's named regular-expression cues
(:data:`processors.engines.local_cue_table.CUES`: request-side benign context and harmful
intent, response-side capability limits and clarification, with their logit weights) fire on
a (request, response) pair, and :func:`family_weights` sums them per family."""

from __future__ import annotations

import re
from collections.abc import Sequence

from processors.engines.local_cue_table import CUES, Cue
from processors.regex_gates import Keys, search_at, text_keys
from processors.scanning import PatternSet

__all__ = ["CUES", "HARM_FAMILIES", "Cue", "family_weights", "find_cues"]


_NAMED_ENTITY_EXCLUDE = frozenset(
    {
        "I",
        "I'm",
        "I've",
        "I'd",
        "I'll",
        "AI",
        "OK",
        "Ok",
        "TV",
        "US",
        "USA",
        "UK",
        "EU",
        "UN",
        "God",
        "Black",
        "White",
        "Asian",
        "Jewish",
        "Muslim",
        "Christian",
        "Hindu",
        "Jews",
        "Muslims",
        "Christians",
        "Hindus",
        "Sikhs",
        "Buddhists",
        "Catholics",
        "Roma",
        "Arabs",
        "Arab",
        "Africans",
        "African",
        "Mexicans",
        "Mexican",
        "Chinese",
        "Indian",
        "Indians",
        "Latino",
        "Latinos",
        "Hispanic",
        "Native",
        "Americans",
        "American",
        "European",
        "Europeans",
        "Mormons",
        "Atheists",
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
        "English",
        "Christmas",
        "Easter",
        "Internet",
        "Google",
        "Facebook",
        "Instagram",
        "Twitter",
        "TikTok",
        "WhatsApp",
        "Amazon",
        "Can",
        "Could",
        "How",
        "What",
        "Why",
        "Where",
        "Who",
        "When",
        "Please",
        "Is",
        "Are",
        "Do",
        "Does",
        "Should",
        "Would",
        "Write",
        "Tell",
    }
)
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?:;])\s+|\n+")
_CAPITALISED_RE = re.compile(r"[A-Za-z][\w'\-]*")


def _named_entities(request: str) -> list[str]:
    """Capitalised words that are not sentence-initial, pronouns, groups, days or platforms.

    A crude stand-in for named-entity recognition: names of public or fictional figures,
    titles of works, places and organisations. Returns them in order (possessive "'s" kept).
    """
    found: list[str] = []
    for sentence in _SENTENCE_SPLIT_RE.split(request.replace("\u2019", "'")):
        words = _CAPITALISED_RE.findall(sentence)
        for word in words[1:]:
            base = word[:-2] if word.endswith("'s") else word
            if len(base) < 3 or not base[:1].isupper() or base in _NAMED_ENTITY_EXCLUDE:
                continue
            found.append(word)
    return found


_SEARCHED_CUES = tuple(c for c in CUES if c.family != "named_entity")
_NAMED_ENTITY_CUE = next((c for c in CUES if c.family == "named_entity"), None)

# One multi-pattern set per text the cues read ((side, case_sensitive): the lower-cased
# or the raw request or response), scanned once per text (processors.scanning); a cue not
# among the text's candidates cannot match it and is not searched.
_TEXT_KEYS = tuple(dict.fromkeys((c.side, c.case_sensitive) for c in _SEARCHED_CUES))
_SCAN_MEMBERS = {
    key: tuple(i for i, c in enumerate(_SEARCHED_CUES) if (c.side, c.case_sensitive) == key)
    for key in _TEXT_KEYS
}
"""The index in :data:`_SEARCHED_CUES` of each member of each text's set."""
_SCAN_SETS = {
    key: PatternSet([_SEARCHED_CUES[i].pattern for i in members])
    for key, members in _SCAN_MEMBERS.items()
}


def _scanned_cues(texts: dict[str, str], lowered: dict[str, str]) -> list[Cue] | None:
    """The searched cues that may match, in :data:`CUES` order, from one scan of each text
    (``None`` when the scanner is off: search every cue)."""
    chosen: list[int] = []
    for (side, case_sensitive), members in _SCAN_MEMBERS.items():
        text = (texts if case_sensitive else lowered)[side]
        may_match = _SCAN_SETS[side, case_sensitive].candidates(text)
        if may_match is None:
            return None
        chosen.extend(members[i] for i in may_match)
    return [_SEARCHED_CUES[i] for i in sorted(chosen)]


def _gated_hits(texts: dict[str, str], lowered: dict[str, str]) -> list[tuple[Cue, str]]:
    """Every searched cue that fires, each searched behind its literal gate or word keys
    (processors.regex_gates): the path without the scanner."""
    hits: list[tuple[Cue, str]] = []
    word_keys: dict[tuple[str, bool], Keys] = {}  # text_keys per searched text
    for cue in _SEARCHED_CUES:
        text = (texts if cue.case_sensitive else lowered)[cue.side]
        keys = cue.keys
        if keys is not None:  # processors.regex_gates.keyed_search, inlined (hot loop)
            known = word_keys.get((cue.side, cue.case_sensitive))
            if known is None:
                known = word_keys[cue.side, cue.case_sensitive] = text_keys(text)
            present = keys.intersection(known)
            if not present:
                continue  # no word of the text begins like a match: the pattern cannot match
            starts = cue.starts
            assert starts is not None
            m = search_at(cue.pattern, [s for k in present for s in starts[k]], text)
        elif cue.leads is not None:
            m = search_at(cue.pattern, cue.leads, text)
        else:
            gate = cue.gate
            if gate is not None:  # processors.regex_gates.gated_search, inlined (hot loop)
                for literal in gate:
                    if literal in text:
                        break
                else:
                    continue  # no gate literal in the text: the pattern cannot match
            m = cue.pattern.search(text)
        if m is not None:
            hits.append((cue, _shown(m)))
    return hits


def _shown(match: re.Match[str]) -> str:
    """The matched text as a hit shows it: whitespace runs collapsed, at most 60 characters."""
    return " ".join(match.group(0).split())[:60]


def find_cues(request: str, response: str) -> list[tuple[Cue, str]]:
    """All cues that fire, as ``(cue, matched text)`` in :data:`CUES` order.

    The ``named_entity`` family is computed by :func:`_named_entities`, and counts only when
    no private-person-data cue fired (a named figure asked about is evidence of a public or
    fictional person; "my coworker's address" is not).
    """
    texts = {"request": request, "response": response}
    lowered = {"request": request.lower(), "response": response.lower()}
    scanned = _scanned_cues(texts, lowered)
    if scanned is None:
        hits = _gated_hits(texts, lowered)
    else:  # the scan ruled the other cues out: search these directly
        hits = []
        for cue in scanned:
            m = cue.pattern.search((texts if cue.case_sensitive else lowered)[cue.side])
            if m is not None:
                hits.append((cue, _shown(m)))
    families = {c.family for c, _ in hits}
    if "private_data" not in families and "private_relation" not in families:
        names = _named_entities(request)
        ne_cue = _NAMED_ENTITY_CUE
        if names and ne_cue is not None:
            hits.append((ne_cue, " ".join(names[:3])))
    return hits


def family_weights(hits: Sequence[tuple[Cue, str]]) -> dict[str, float]:
    """The logit contribution per cue family: the largest-|weight| hit of each family."""
    out: dict[str, float] = {}
    for cue, _ in hits:
        prev = out.get(cue.family)
        if prev is None or abs(cue.weight) > abs(prev):
            out[cue.family] = cue.weight
    return out


HARM_FAMILIES = frozenset(
    {
        "operational",
        "human_target",
        "private_data",
        "private_relation",
        "evasion",
        "glorify",
        "discrimination",
        "protected_group",
        "self_harm",
        "personal_data",
        "reproduction",
        "deception",
        "explicit",
        "abuse",
        "crime_act",
        "mass_harm",
    }
)
"""Request-side cue families that are evidence of harmful intent (see ``SAFETY_FIRST_LOGIT``)."""
