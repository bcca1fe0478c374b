"""One pass over a text for many regular expressions: which of them *can* match it.

The hot path searches dozens of Python regular expressions over the same text (the
redaction detectors, the pre-filter's cues, the local engine's cues). :class:`PatternSet`
compiles a set of them into one RE2 set (Google's linear-time engine, PyPI ``google-re2``,
``RE2::Set``: one DFA pass reports every member that matches) and
:meth:`PatternSet.candidates` scans a text once, returning the indices of the patterns that
may match it. The caller then runs only those patterns with :mod:`re`, so every span, group
and decision still comes from the same ``re`` call as before.

Design and guarantee -- the set over-reports and never misses:

* RE2 lacks Python's look-arounds, back-references, possessive and atomic forms, and its
  ``\\w``/``\\b``/``\\s``/case folding differ from Python's on Unicode text. So no
  pattern is handed to it as written: :func:`prefilter_expression` rewrites the pattern's
  ``re`` syntax tree into a byte-level expression that accepts a *superset* of what the
  pattern matches, over a byte form of the text:

  - the scanned text is the text with every non-ASCII character replaced by the one byte
    ``0x80`` (:func:`scan_bytes`: one byte per character, ASCII kept as it is);
  - an ASCII character is its byte, a non-ASCII one is ``\\x80`` (under ``re.IGNORECASE``
    an ASCII letter is either case or ``\\x80``, since e.g. U+212A folds to ``k``, and a
    non-ASCII one any letter or ``\\x80``);
  - a character class, ``\\d``/``\\w``/``\\s``, ``.`` or a negated literal is the exact set
    of ASCII characters ``re`` accepts (read from ``re`` itself, letters closed under case
    when ``re.IGNORECASE`` is on; ``re.ASCII``'s own ``\\s``), plus ``\\x80`` whenever the
    class may hold a non-ASCII character; a negated class is every ASCII character the class
    surely lacks, plus ``\\x80``;
  - look-arounds, ``\\b``, ``\\B``, ``$``, ``\\Z`` and a multi-line ``^`` become nothing
    (always true); only a single-line ``^`` / ``\\A`` stays (start of the scanned text, as
    in ``re.search``);
  - a back-reference is any bytes; a conditional is either branch; atomic groups,
    possessive and lazy repeats are plain groups and greedy repeats;
  - a bound above :data:`MAX_BOUND` is dropped (``{m,n}`` -> ``{m,}``) and a minimum
    above it lowered to it.

  Each rewrite only adds accepted strings, so any text ``re`` finds a match in is one the
  expression finds a match in. RE2 runs them as written, in Latin-1 mode (a byte is a
  character).
* A pattern that cannot be rewritten (an unknown opcode), that RE2 rejects, or whose
  expression matches the empty text is *always* a candidate.
* The set also holds an empty expression (a sentinel that matches every text): when RE2
  gives up on a text (its DFA out of memory, :data:`MAX_MEM`) the sentinel is missing, and
  :meth:`PatternSet.candidates` says ``None`` (search every pattern), never "none match".
* Why RE2 and not Hyperscan (the issue named both): the ``hyperscan`` 0.9.1 wheel missed
  matches -- ``(?:is|a|can be?) (?: |inherently |a)?(?:su|ay)`` finds nothing in
  ``b" soulful sound is subjectivedepends"`` though ``is su`` is in it (found by the
  equivalence test) -- and took about a second per fifty patterns to build; RE2 found it,
  builds the same sets in a tenth of that and scans them as fast.
* A pattern set built with ``substrings=True`` drops ``^`` too: its expressions then match
  in a text wherever the pattern matches in any piece ``text[i:j]`` of it (what ``re``
  matched is a string the expression accepts, wherever it sits).
* Hence: ``i not in candidates(text)`` implies ``patterns[i].search(text) is None`` (and
  ``finditer`` yields nothing), and skipping those searches changes no output.

Without the engine (``re2`` not importable, or :func:`engine_disabled`), every
:meth:`PatternSet.candidates` call returns ``None`` ("no information: search every
pattern"), the callers take their plain ``re`` path, and the output is the same; the first
:class:`PatternSet` built says so once in the log. That plain path is the oracle of the
equivalence tests (tests/test_scanning.py).
"""

from __future__ import annotations

import codecs
import logging
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

