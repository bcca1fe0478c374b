"""Literal gates for compiled regular expressions: skip a search that cannot match.

:func:`required_literals` reads a compiled pattern's syntax tree (``re._parser``, Python
3.11+) and returns a set of literal strings of which at least one must occur in any text the
pattern matches -- or ``None`` when that cannot be proven. :func:`gated_search` then runs
``pattern.search(text)`` only when one of the literals is ``in`` the text, so it returns
exactly what the plain search returns (``None`` when no literal occurs, because then the
pattern cannot match).

The analysis is deliberately conservative (a wrong gate would silently drop matches):

* only ``LITERAL`` runs count as literal text; a character class, ``.``, a negated literal,
  an anchor or assertion, a back-reference or any other node ends a run and contributes
  nothing of its own;
* a sequence is gated by the best gate of any one of its items (each item's gate is
  necessary, so any one of them is);
* a group is gated by its contents; a repeat only when its minimum is at least 1;
* an alternation only when *every* branch has a gate (the union of the branch gates);
* any ``re.IGNORECASE`` (global or inline), lookarounds, atomic groups, possessive repeats,
  conditionals and unknown opcodes give no gate.

A gate with more than :data:`MAX_GATE_LITERALS` literals, or whose shortest literal is a
single character, is dropped (checking it would cost about as much as the search).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

try:  # Python 3.11+
    import re._constants as _c  # type: ignore[import-not-found,unused-ignore]
    import re._parser as _p  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - older Pythons
    import sre_constants as _c  # type: ignore[no-redef,unused-ignore]
    import sre_parse as _p  # type: ignore[no-redef,unused-ignore]

MAX_GATE_LITERALS = 24
"""Gates with more literals than this are dropped (no gate: the pattern is always searched)."""

MIN_GATE_LENGTH = 2
"""Gates whose shortest literal is shorter than this are dropped (they almost always pass)."""

Gate = frozenset[str]


def _minimal(literals: Iterable[str]) -> Gate:
    """Drop literals that contain another literal of the set: the containing one occurring
    implies the contained one occurs, so "any literal occurs" is unchanged."""
    lits = sorted(set(literals), key=len)
    kept: list[str] = []
    for s in lits:
        if not any(k in s for k in kept):
            kept.append(s)
    return frozenset(kept)


def _rank(gate: Gate) -> tuple[int, int, int]:
    """Smaller is better: long shortest literal first, then few literals."""
    shortest = min(len(s) for s in gate)
    return (-min(shortest, 4), len(gate), -shortest)


def _best(gates: Iterable[Gate | None]) -> Gate | None:
    candidates = [g for g in gates if g]
    if not candidates:
        return None
    return min(candidates, key=_rank)


def _seq_gate(items: Any) -> Gate | None:
    """Gate of a sequence of parsed items (a ``SubPattern`` or a list of ``(op, av)``)."""
    gates: list[Gate | None] = []
    run: list[str] = []
    for op, av in items:
        if op is _c.LITERAL:
            run.append(chr(av))
            continue
        if run:
            gates.append(frozenset({"".join(run)}))
            run = []
        gates.append(_item_gate(op, av))
    if run:
        gates.append(frozenset({"".join(run)}))
    return _best(gates)


def _item_gate(op: Any, av: Any) -> Gate | None:
    """Gate of one non-literal parsed item; ``None`` for anything not provably gated."""
    if op is _c.SUBPATTERN:
        _group, add_flags, del_flags, sub = av
        if (add_flags | del_flags) & re.IGNORECASE:
            return None
        return _seq_gate(sub)
    if op is _c.MAX_REPEAT or op is _c.MIN_REPEAT:
        lo, _hi, sub = av
        if lo < 1:
            return None
        return _seq_gate(sub)
    if op is _c.BRANCH:
        _unused, branches = av
        union: set[str] = set()
        for branch in branches:
            g = _seq_gate(branch)
            if not g:
                return None
            union |= g
        return _minimal(union)
    # IN, ANY, NOT_LITERAL, AT, ASSERT, ASSERT_NOT, GROUPREF, GROUPREF_EXISTS, ATOMIC_GROUP,
    # POSSESSIVE_REPEAT, CATEGORY, ...: no proof.
    return None


def _case_sensitive_tree(pattern: re.Pattern[str]) -> Any:
    """The parsed tree of a case-sensitive text ``pattern``; None for a bytes pattern or one
    with ``re.IGNORECASE`` (set by flag or inline), which no literal gate covers."""
    if not isinstance(pattern.pattern, str) or pattern.flags & re.IGNORECASE:
        return None
    try:
        tree = _p.parse(pattern.pattern, pattern.flags)
    except Exception:  # pragma: no cover - compiled patterns parse
        return None
    if tree.state.flags & re.IGNORECASE:
        return None
    return tree


def required_literals(pattern: re.Pattern[str]) -> Gate | None:
    """Literals at least one of which occurs in every text ``pattern`` can match, or ``None``.

    ``None`` means no gate (search always). A gate is never returned for a pattern compiled
    with ``re.IGNORECASE``, and is limited by :data:`MAX_GATE_LITERALS` and
    :data:`MIN_GATE_LENGTH`.
    """
    tree = _case_sensitive_tree(pattern)
    if tree is None:
        return None
    gate = _seq_gate(tree)
    if not gate or len(gate) > MAX_GATE_LITERALS:
        return None
    if min(len(s) for s in gate) < MIN_GATE_LENGTH:
        return None
    return gate


def gated_search(pattern: re.Pattern[str], gate: Gate | None, text: str) -> re.Match[str] | None:
    """``pattern.search(text)``, skipped (``None``) when no literal of ``gate`` is in ``text``.

    ``gate`` must come from :func:`required_literals` for this ``pattern`` (or be ``None``).
    """
    if gate is not None:
        for lit in gate:
            if lit in text:
                break
        else:
            return None
    return pattern.search(text)


# --- word-start keys ---------------------------------------------------------------------------
# A position-aware gate for patterns whose every match starts at the start of a word with one
# of a few literals (``\b(?:kill|shoot|...)\w*\s+...``): one set intersection tells whether a
# word of the text begins like one of them, and the pattern is then tried only at the places
# where such a beginning occurs instead of at every position of the text.

KEY_LENGTH = 3
"""Longest word prefix used as a key."""

MAX_KEYED_PLACES = 12
"""Beyond this many candidate places, search from the first one instead of trying each."""

_KEY_RE = re.compile(rf"(\w{{1,{KEY_LENGTH}}})\w*")
_WORD_CHAR = re.compile(r"\w")
_BOUNDING_AT = frozenset(
    {_c.AT_BOUNDARY, _c.AT_BEGINNING, _c.AT_BEGINNING_STRING, _c.AT_BEGINNING_LINE}
)

Keys = frozenset[str]
StartLiterals = dict[str, tuple[str, ...]]
"""Word key -> the start literals with that key (:func:`word_start_keys`)."""


def text_keys(text: str) -> Keys:
    """The key of every word (``\\w+`` run) of ``text``: its first :data:`KEY_LENGTH`
    characters, or the whole word when it is shorter."""
    return frozenset(_KEY_RE.findall(text))


def _word_key(literal: str) -> str | None:
    """The key of the word that starts with ``literal`` (``literal`` placed at a word start):
    its first :data:`KEY_LENGTH` characters when they are all word characters, the leading
    word characters when a non-word character ends the word sooner, else ``None`` (a short
    literal the word may go on after: its key is unknown)."""
    n = 0
    while n < len(literal) and n < KEY_LENGTH and _WORD_CHAR.match(literal[n]):
        n += 1
    if n == KEY_LENGTH or 0 < n < len(literal):
        return literal[:n]
    return None


def _prefix_minimal(literals: Iterable[str]) -> list[str]:
    """Drop literals that start with another literal of the set: every place where the
    longer one occurs, the shorter one occurs too."""
    kept: list[str] = []
    for s in sorted(set(literals), key=len):
        if not any(s.startswith(k) for k in kept):
            kept.append(s)
    return sorted(kept)


def _short(literal: str) -> bool:
    """Whether ``literal`` is too short to give a word key or a selective place to look."""
    return len(literal) < KEY_LENGTH


_MAX_START_LITERALS = 256

Starts = set[tuple[str, bool]]
"""Start literals of a sequence, each with whether it is the whole match (``complete``)."""


def _follow(heads: Starts, tail: Any) -> Starts:
    """``heads`` with each complete literal that is too short (:func:`_short`) followed by the
    start literals of ``tail`` (the items after it), when those are known."""
    if not any(complete and _short(h) for h, complete in heads):
        return heads
    tails = _start_literals(tail, True)
    out: Starts = set()
    for head, complete in heads:
        if not (complete and _short(head)):
            out.add((head, complete))
        elif tails is None or len(tails) * len(heads) > _MAX_START_LITERALS:
            out.add((head, False))
        else:
            out.update((head + t, c) for t, c in tails)
    return out


def _start_literals(items: Any, bounded: bool) -> Starts | None:
    """Literals one of which every match of the sequence ``items`` starts with (each flagged
    ``complete`` when it is the whole match), proven to start at a word start (a ``\\b``,
    ``^`` or ``\\A`` before, or ``bounded``); ``None`` when not proven. A complete literal
    that is too short (:func:`_short`) is followed by what comes next when that is known
    (``do(?:n't)? not`` starts with "don't not" or "do not")."""
    run: list[str] = []
    items = list(items)
    for index, (op, av) in enumerate(items):
        if op is _c.LITERAL:
            run.append(chr(av))
            continue
        if run:
            if not bounded:
                return None
            head = "".join(run)
            if not _short(head):
                return {(head, False)}
            tails = _start_literals(items[index:], True)
            if tails is None or len(tails) > _MAX_START_LITERALS:
                return {(head, False)}
            return {(head + t, c) for t, c in tails}
        if op is _c.AT:
            bounded = bounded or av in _BOUNDING_AT
            continue
        if op is _c.ASSERT or op is _c.ASSERT_NOT:
            continue  # zero width: the match still starts at the next consuming item
        if op is _c.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if (add_flags | del_flags) & (re.IGNORECASE | re.ASCII | re.LOCALE):
                return None
            first = _start_literals(sub, bounded)
            return None if first is None else _follow(first, items[index + 1 :])
        if op is _c.MAX_REPEAT or op is _c.MIN_REPEAT:
            lo, _hi, sub = av
            found = _start_literals(sub, bounded)
            if found is None:
                return None
            first = {(lit, False) for lit, _ in found}  # more repeats may follow
            if lo >= 1:
                return first
            rest = _start_literals(items[index + 1 :], bounded)  # zero repeats
            return None if rest is None else first | rest
        if op is _c.BRANCH:
            union: Starts = set()
            for branch in av[1]:
                found = _start_literals(branch, bounded)
                if found is None:
                    return None
                union |= found
            return _follow(union, items[index + 1 :])
        return None
    if run:
        return {("".join(run), True)} if bounded else None
    return {("", True)}  # nothing consumed: the empty match


def word_start_keys(pattern: re.Pattern[str]) -> StartLiterals | None:
    """Literals one of which every match starts with, at a word start, by their word's key.

    Keys are as in :func:`text_keys`: a text none of whose word keys is among the result's
    keys cannot match.

    ``None`` when that is not proven from the syntax tree, which needs: before the first
    consuming item only zero-width items, one of them a ``\\b``, ``^`` or ``\\A`` (so the
    match starts at a word start); the first consuming item a literal or an alternation of
    literals (through groups and repeats of at least one), each starting with a word
    character. Never for ``re.IGNORECASE``, ``re.ASCII`` or ``re.LOCALE`` patterns (their
    letters or word boundaries differ from the key reader's).
    """
    if not isinstance(pattern.pattern, str):
        return None
    if pattern.flags & (re.IGNORECASE | re.ASCII | re.LOCALE):
        return None
    try:
        tree = _p.parse(pattern.pattern, pattern.flags)
    except Exception:  # pragma: no cover - compiled patterns parse
        return None
    if tree.state.flags & (re.IGNORECASE | re.ASCII | re.LOCALE):
        return None
    starts = _start_literals(tree, False)
    if not starts or len(starts) > _MAX_START_LITERALS:
        return None
    keys: dict[str, list[str]] = {}
    for literal in _prefix_minimal(lit for lit, _ in starts):
        key = _word_key(literal)
        if key is None:
            return None
        keys.setdefault(key, []).append(literal)
    return {k: tuple(sorted(v)) for k, v in keys.items()}


def start_literals(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """Literals one of which every match of ``pattern`` begins with, wherever it starts.

    ``None`` when that is not proven from the syntax tree (as for :func:`word_start_keys`,
    without the word-start condition), or when there are more than
    :data:`MAX_GATE_LITERALS` of them or one is shorter than :data:`MIN_GATE_LENGTH`
    (finding every place where they occur would cost more than the search).
    """
    tree = _case_sensitive_tree(pattern)
    if tree is None:
        return None
    starts = _start_literals(tree, True)
    if not starts or len(starts) > _MAX_START_LITERALS:
        return None
    literals = _prefix_minimal(lit for lit, _ in starts)
    if len(literals) > MAX_GATE_LITERALS or min(map(len, literals)) < MIN_GATE_LENGTH:
        return None
    return tuple(literals)


def search_at(pattern: re.Pattern[str], literals: Iterable[str], text: str) -> re.Match[str] | None:
    """``pattern.search(text)``, tried only where one of ``literals`` occurs.

    ``literals`` must include every start literal (:func:`word_start_keys`) of ``pattern``
    that can occur in ``text`` (those of the keys :func:`text_keys` finds in it). Every match
    starts where one of them occurs, so matching at those places in increasing order and
    returning the first success gives the search's match (the one at the first place where
    a match exists); with more than :data:`MAX_KEYED_PLACES` places the pattern is searched
    from the first one on.
    """
    find = text.find
    places: list[int] = []
    for literal in literals:
        i = find(literal)
        while i >= 0:
            places.append(i)
            i = find(literal, i + 1)
    if not places:
        return None
    if len(places) > MAX_KEYED_PLACES:
        return pattern.search(text, min(places))
    places.sort()
    match = pattern.match
    for i in places:
        m = match(text, i)
        if m is not None:
            return m
    return None


def keyed_search(
    pattern: re.Pattern[str], starts: StartLiterals | None, text: str, keys_of_text: Keys
) -> re.Match[str] | None:
    """``pattern.search(text)`` using the start literals ``starts`` of the pattern (from
    :func:`word_start_keys`; ``None``: plain search) and ``keys_of_text``
    (:func:`text_keys` of ``text``): ``None`` at once when no word of the text has a key of
    ``starts``, else tried only where a start literal occurs."""
    if starts is None:
        return pattern.search(text)
    literals = [lit for key in keys_of_text.intersection(starts) for lit in starts[key]]
    return search_at(pattern, literals, text) if literals else None
