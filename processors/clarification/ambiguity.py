"""What is ambiguous about a request: who is asking, whose data, what purpose, what scope,
what authorisation (issue 12's kinds of ambiguity).

:func:`find_ambiguities` reads the request only, deterministically, and returns the kinds
found, each with a ``span``: words of the request itself (lower-cased), given to the
``openai`` question engine's prompt as context (the ``local`` engine quotes nothing, and
the circumvention check rejects a question with a harm term, issue 23). Sources of the word lists:

- whose data: the audit engine's own cue families for a private person's data, personal
  data and a named real relation (``processors.engines.local_cues.find_cues``);
- authorisation: an access verb followed (within three words) by a thing someone owns or
  runs (an account, a network, a device, a building, ...);
- who is asking: terms whose right answer depends on the asker's role (medication and
  dosage, security testing, weapons, legal matters);
- scope: a request of at most ``SHORT_REQUEST_WORDS`` words, or one that points at
  something it does not name ("this", "it", "something", ...);
- purpose: always (every gray-zone refusal turns on what the answer is for).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from processors.engines.local_cues import find_cues
from processors.stopwords import english_stop_words


class AmbiguityKind(StrEnum):
    """A kind of ambiguity a clarification question may resolve."""

    whose_data = "whose_data"
    authorisation = "authorisation"
    who_is_asking = "who_is_asking"
    scope = "scope"
    purpose = "purpose"


KIND_DESCRIPTIONS: dict[AmbiguityKind, str] = {
    AmbiguityKind.whose_data: "whose personal data the request concerns",
    AmbiguityKind.authorisation: "whether the requester is responsible for what they want to "
    "access or change",
    AmbiguityKind.who_is_asking: "who is asking: the role or setting the answer depends on",
    AmbiguityKind.scope: "what exactly the request covers",
    AmbiguityKind.purpose: "what the answer is for",
}

SHORT_REQUEST_WORDS = 6
"""A request of at most this many words is taken as underspecified (scope ambiguity); CoCoNot's
underspecified requests are mostly this short (Brahman et al., NeurIPS 2024, Table 1)."""
MAX_SPAN_WORDS = 4
"""A span quoted from the request has at most this many words."""

_DATA_FAMILIES = ("private_data", "personal_data", "private_relation")

_ACCESS = re.compile(
    r"\b(?:access\w*|get(?:ting)? into|break(?:ing)? into|log(?:ging)? ?in(?:to)?|unlock\w*|"
    r"bypass\w*|recover\w*|reset\w*|monitor\w*|track\w*|spy(?:ing)? on|read(?:ing)?|"
    r"open(?:ing)?|hack\w*|crack\w*|enter\w*|scan\w*|take over|control\w*|disable\w*)\s+"
    r"(?:(?:a|an|the|my|his|her|their|our|your|this|that|someone's|somebody's|\w+'s)\s+)?"
    r"(?:[\w']+\s+){0,2}?"
    r"(?P<thing>accounts?|passwords?|network|wi-?fi|router|servers?|systems?|databases?|"
    r"websites?|site|devices?|phones?|laptops?|computers?|emails?|inbox|cameras?|cars?|"
    r"house|home|apartment|flat|building|office|doors?|locks?|safe|files?|records?|"
    r"messages?|texts?|chats?|profiles?|cloud|icloud|drive)\b"
)
_ROLE_DEPENDENT = re.compile(
    r"\b(?P<term>doses?|dosages?|overdos\w*|medications?|medicines?|prescriptions?|pills?|"
    r"opioids?|sedatives?|symptoms?|diagnos\w+|treatments?|patients?|"
    r"vulnerabilit(?:y|ies)|exploits?|penetration test\w*|pen ?test\w*|malware|forensics?|"
    r"weapons?|firearms?|guns?|ammunition|explosives?|chemicals?|toxins?|lock ?pick\w*|"
    r"surveillance|interrogat\w+|lawsuits?|legal|court|custody|evidence|security)\b"
)
_VAGUE = re.compile(
    r"\b(?P<term>this|that|it|these|those|something|stuff|things?|someone|somebody|"
    r"anything|everything|the one|etc)\b"
)
_WORD = re.compile(r"\w[\w'\-]*")
_REQUEST_VERBS = frozenset(
    {
        "tell", "write", "give", "make", "explain", "show", "describe", "list", "provide",
        "help", "need", "want", "know", "find", "get", "create", "generate", "please", "like",
        "does", "did", "can", "could", "would", "should", "way", "best", "possible", "im",
        "i'm", "let", "lets", "let's", "tips", "ways", "using", "use", "used",
    }
)  # fmt: skip
_STOP = english_stop_words() | _REQUEST_VERBS


@dataclass(frozen=True)
class Ambiguity:
    """One ambiguity found: its ``kind`` and ``span``, words of the request (lower-cased,
    at most ``MAX_SPAN_WORDS``), or "" when the kind has no span of its own."""

    kind: AmbiguityKind
    span: str


def _short(text: str) -> str:
    return " ".join(text.lower().split()[:MAX_SPAN_WORDS])


def focus_phrase(request: str) -> str:
    """The request's topic: its longest run of consecutive content words (at most
    ``MAX_SPAN_WORDS``; on a tie the last, where an English request puts its object),
    lower-cased; "" when it has none."""
    best: list[str] = []
    run: list[str] = []
    for word in [*_WORD.findall(request), ""]:
        lowered = word.lower()
        if lowered and lowered not in _STOP and not lowered.isdigit():
            run.append(lowered)
            continue
        if run and len(run[:MAX_SPAN_WORDS]) >= len(best):
            best = run[:MAX_SPAN_WORDS]
        run = []
    return " ".join(best)


def find_ambiguities(request: str) -> list[Ambiguity]:
    """The ambiguities of ``request``, in the order a question set should address them:
    whose data, authorisation, who is asking, scope, purpose (always last and always there).
    Each kind appears at most once. Pure and deterministic."""
    found: list[Ambiguity] = []
    lowered = request.lower()
    data_hits = [m for c, m in find_cues(request, "") if c.family in _DATA_FAMILIES]
    if data_hits:
        found.append(Ambiguity(AmbiguityKind.whose_data, _short(data_hits[0])))
    access = _ACCESS.search(lowered)
    if access is not None:
        found.append(Ambiguity(AmbiguityKind.authorisation, access.group("thing")))
    role = _ROLE_DEPENDENT.search(lowered)
    if role is not None:
        found.append(Ambiguity(AmbiguityKind.who_is_asking, role.group("term")))
    focus = focus_phrase(request)
    if len(_WORD.findall(request)) <= SHORT_REQUEST_WORDS or _VAGUE.search(lowered):
        found.append(Ambiguity(AmbiguityKind.scope, focus))
    found.append(Ambiguity(AmbiguityKind.purpose, focus))
    return found


def describe_ambiguities(ambiguities: list[Ambiguity]) -> str:
    """One line per ambiguity, for the question prompt's AMBIGUITY_DESCRIPTION."""
    lines = []
    for a in ambiguities:
        about = f' (the request says "{a.span}")' if a.span else ""
        lines.append(f"- {a.kind.value}: {KIND_DESCRIPTIONS[a.kind]}{about}")
    return "\n".join(lines)