try:  # Python 3.11+
    import re._constants as _c  # type: ignore[import-not-found,unused-ignore]
    import re._parser as _p  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - older Pythons
    import sre_constants as _c  # type: ignore[no-redef,unused-ignore]
    import sre_parse as _p  # type: ignore[no-redef,unused-ignore]

try:
    import re2 as _re2  # google-re2
except ImportError:  # pragma: no cover - the install (pyproject) ships it
    _re2 = None

log = logging.getLogger(__name__)

MAX_BOUND = 16
"""Repeat bounds above this are dropped (upper) or lowered to it (lower) in the expressions:
large counted repeats make the compiled set big and slow to build."""

MAX_MEM = 8 << 20
"""RE2's memory budget per set, bytes (RE2's default; mostly its DFA cache, which grows to
it as texts need states: over every text of ../shared/data and the tests, the seven sets
grew the process by about 9 MB, against about 90 MB with 64 MB, and no scan failed). When a
text needs more, the scan fails and :meth:`PatternSet.candidates` says ``None``."""

_NON_ASCII = 0x80
"""The byte every non-ASCII character of a scanned text becomes (:func:`scan_bytes`)."""
_ASCII = range(128)
_CATEGORY_RE = {
    _c.CATEGORY_DIGIT: re.compile(r"\d"),
    _c.CATEGORY_NOT_DIGIT: re.compile(r"\D"),
    _c.CATEGORY_SPACE: re.compile(r"\s"),
    _c.CATEGORY_NOT_SPACE: re.compile(r"\S"),
    _c.CATEGORY_WORD: re.compile(r"\w"),
    _c.CATEGORY_NOT_WORD: re.compile(r"\W"),
}
#: The ASCII members of each ``\d``, ``\D``, ``\s``, ``\S``, ``\w``, ``\W`` as ``re`` reads
#: a ``str`` pattern (read from ``re`` itself).
_CATEGORY_ASCII = {
    cat: frozenset(c for c in _ASCII if rx.match(chr(c))) for cat, rx in _CATEGORY_RE.items()
}
#: The same under ``re.ASCII`` (``\s`` then lacks U+001C..U+001F, so ``\S`` holds them).
_CATEGORY_ASCII_FLAG = {
    cat: frozenset(c for c in _ASCII if re.match(rx.pattern, chr(c), re.ASCII))
    for cat, rx in _CATEGORY_RE.items()
}
_LETTERS = frozenset(c for c in _ASCII if chr(c).isalpha())

_enabled = True
_fallback_logged = False


class Untranslatable(ValueError):
    """A pattern's syntax tree holds something :func:`prefilter_expression` cannot widen."""


def engine_available() -> bool:
    """Whether the RE2 engine is importable and not turned off (:func:`engine_disabled`)."""
    return _re2 is not None and _enabled


@contextmanager
def engine_disabled() -> Iterator[None]:
    """Within the block every :meth:`PatternSet.candidates` returns ``None``: the callers
    take their plain ``re`` path (the oracle of the equivalence tests). Not thread-safe."""
    global _enabled
    previous, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = previous


def _class(members: set[int] | frozenset[int], non_ascii: bool) -> str:
    """Byte expression for one character: an ASCII member, or (``non_ascii``) any non-ASCII
    character (the byte :data:`_NON_ASCII`)."""
    chosen = set(members) | ({_NON_ASCII} if non_ascii else set())
    if not chosen:
        raise Untranslatable("an empty character class")
    return "[" + "".join(f"\\x{c:02x}" for c in sorted(chosen)) + "]"


def _replace_non_ascii(error: UnicodeError) -> tuple[bytes, int]:
    if not isinstance(error, UnicodeEncodeError):  # pragma: no cover - encode only
        raise error
    return b"\x80" * (error.end - error.start), error.end


codecs.register_error("processors.scanning", _replace_non_ascii)


def scan_bytes(text: str) -> bytes:
    """``text`` as the database reads it: one byte per character, ASCII characters as they
    are, every other character (lone surrogates too) the byte ``0x80``."""
    return text.encode("ascii", "processors.scanning")


def _case_closed(members: set[int]) -> set[int]:
    return members | {ord(chr(c).swapcase()) for c in members if c in _LETTERS}


