"""PII redaction, applied before any text is stored or sent to a model.

Pure and deterministic: the standard library's :mod:`re` and :mod:`ipaddress`, no I/O; a
one-pass multi-pattern scan (:mod:`processors.scanning`) only skips detector patterns that
cannot match a text.

Kinds (the names of ``RedactionKind`` below) and their placeholders:

============  ===============  ==============================================================
kind          placeholder      what is detected
============  ===============  ==============================================================
``email``     ``<EMAIL>``      ``local@domain.tld`` (RFC 5322 "dot-atom" subset, Unicode
                               letters allowed).
``phone``     ``<PHONE>``      NANP numbers written with separators or parentheses
                               (``(415) 555-0123``, ``415.555.0123``, ``+1 415 555 0123``,
                               ``1-800-555-0199``, with ``ext. 12``); international numbers
                               with a ``+`` country code (E.164: 8-15 digits, ITU-T E.164);
                               trunk-prefix national numbers (``020 7946 0958``,
                               ``07700 900123``, ``01 23 45 67 89``: 10-12 digits); and bare
                               digit runs (``4155550123``, ``555-0123``) only when a phone
                               word (call, phone, tel, mobile, text, WhatsApp, ...) precedes
                               them on the same line.
``card``      ``<CARD>``       13-19 digits, in one block or grouped as cards are printed
                               (4-4-4-4, 4-4-4-4-3, 4-6-5, 4-6-4; single spaces or dashes),
                               that pass the Luhn check (ISO/IEC 7812-1 Annex B);
                               all-one-digit runs and numbers labelled ISBN are excluded.
``gov_id``    ``<GOV_ID>``     US SSN ``AAA-GG-SSSS`` under the SSA's rules (area not 000,
                               666 or 900-999; group not 00; serial not 0000; SSA POMS
                               RM 10201.035), bare 9 digits only after "SSN"/"social
                               security"; US ITIN (9XX-[50-65|70-88|90-92|94-99]-XXXX, IRS);
                               UK National Insurance numbers (HMRC NIM39110 prefix rules:
                               first letter not D F I Q U V, second not D F I O Q U V,
                               prefixes BG GB KN NK NT TN ZZ unallocated; suffix A-D; upper
                               case, spaced or not; the HMRC specimen prefix QQ is redacted
                               too); Spanish DNI/NIE with
                               a valid mod-23 check letter (Real Decreto 1553/2005); Canadian
                               SIN (Luhn-valid, 3-3-3) only after "SIN"/"social insurance".
``ip``        ``<IP>``         IPv4 dotted quads and IPv6 addresses accepted by
                               :mod:`ipaddress` (so ``999.1.1.1`` or ``01.2.3.4`` are not
                               redacted).
``address``   ``<ADDRESS>``    street addresses: house number + capitalised street name +
                               street suffix (Street/St/Avenue/Ave/Road/Rd/Lane/Blvd/Drive/
                               ...), optionally a direction, a unit (Apt/Suite/Unit/Flat/#)
                               and a tail "City, ST 12345", "City ZIP" or "City POSTCODE"
                               (UK). Lower-case street names are not detected.
============  ===============  ==============================================================

Decisions on look-alikes: dates, times, prices, percentages, ordinary numbers and version
strings are never redacted. A dotted quad glued to a letter (``v1.2.3.4``) or preceded by a
version word (``version``, ``ver``, ``release``, ``build``, ``firmware``, ``rev``) is a
version string, not an IP; a bare ``1.2.3.4`` *is* a valid IPv4 address and is redacted
(recall first: an address left in clear is the worse error). A Luhn-invalid 16-digit number
is left intact and is not re-read as a phone number: phone and gov-id patterns never match
inside a longer digit run, and phone/gov-id candidates overlapping a card are dropped.

Overlaps between kinds are resolved by taking the earliest span, then the longest. Kinds
that are disabled are still detected (so that, for instance, a card number is not re-typed
as a phone when ``card`` is off) but left intact.

Redaction is idempotent: placeholders contain no detectable PII, and :meth:`Redactor.find`
re-scans its own output until nothing new is found (at most :data:`MAX_PASSES` passes), so
``redact(redact(t).text).text == redact(t).text``.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from processors.scanning import Candidates, PatternSet
from schemas.events import RefusalEvent

RedactionKind = Literal["email", "phone", "card", "gov_id", "ip", "address"]
#: Every kind, in the order they are listed (the default of the setting ``redaction_kinds``).
ALL_REDACTION_KINDS: tuple[RedactionKind, ...] = (
    "email",
    "phone",
    "card",
    "gov_id",
    "ip",
    "address",
)

PLACEHOLDERS: dict[str, str] = {
    "email": "<EMAIL>",
    "phone": "<PHONE>",
    "card": "<CARD>",
    "gov_id": "<GOV_ID>",
    "ip": "<IP>",
    "address": "<ADDRESS>",
}
MAX_PASSES = 4

# Tie-break when two candidates start at the same offset and have the same length.
_PRIORITY = {"card": 0, "gov_id": 1, "email": 2, "ip": 3, "phone": 4, "address": 5}


@dataclass(frozen=True)
class PiiSpan:
    """One detected PII value: ``text[start:end]`` is of kind ``kind`` (a ``RedactionKind``)."""

    start: int
    end: int
    kind: str


@dataclass(frozen=True)
class RedactionResult:
    """The redacted text and how many values of each kind were replaced.

    ``counts`` maps kind -> number of placeholders inserted; kinds with 0 are absent.
    """

    text: str
    counts: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------- checksums


def luhn_valid(number: str) -> bool:
    """Luhn (mod 10) check of the digits in ``number`` (ISO/IEC 7812-1 Annex B).

    Non-digit characters are ignored; an input without digits is invalid. Never raises.
    """
    digits = [int(c) for c in number if c.isdigit()]
    if not digits:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def _dni_valid(value: str) -> bool:
    """Spanish DNI/NIE check letter: the number mod 23 indexes ``TRWAGMYFPDXBNJZSQVHLCKE``."""
    v = value.upper().replace("-", "").replace(" ", "")
    if v[0] in "XYZ":
        v = str("XYZ".index(v[0])) + v[1:]
    number, letter = v[:-1], v[-1]
    return number.isdigit() and _DNI_LETTERS[int(number) % 23] == letter


# --------------------------------------------------------------------------- patterns

# A numeric candidate must not be glued to a word or continue a longer digit run.
_LB = r"(?<![\w+])(?<!\d[ .-])"
_LA = r"(?![\w])(?![ .-]?\d)"

_EMAIL_RE = re.compile(
    r"(?<![\w.%+-])[\w](?:[\w.%+-]{0,62}[\w%+-])?"
    r"@(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.)+[^\W\d_]{2,24}(?![\w-])"
)

_EXT = r"(?:[ \t]*(?:x|ext\.?|extension)[ \t]*\d{1,6})?"
_PHONE_RES: tuple[re.Pattern[str], ...] = (
    # NANP with separators or parentheses, optional +1 / 1 prefix.
    re.compile(_LB + r"(?:\+?1[ .-]?)?(?:\(\d{3}\)[ .-]?|\d{3}[ ./-])\d{3}[ .-]\d{4}" + _EXT + _LA),
    # International: +CC then groups separated by single spaces/dots/dashes, or compact.
    re.compile(
        r"(?<![\w+])\+[1-9]\d{0,2}(?:[ .-]?\(\d{1,4}\))?[ .-]?\d{1,12}(?:[ .-]\d{1,8}){0,6}"
        + _EXT
        + _LA
    ),
    # Trunk-prefix national formats (UK, DE, ...): 0AAAA NNNNNN, (0AA) NNNN NNNN.
    re.compile(_LB + r"(?:\(0\d{1,4}\)|0\d{2,4})(?:[ -]\d{2,8}){1,2}" + _EXT + _LA),
    # French style 0X XX XX XX XX.
    re.compile(_LB + r"0[1-9](?:[ .]\d{2}){4}" + _LA),
)
# Bare or lightly formatted numbers: phones only after a phone word on the same line.
_BARE_PHONE_RE = re.compile(_LB + r"(?:\+?\d{10,15}|\d{3}[ .-]?\d{4}|\d{7})" + _LA)
_PHONE_CONTEXT_RE = re.compile(
    r"(?i)(?:\b(?:phone|tel|telephone|mobile|cell|cellphone|call|calling|ring|text|sms|"
    r"whatsapp|signal|fax|contact|reach|dial|landline|(?:my|his|her|their|your|our) "
    r"(?:\w+ )?number|number is)\b|\bph\.?|\btel\.?|\bmob\.?)[^\n]{0,40}$"
)

_CARD_RUN_RE = re.compile(r"(?<![\w.,+])(?<!\d[ -])\d++(?:[ -]\d++)*+(?![\w])")

_SSN_RE = re.compile(_LB + r"(?!000|666|9\d\d)\d{3}([- ])(?!00)\d{2}\1(?!0000)\d{4}" + _LA)
_ITIN_RE = re.compile(_LB + r"9\d{2}([- ])(?:5\d|6[0-5]|7\d|8[0-8]|9[0-24-9])\1\d{4}" + _LA)
_BARE_SSN_RE = re.compile(_LB + r"(?!000|666|9\d\d)\d{3}(?!00)\d{2}(?!0000)\d{4}" + _LA)
_SSN_CONTEXT_RE = re.compile(
    r"(?i)\b(?:ssn|ss#|social security(?: number| no\.?| #)?|itin|tax id(?:entification)?"
    r"(?: number)?|tin)\b[^\n]{0,30}$"
)
_SIN_RE = re.compile(_LB + r"\d{3}([ -]?)\d{3}\1\d{3}" + _LA)
_SIN_CONTEXT_RE = re.compile(
    r"(?:\bSIN\b|(?i:\bsocial insurance\b|\bnum[ée]ro d'assurance sociale\b|\bNAS\b))"
    r"[^\n]{0,30}$"
)
_NINO_RE = re.compile(
    r"(?<![\w])(?:(?!BG|GB|KN|NK|NT|TN|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]|QQ)"
    r"(?: ?\d{2}){3} ?[A-D](?![\w])"
)
_DNI_RE = re.compile(r"(?<![\w-])(?:\d{8}|[XYZxyz]-?\d{7})(?:[ -]?[A-Z]|[a-z])(?![\w])")

_IPV4_RE = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)")
_VERSION_CONTEXT_RE = re.compile(
    r"(?i)\b(?:v|ver|version|release|build|firmware|rev|revision|patch|kernel|api)\.?\s*$"
)
_IPV6_RE = re.compile(
    r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{1,4})?"
    r"(?![\w:]|\.\d)"
)

_STREET_SUFFIX = (
    r"(?:Street|St|Avenue|Ave|Av|Road|Rd|Lane|Ln|Boulevard|Blvd|Drive|Dr|Court|Ct|Place|Pl|"
    r"Terrace|Terr?|Way|Circle|Cir|Parkway|Pkwy|Highway|Hwy|Square|Sq|Trail|Trl|Crescent|"
    r"Cres|Close|Mews|Row|Alley|Plaza|Loop|Walk|Grove|Gardens|Gdns|Broadway|Turnpike|Pike|"
    r"Expressway|Freeway)"
)
_US_STATE = (
    r"(?:A[KLRZ]|C[AOT]|D[CE]|FL|GA|HI|I[ADLN]|K[SY]|LA|M[ADEINOST]|N[CDEHJMVY]|O[HKR]|PA|PR|"
    r"RI|S[CD]|T[NX]|UT|V[AIT]|W[AIVY]|D\.C\.)"
)
_ZIP = r"\d{5}(?:-\d{4})?"
_UK_POSTCODE = r"[A-Z]{1,2}\d[A-Z\d]?[ \t]?\d[A-Z]{2}"
_CITY = r"[A-Z][a-zA-Z'.-]+(?:[ \t][A-Z][a-zA-Z'.-]+){0,2}"
_ADDRESS_RE = re.compile(
    r"(?<![\w$£€.,/-])(?P<num>\d{1,6}[A-Za-z]?(?:-\d{1,6})?)[ \t]+"
    r"(?:(?:[A-Z][a-zA-Z'.-]*|\d{1,3}(?:st|nd|rd|th))[ \t]+){1,4}?"
    r"(?i:" + _STREET_SUFFIX + r")\b\.?"
    r"(?:[ \t]+(?:N|S|E|W|NE|NW|SE|SW)\b\.?)?"
    r"(?:,?[ \t]+(?i:apt|apartment|suite|ste|unit|flat|fl|floor|room|rm|#)\.?[ \t]*#?"
    r"[A-Za-z0-9-]{1,6}\b)?"
    r"(?:,?[ \t]+(?:" + _CITY + r",?[ \t]+)?"
    r"(?:" + _US_STATE + r"(?:[ \t]+" + _ZIP + r")?|" + _ZIP + r"|" + _UK_POSTCODE + r")"
    r"(?![\w]))?"
)
_YEAR_CONTEXT_RE = re.compile(r"(?i)\b(?:in|since|by|from|until|of|year|circa|before|after)\s*$")


# --------------------------------------------------------------------------- detectors

#: Every detector pattern a detector runs over the whole text, in one multi-pattern database
#: (processors.scanning): one scan of a text says which of them may match it, and only those
#: run (``finditer`` of a pattern that cannot match yields nothing: the spans are the same).
_DETECTOR_PATTERNS: tuple[re.Pattern[str], ...] = (
    _CARD_RUN_RE,
    _SSN_RE,
    _ITIN_RE,
    _NINO_RE,
    _DNI_RE,
    _BARE_SSN_RE,
    _SIN_RE,
    _EMAIL_RE,
    _IPV4_RE,
    _IPV6_RE,
    *_PHONE_RES,
    _BARE_PHONE_RE,
    _ADDRESS_RE,
)
_SCAN = PatternSet(_DETECTOR_PATTERNS)


def _finditer(pattern: re.Pattern[str], text: str, may: Candidates) -> Iterator[re.Match[str]]:
    """``pattern.finditer(text)``, or nothing when the scan ``may`` rules a match out."""
    if may is not None and _SCAN.slot(pattern) not in may:
        return iter(())
    return pattern.finditer(text)


def _digits(s: str) -> int:
    return sum(c.isdigit() for c in s)


def _before(text: str, start: int, width: int = 60) -> str:
    line_start = text.rfind("\n", 0, start) + 1
    return text[max(line_start, start - width) : start]


def _emails(text: str, may: Candidates = None) -> Iterator[PiiSpan]:
    for m in _finditer(_EMAIL_RE, text, may):
        yield PiiSpan(m.start(), m.end(), "email")


def _phones(text: str, may: Candidates = None) -> Iterator[PiiSpan]:
    for pattern in _PHONE_RES:
        for m in _finditer(pattern, text, may):
            value = m.group()
            core = re.sub(r"(?i)[ \t]*(?:x|ext\.?|extension)[ \t]*\d+$", "", value)
            n = _digits(core.replace("(0)", ""))
            if value.startswith("+"):
                if 8 <= n <= 15:
                    yield PiiSpan(m.start(), m.end(), "phone")
            elif core.lstrip("(").startswith("0") and pattern is not _PHONE_RES[0]:
                if 10 <= n <= 12:
                    yield PiiSpan(m.start(), m.end(), "phone")
            elif 10 <= n <= 11:
                yield PiiSpan(m.start(), m.end(), "phone")
    for m in _finditer(_BARE_PHONE_RE, text, may):
        if _PHONE_CONTEXT_RE.search(_before(text, m.start())):
            yield PiiSpan(m.start(), m.end(), "phone")


def _card_like(groups: list[int]) -> bool:
    """Digit-group lengths as cards are printed: one block, blocks of 4 (the last may be
    shorter: 16/19-digit cards), or 4-6-5 / 4-6-4 (Amex, Diners)."""
    if len(groups) == 1:
        return True
    if all(g == 4 for g in groups[:-1]) and 1 <= groups[-1] <= 4:
        return True
    return groups in ([4, 6, 5], [4, 6, 4])


def _cards(text: str, may: Candidates = None) -> Iterator[PiiSpan]:
    for m in _finditer(_CARD_RUN_RE, text, may):
        if _digits(m.group()) < 13:
            continue
        if re.search(r"(?i)\bisbn(?:-1[03])?:?\s*$", _before(text, m.start(), 12)):
            continue
        groups = [(g.start(), g.end()) for g in re.finditer(r"\d+", m.group())]
        i = 0
        while i < len(groups):
            # windows of whole groups starting at group i, longest first, at most 19 digits
            ends: list[int] = []
            n = 0
            for j in range(i, len(groups)):
                n += groups[j][1] - groups[j][0]
                if n > 19:
                    break
                if n >= 13:
                    ends.append(j)
            found = None
            for j in reversed(ends):
                s, e = m.start() + groups[i][0], m.start() + groups[j][1]
                value = text[s:e]
                if (
                    _card_like([b - a for a, b in groups[i : j + 1]])
                    and luhn_valid(value)
                    and len(set(re.sub(r"\D", "", value))) > 1
                ):
                    found = (s, e, j)
                    break
            if found is None:
                i += 1
                continue
            yield PiiSpan(found[0], found[1], "card")
            i = found[2] + 1


def _gov_ids(text: str, may: Candidates = None) -> Iterator[PiiSpan]:
    for pattern in (_SSN_RE, _ITIN_RE, _NINO_RE):
        for m in _finditer(pattern, text, may):
            yield PiiSpan(m.start(), m.end(), "gov_id")
    for m in _finditer(_DNI_RE, text, may):
        if _dni_valid(m.group()):
            yield PiiSpan(m.start(), m.end(), "gov_id")
    for m in _finditer(_BARE_SSN_RE, text, may):
        if _SSN_CONTEXT_RE.search(_before(text, m.start())):
            yield PiiSpan(m.start(), m.end(), "gov_id")
    for m in _finditer(_SIN_RE, text, may):
        if luhn_valid(m.group()) and _SIN_CONTEXT_RE.search(_before(text, m.start())):
            yield PiiSpan(m.start(), m.end(), "gov_id")


def _ips(text: str, may: Candidates = None) -> Iterator[PiiSpan]:
    for m in _finditer(_IPV4_RE, text, may):
        if _VERSION_CONTEXT_RE.search(_before(text, m.start(), 20)):
            continue
        try:
            ipaddress.IPv4Address(m.group())
        except ValueError:
            continue
        yield PiiSpan(m.start(), m.end(), "ip")
    for m in _finditer(_IPV6_RE, text, may):
        value = m.group()
        if not any(c.isdigit() for c in value):
            continue
        try:
            ipaddress.IPv6Address(value)
        except ValueError:
            continue
        yield PiiSpan(m.start(), m.end(), "ip")


def _addresses(text: str, may: Candidates = None) -> Iterator[PiiSpan]:
    for m in _finditer(_ADDRESS_RE, text, may):
        num = m.group("num")
        if (
            len(num) == 4
            and num.isdigit()
            and 1800 <= int(num) <= 2099
            and _YEAR_CONTEXT_RE.search(_before(text, m.start(), 20))
        ):
            continue
        end = m.end()
        while end > m.start() and text[end - 1] in " \t,":
            end -= 1
        yield PiiSpan(m.start(), end, "address")


_DETECTORS = (_cards, _gov_ids, _emails, _ips, _phones, _addresses)

# Cheap gates, derived from the patterns: a detector can only yield a span when the text
# holds at least this many ``\d`` characters (``re``'s Unicode decimal digits), or an ``@``.
# cards: >= 13 digits (the run check); phones: >= 7 (bare \d{7}; every other form yields
# only with >= 8); gov ids: >= 6 (NINO's three pairs; SSN/ITIN/SIN 9, DNI/NIE >= 7);
# IPs: >= 1 (IPv6 needs a digit, IPv4 four); addresses: >= 1 (the house number); e-mails
# need "@" and no digit. Skipping a detector whose gate fails changes no output.
_DIGIT_RE = re.compile(r"\d")
_MIN_DIGITS = {_cards: 13, _gov_ids: 6, _ips: 1, _phones: 7, _addresses: 1}


def _candidates(text: str) -> list[PiiSpan]:
    """Every detector's spans in ``text``, skipping detectors whose gate rules a match out."""
    has_at = "@" in text
    digits = len(_DIGIT_RE.findall(text)) if _DIGIT_RE.search(text) else 0
    if not digits and not has_at:
        return []
    may = _SCAN.candidates(text)
    if may is not None and not may:
        return []
    spans: list[PiiSpan] = []
    for detect in _DETECTORS:
        if has_at if detect is _emails else digits >= _MIN_DIGITS[detect]:
            spans.extend(detect(text, may))
    return spans


