"""Tests for processors.regex_gates: which patterns get a literal gate, and that a gated
search returns exactly what the plain search returns."""

from __future__ import annotations

import re

import pytest

from processors import refusal_cues
from processors.engines import local_cues
from processors.regex_gates import (
    gated_search,
    keyed_search,
    required_literals,
    search_at,
    start_literals,
    text_keys,
    word_start_keys,
)


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
    patterns = [c.pattern for c in local_cues.CUES] + [
        c.pattern
        for c in (
            *refusal_cues._REFUSAL_CUES,
            *refusal_cues._COMPLIANCE_CUES,
            *refusal_cues._PARTIAL_CUES,
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


# --- word-start keys and start literals ---------------------------------------------------------


@pytest.mark.parametrize(
    ("regex", "starts"),
    [
        (r"\b(?:kill|shoot)\w*\s+x", {"kil": ("kill",), "sho": ("shoot",)}),
        (r"\bdo(?:n't)? not\b", {"don": ("don't",), "do": ("do not",)}),
        (r"\b(?:my|our)\s+friend", None),  # "my" then a class: the word's key is unknown
        (r"\b(?:a |the )?cats?\b", {"a": ("a ",), "the": ("the ",), "cat": ("cat",)}),
        (r"^(?:sorry|apologi[sz]e)", {"sor": ("sorry",), "apo": ("apologi",)}),
        (r"(?<!no )\bhistory", {"his": ("history",)}),
    ],
)
def test_word_start_keys(regex: str, starts: dict[str, tuple[str, ...]] | None) -> None:
    assert word_start_keys(re.compile(regex)) == starts


@pytest.mark.parametrize(
    "regex",
    [
        r"kill\w*",  # no word boundary before the match
        r"\b\w+ing",  # starts with a class
        r"(?i)\bkill",  # case-insensitive
        r"\b(?i:kill)",  # inline case-insensitive group
        r"\b(?:kill)?",  # may match empty
        r"\bx\w*",  # one-character literal the word goes on after
        r"\b'em",  # starts with a non-word character
    ],
)
def test_patterns_without_word_start_keys(regex: str) -> None:
    assert word_start_keys(re.compile(regex)) is None


def test_start_literals() -> None:
    assert start_literals(re.compile(r"(?:fuck|shit)\w*|\bdeath to")) == (
        "death to",
        "fuck",
        "shit",
    )
    assert start_literals(re.compile(r"\w+ing")) is None
    assert start_literals(re.compile(r"\b(?:ab|a)c")) == ("abc", "ac")
    assert start_literals(re.compile(r"(?i)abc")) is None


def test_text_keys() -> None:
    assert text_keys("i can't kill_time, é-tude 42x") == frozenset(
        {"i", "can", "t", "kil", "é", "tud", "42x"}
    )


KEYED = [
    r"\b(?:kill|shoot|get rid of)\w*\s+(?:the )?(?:bugs?|process)\b",
    r"\bdo(?:n't)? not\b",
    r"\b(?:a |the )?cats?\b",
    r"(?<!criminal )\bhistory\b",
    r"\b(?:i'?m|i am) not (?:sure|certain)",
    r"^(?:sorry|apologi[sz]e)\b(?! to hear)",
]
KEYED_TEXTS = [
    "",
    "kill the bugs",
    "skill the bugs",
    "Kill the bugs",
    "killing process now",
    "they overkill process; kill process",
    "don't not do not",
    "dont not",
    "the cat sat on a cats mat, acat",
    "criminal history; family history",
    "im not sure, i'm not certain",
    "sorry to hear that",
    "sorry, I can't",
    "é-kill the bugs _kill the bugs 9kill the bugs",
    "get rid of the process",
    "x" * 40 + " kill " * 20 + "bugs",
]


@pytest.mark.parametrize("regex", KEYED)
def test_keyed_search_equals_search(regex: str) -> None:
    pattern = re.compile(regex)
    starts = word_start_keys(pattern)
    assert starts is not None
    for text in KEYED_TEXTS + [t.lower() for t in TRICKY]:
        expected = pattern.search(text)
        got = keyed_search(pattern, starts, text, text_keys(text))
        assert (got and (got.span(), got.group(0))) == (
            expected and (expected.span(), expected.group(0))
        ), text
        leads = start_literals(pattern)
        if leads is not None:
            via = search_at(pattern, leads, text)
            assert (via and via.span()) == (expected and expected.span()), text


def test_every_cue_search_equals_plain_search() -> None:
    """The engine's cue searches (keys, start literals or gate) on the TRICKY texts."""
    for cue in local_cues.CUES:
        for raw in TRICKY + KEYED_TEXTS:
            text = raw if cue.case_sensitive else raw.lower()
            expected = cue.pattern.search(text)
            if cue.starts is not None:
                got = keyed_search(cue.pattern, cue.starts, text, text_keys(text))
            elif cue.leads is not None:
                got = search_at(cue.pattern, cue.leads, text)
            else:
                got = gated_search(cue.pattern, cue.gate, text)
            assert (got and got.span()) == (expected and expected.span()), (cue.label, text)
