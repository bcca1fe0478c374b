"""Tests for processors.regex_gates: which patterns get a literal gate, and that a gated
search returns exactly what the plain search returns."""

from __future__ import annotations

import re

import pytest

from processors import prefilter
from processors.engines import local
from processors.regex_gates import gated_search, required_literals


@pytest.mark.parametrize(
    ("regex", "gate"),
    [
        (r"hello", {"hello"}),
        (r"\bfoo\b", {"foo"}),
        (r"(?:cat|dog)s?", {"cat", "dog"}),
        (r"\b(?:sorry|apologi[sz]e)\b", {"sorry", "apologi"}),
        (r"a[bc]d(?:efgh)+", {"efgh"}),
        (r"x{0,3}(?:ab|abc)yz", {"ab"}),  # "abc" implies "ab": dropped
        (r"(?m)^\s*foo", {"foo"}),
        (r"(?:(?:one|two) (?:x|y)|three)", {"one", "two", "three"}),
        (r"(?:ab)+?cd", {"ab"}),
        (r"é(?:üx|ßx)", {"üx", "ßx"}),  # "é" alone is too short; the branch gates
    ],
)
def test_patterns_that_get_a_gate(regex: str, gate: set[str]) -> None:
    assert required_literals(re.compile(regex)) == frozenset(gate)


@pytest.mark.parametrize(
    "regex",
    [
        r"(?i)hello",  # case-insensitive
        r"(?i:hello) world",  # inline case-insensitive group (the rest may still gate)
        r"(?:hello)?",  # optional
        r"(?:hello)*x",  # zero repeats
        r"hello|[a-z]+",  # a branch without a literal
        r"hello|",  # empty branch
        r"(?=hello)",  # lookahead only
        r"(?!hello)x",  # negative lookahead
        r"(?<=hello)",  # lookbehind only
        r"[abc]+",  # class only
        r".*",
        r"(\w+) \1",  # back-reference, single-char literal
        r"a",  # too short
        r"(?>hello)",  # atomic group
        r"(?:hello)++",  # possessive repeat
        r"(?:" + "|".join(f"{chr(97 + i % 26)}{i:03d}" for i in range(40)) + ")",  # too many
    ],
)
def test_patterns_that_get_no_gate(regex: str) -> None:
    gate = required_literals(re.compile(regex))
    if regex == r"(?i:hello) world":
        assert gate == frozenset({" world"})  # the case-sensitive part may gate
    else:
        assert gate is None


def test_ignorecase_flag_argument_gives_no_gate() -> None:
    assert required_literals(re.compile("hello", re.IGNORECASE)) is None


TRICKY = [
    "",
    "sorry",
    "SORRY",
    "Sorry but",
    "i'm sorry, but i can't",
    "apologise but",
    "apologize",
    "i can\u2019t help",
    "i can't help with that",
    "i cannot do that",
    "no, i won't",
    "no",
    "here is",
    "here's how",
    "ab",
    "abc",
    "abcd efgh efgh",
    "catdogs",
    "one x",
    "two y three",
    "\u00e9\u00fcx",
    "x" * 500 + "hello",
    "hel lo",
    "HELLO hello",
]


@pytest.mark.parametrize(
    "regex",
    [
        r"hello",
        r"(?:cat|dog)s?",
        r"\b(?:sorry|apologi[sz]e)\b[^.!?]{0,60}\bbut\b",
        r"(?:(?:one|two) (?:x|y)|three)",
        r"x{0,3}(?:ab|abc)yz",
        r"a[bc]d(?:efgh)+",
        r"(?i:hello) world",
        r"(?i)hello",
        r"é(?:üx|ßx)",
    ],
)
def test_gated_search_equals_plain_search(regex: str) -> None:
    pattern = re.compile(regex)
    gate = required_literals(pattern)
    for text in TRICKY + [t.upper() for t in TRICKY] + [t.lower() for t in TRICKY]:
        plain = pattern.search(text)
        gated = gated_search(pattern, gate, text)
        assert (plain and (plain.span(), plain.group(0))) == (
            gated and (gated.span(), gated.group(0))
        )


def test_cue_gates_agree_with_plain_search_on_cue_texts() -> None:
    """Every cue of the pre-filter and the local engine: gated == plain on texts that fire
    (and nearly fire) cues."""
    texts = [
        "i'm sorry, but i can't help with that request.",
        "as an ai language model, i don't have personal opinions.",
        "sure! here are some ideas: 1. one 2. two 3. three",
        "i cannot provide instructions for that; it is illegal and unethical.",
        "no, i won't do that.",
        "how do i kill a python process?",
        "write a story where the villain poisons the king",
        "what is the home address of my coworker dana?",
        "i can't browse the internet or access real-time data.",
        "could you clarify which text you would like me to translate?",
    ]
    texts += [t.upper() for t in texts] + [t.title() for t in texts]
    patterns = [c.pattern for c in local.CUES] + [
        c.pattern
        for c in (
            *prefilter._REFUSAL_CUES,
            *prefilter._COMPLIANCE_CUES,
            *prefilter._PARTIAL_CUES,
        )
    ]
    gated_count = 0
    for pattern in patterns:
        gate = required_literals(pattern)
        gated_count += gate is not None
        for text in texts:
            plain = pattern.search(text)
            gated = gated_search(pattern, gate, text)
            assert (plain and plain.span()) == (gated and gated.span()), (pattern.pattern, text)
    assert gated_count > len(patterns) // 2