def _resolve(candidates: list[PiiSpan]) -> list[PiiSpan]:
    """Drop phone/gov-id candidates overlapping a card, then keep earliest-then-longest."""
    cards = [c for c in candidates if c.kind == "card"]
    kept = [
        c
        for c in candidates
        if c.kind not in ("phone", "gov_id")
        or not any(c.start < k.end and k.start < c.end for k in cards)
    ]
    kept.sort(key=lambda s: (s.start, -(s.end - s.start), _PRIORITY[s.kind]))
    chosen: list[PiiSpan] = []
    last_end = -1
    for span in kept:
        if span.start >= last_end:
            chosen.append(span)
            last_end = span.end
    return chosen


# --------------------------------------------------------------------------- public API


class Redactor:
    """Replaces PII in text with typed placeholders (``<EMAIL>``, ``<PHONE>``, ...).

    ``kinds`` selects which kinds are replaced (any iterable of ``RedactionKind`` names;
    default: all six). Raises ``ValueError`` naming the offending value when a kind is
    unknown. Instances are immutable and thread-safe.
    """

    def __init__(self, kinds: Iterable[str] = ALL_REDACTION_KINDS) -> None:
        requested = tuple(kinds)
        unknown = sorted(set(requested) - set(ALL_REDACTION_KINDS))
        if unknown:
            raise ValueError(
                f"unknown redaction kind(s) {unknown}; expected any of {list(ALL_REDACTION_KINDS)}"
            )
        self._kinds = frozenset(requested)

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds this redactor replaces."""
        return self._kinds

    def _find_once(self, text: str) -> list[PiiSpan]:
        candidates = _candidates(text)
        if not candidates:
            return []
        return [s for s in _resolve(candidates) if s.kind in self._kinds]

    def find(self, text: str) -> list[PiiSpan]:
        """The PII spans :meth:`redact` replaces, in ``text``'s coordinates, sorted, disjoint.

        Re-scans the partly redacted text until a pass finds nothing (at most
        :data:`MAX_PASSES`), mapping later finds back to ``text``. Never raises.
        """
        first = self._find_once(text)
        if not first:  # the common case: no PII, nothing to map back
            return []
        found: list[PiiSpan] = []
        current = text
        origin: list[int] = list(range(len(text)))  # current index -> text index, -1 = placeholder
        for pass_no in range(MAX_PASSES):
            # a later pass never re-reads placeholder characters (origin -1) as PII
            spans = [
                s
                for s in (self._find_once(current) if pass_no else first)
                if all(origin[k] >= 0 for k in range(s.start, s.end))
            ]
            if not spans:
                break
            pieces: list[str] = []
            new_origin: list[int] = []
            pos = 0
            for s in spans:
                found.append(PiiSpan(origin[s.start], origin[s.end - 1] + 1, s.kind))
                pieces.append(current[pos : s.start])
                new_origin.extend(origin[pos : s.start])
                pieces.append(PLACEHOLDERS[s.kind])
                new_origin.extend([-1] * len(PLACEHOLDERS[s.kind]))
                pos = s.end
            pieces.append(current[pos:])
            new_origin.extend(origin[pos:])
            current, origin = "".join(pieces), new_origin
        found.sort(key=lambda s: s.start)
        return found

    def redact(self, text: str) -> RedactionResult:
        """Replace every enabled PII value in ``text`` with its placeholder.

        Returns a :class:`RedactionResult`; text without PII comes back unchanged with empty
        ``counts``. Idempotent. Never raises.
        """
        spans = self.find(text)
        if not spans:
            return RedactionResult(text, {})
        pieces: list[str] = []
        pos = 0
        for s in spans:
            pieces.append(text[pos : s.start])
            pieces.append(PLACEHOLDERS[s.kind])
            pos = s.end
        pieces.append(text[pos:])
        return RedactionResult("".join(pieces), dict(Counter(s.kind for s in spans)))


def redact_event(event: RefusalEvent, redactor: Redactor) -> tuple[RefusalEvent, dict[str, int]]:
    """Redact ``event.request``, ``event.response`` and every value of ``event.attributes``.

    Returns ``(copy, counts)``: a copy made with ``model_copy(update=...)`` (the input is not
    modified; attribute keys and the other fields are kept as they are), or ``event`` itself
    (frozen) when nothing was replaced, and the per-kind replacement counts summed over all
    redacted fields (kinds with 0 absent). Never raises.
    """
    totals: Counter[str] = Counter()

    def run(text: str) -> str:
        result = redactor.redact(text)
        if result.counts:  # most texts hold no PII: skip the Counter update
            totals.update(result.counts)
        return result.text

    update = {
        "request": run(event.request),
        "response": run(event.response),
        "attributes": {key: run(value) for key, value in event.attributes.items()},
    }
    if not totals:  # nothing replaced (most events): the frozen event itself, not a copy
        return event, {}
    return event.model_copy(update=update), dict(totals)


def redact_bytes(raw: bytes, redactor: Redactor) -> bytes:
    """Redact PII in raw record bytes, keeping every byte that is not part of a match.

    Invalid UTF-8 survives unchanged (decoded with ``surrogateescape`` and encoded back), so
    a dead letter keeps its original defect but not the personal data in it.
    """
    text = raw.decode("utf-8", errors="surrogateescape")
    return redactor.redact(text).text.encode("utf-8", errors="surrogateescape")