def _literal(code: int, flags: int) -> str:
    if flags & re.IGNORECASE:
        if code >= 128:  # may fold to an ASCII letter (U+212A KELVIN SIGN -> k)
            return _class(set(_LETTERS), True)
        if code in _LETTERS:
            return _class(_case_closed({code}), True)  # 's' ~ U+017F, 'k' ~ U+212A
    return f"\\x{code:02x}" if code < 128 else f"\\x{_NON_ASCII:02x}"


def _in(items: Any, flags: int) -> str:
    members: set[int] = set()
    non_ascii = False
    negate = False
    for op, av in items:
        if op is _c.NEGATE:
            negate = True
        elif op is _c.LITERAL:
            if av < 128:
                members.add(av)
            else:
                non_ascii = True
        elif op is _c.RANGE:
            lo, hi = av
            members.update(range(lo, min(hi, 127) + 1))
            non_ascii = non_ascii or hi >= 128
        elif op is _c.CATEGORY and av in _CATEGORY_ASCII:
            members |= (_CATEGORY_ASCII_FLAG if flags & re.ASCII else _CATEGORY_ASCII)[av]
            non_ascii = True
        else:
            raise Untranslatable(f"class item {op}")
    if flags & re.IGNORECASE:
        members = _case_closed(members)  # ASCII characters the class surely holds
    if negate:
        # Every ASCII character the class does not surely hold: widening the class (the
        # letters a non-ASCII member may fold to) would narrow its complement.
        return _class(set(_ASCII) - members, True)
    if flags & re.IGNORECASE:
        if non_ascii:
            members |= _LETTERS
        non_ascii = True
    return _class(members, non_ascii)


_GAP = "[\\x00-\\x80]*"
"""Any run of characters: what a repeat of a wide class (or of anything holding a gap)
becomes."""
_BROAD = 20


def _broad(body: str) -> bool:
    """Whether ``body`` is one character class of more than :data:`_BROAD` members."""
    return body.startswith("[") and body.endswith("]") and body.count("\\x") > _BROAD


def _seq(items: Any, flags: int, anchors: bool) -> str:
    return "".join(_item(op, av, flags, anchors) for op, av in items)


def _item(op: Any, av: Any, flags: int, anchors: bool) -> str:
    if op is _c.LITERAL:
        return _literal(av, flags)
    if op is _c.NOT_LITERAL:
        excluded = {av} if av < 128 else set()
        if flags & re.IGNORECASE:
            excluded = set()  # another case of it may still be excluded or not: keep all
        return _class(set(_ASCII) - excluded, True)
    if op is _c.ANY:
        return _class(set(_ASCII) - (set() if flags & re.DOTALL else {10}), True)
    if op is _c.IN:
        return _in(av, flags)
    if op is _c.SUBPATTERN:
        _group, add_flags, del_flags, sub = av
        return "(?:" + _seq(sub, (flags | add_flags) & ~del_flags, anchors) + ")"
    if op is _c.ATOMIC_GROUP:
        return "(?:" + _seq(av, flags, anchors) + ")"
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
        lo, hi, sub = av
        body = _seq(sub, flags, anchors)
        if hi == 0 or not body:
            return ""
        if hi > 1 and (_GAP in body or _broad(body)):
            # a repeated wide class: any run of characters (cheaper to scan, wider)
            return _GAP if lo == 0 else f"(?:{body}){_GAP}"
        low = min(lo, MAX_BOUND)
        if hi is _c.MAXREPEAT or hi > MAX_BOUND:
            return f"(?:{body}){{{low},}}"
        return f"(?:{body}){{{low},{hi}}}"
    if op is _c.BRANCH:
        return "(?:" + "|".join(_seq(branch, flags, anchors) for branch in av[1]) + ")"
    if op is _c.AT:
        if not anchors:
            return ""
        if av is _c.AT_BEGINNING_STRING or (av is _c.AT_BEGINNING and not flags & re.MULTILINE):
            return "^"
        return ""  # \b, \B, $, \Z, a multi-line ^: always true
    if op is _c.ASSERT or op is _c.ASSERT_NOT:
        return ""
    if op is _c.GROUPREF:
        return _GAP
    if op is _c.GROUPREF_EXISTS:
        _group, yes, no = av
        other = _seq(no, flags, anchors) if no else ""
        return "(?:" + _seq(yes, flags, anchors) + "|" + other + ")"
    raise Untranslatable(f"opcode {op}")


