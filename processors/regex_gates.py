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


def required_literals(pattern: re.Pattern[str]) -> Gate | None:
    """Literals at least one of which occurs in every text ``pattern`` can match, or ``None``.

    ``None`` means no gate (search always). A gate is never returned for a pattern compiled
    with ``re.IGNORECASE``, and is limited by :data:`MAX_GATE_LITERALS` and
    :data:`MIN_GATE_LENGTH`.
    """
    if not isinstance(pattern.pattern, str) or pattern.flags & re.IGNORECASE:
        return None
    try:
        tree = _p.parse(pattern.pattern, pattern.flags)
    except Exception:  # pragma: no cover - compiled patterns parse
        return None
    if tree.state.flags & re.IGNORECASE:
        return None
    gate = _seq_gate(tree)
    if not gate or len(gate) > MAX_GATE_LITERALS:
        return None
    if min(len(s) for s in gate) < MIN_GATE_LENGTH:
        return None
    return gate


def gated_search(
    pattern: re.Pattern[str], gate: Gate | None, text: str
) -> re.Match[str] | None:
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