def prefilter_expression(pattern: re.Pattern[str], anchors: bool = True) -> str:
    """An RE2 expression (Latin-1 mode) over :func:`scan_bytes` that matches (somewhere) in
    every text where ``pattern`` has a match (module docstring: how each construct is widened); with
    ``anchors=False`` a ``^`` / ``\\A`` becomes nothing too, so it matches in every text
    that has a substring where ``pattern`` has a match.

    Raises :class:`Untranslatable` for a bytes pattern or a construct it cannot widen.
    """
    if not isinstance(pattern.pattern, str):
        raise Untranslatable("a bytes pattern")
    tree = _p.parse(pattern.pattern, pattern.flags)
    return _seq(tree, tree.state.flags, anchors)


def _options() -> Any:
    options = _re2.Options()
    options.encoding = _re2.Options.Encoding.LATIN1  # one byte, one character
    options.max_mem = MAX_MEM
    options.log_errors = False
    return options


Candidates = set[int] | frozenset[int] | None
"""What :meth:`PatternSet.candidates` says of a text: the indices of the patterns that may
match it, or ``None`` (no information: search every pattern)."""


class PatternSet:
    """Several compiled ``re`` patterns in one RE2 set (module docstring).

    ``patterns`` are ``str`` patterns; their positions are the indices :meth:`candidates`
    returns. With ``substrings=True`` the expressions keep no ``^`` either, so the candidates
    of a text cover every substring of it too (a pattern not among them matches in no
    ``text[i:j]``): one scan serves searches over pieces of the text.

    The set is built on the first :meth:`candidates` call (a tenth of a second for fifty
    patterns), never raising: a pattern it cannot take is always a candidate. Safe to share
    between threads (RE2 sets are immutable once compiled).
    """

    def __init__(self, patterns: Sequence[re.Pattern[str]], substrings: bool = False) -> None:
        self.patterns = tuple(patterns)
        self.substrings = substrings
        self._always: frozenset[int] = frozenset()
        self._set: Any = None
        self._ids: tuple[int, ...] = ()
        self._built = False
        self._lock = threading.Lock()
        self._slots = {id(p): i for i, p in enumerate(self.patterns)}
        if _re2 is None:
            _log_fallback()

    def _build(self) -> None:
        with self._lock:
            if self._built:
                return
            always: set[int] = set()
            engine = _re2.Set.SearchSet(_options())
            engine.Add(b"")  # the sentinel, set index 0: present in every successful match
            ids = [-1]
            for i, pattern in enumerate(self.patterns):
                try:
                    expression = prefilter_expression(pattern, not self.substrings).encode("ascii")
                    if _re2.compile(expression, _options()).fullmatch(b""):
                        raise Untranslatable("matches the empty text: no information")
                    engine.Add(expression)
                except (Untranslatable, re.error, _re2.error):
                    always.add(i)
                    continue
                ids.append(i)
            try:
                engine.Compile()
            except _re2.error:  # pragma: no cover - too big for MAX_MEM: search everything
                engine, ids, always = None, [-1], set(range(len(self.patterns)))
            self._set, self._ids = engine, tuple(ids)
            self._always, self._built = frozenset(always), True

    def slot(self, pattern: re.Pattern[str]) -> int:
        """The index of ``pattern`` (the very object passed in); ``KeyError`` for another."""
        return self._slots[id(pattern)]

    @property
    def always(self) -> frozenset[int]:
        """Indices of the patterns the set does not hold (always candidates); builds the set
        when it is not built yet."""
        if not self._built and _re2 is not None:
            self._build()
        return self._always

    def candidates(self, text: str) -> Candidates:
        """Indices of the patterns that may match somewhere in ``text`` (a superset of those
        that do), or ``None`` when the engine is off, missing or failed on this text (RE2's
        DFA out of memory: the sentinel is missing) -- search every pattern."""
        if not _enabled or _re2 is None:
            return None
        if not self._built:
            self._build()
        if not text:  # an expression of the set never matches the empty text
            return self._always
        engine = self._set
        if engine is None:
            return None
        matched = engine.Match(scan_bytes(text))
        if not matched or 0 not in matched:
            return None  # the scan failed: no information
        ids = self._ids
        found = {ids[k] for k in matched}
        found.discard(-1)
        return found | self._always if self._always else found


def _log_fallback() -> None:
    global _fallback_logged
    if not _fallback_logged:
        _fallback_logged = True
        log.warning(
            "google-re2 is not importable: the one-pass scanner (processors.scanning) is off "
            "and every pattern is searched with re (same output, slower)"
        )
