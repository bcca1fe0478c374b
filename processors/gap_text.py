"""How a policy gap's description is shown: pure text, no heavy imports (SQL code uses it).

A gap is described by the description of the flag that opened it (``processors.gaps``); its
counts are its distinct log ids. Descriptions written by the ``local`` engine before it
stopped stating a count began with one batch's count ("3 refusal(s) categorised ..."), which
a gap grouped from several flags, or a listing of several batches' flags, does not hold:
``describe_gap`` (and ``describe_gap_sql``, the same in ClickHouse SQL) drops it.
"""

from __future__ import annotations

import re

__all__ = ["LEGACY_COUNT_PREFIX", "describe_gap", "describe_gap_sql", "gap_topic"]

LEGACY_COUNT_PREFIX = "^[0-9]+ refusal[(]s[)] categorised "
"""The start of a ``local`` engine flag description written before it stopped stating the
flag's count (``"3 refusal(s) categorised 'policy_gray_zone' of requests about: ..."``): a
regular expression valid in Python and in ClickHouse (RE2), without quotes or backslashes."""

_LEGACY_COUNT_RE = re.compile(LEGACY_COUNT_PREFIX)
# the ``local`` engine's flag text (processors.engines.local), any casing and spacing, with or
# without the legacy count: only the category and the listed request words differ between
# flags; the rest is the same boilerplate in every flag of this engine
_LOCAL_FLAG_RE = re.compile(
    r"^\s*(?:[0-9]+ refusal[(]s[)]|refusals) categorised '(?P<category>[^']*)'"
    r"(?: of requests about: (?P<words>.*?))?\.\s+no policy clause matches them.*$",
    re.IGNORECASE | re.DOTALL,
)
_REPLACEMENT = "Refusals categorised "


def describe_gap(description: str) -> str:
    """The text that describes a gap (or lists a flag) whose description is ``description``.

    The description itself, except that a leading ``LEGACY_COUNT_PREFIX`` (one batch's count,
    "3 refusal(s) categorised ...") becomes "Refusals categorised ...", the wording the
    ``local`` engine writes now. Nothing else is changed.
    """
    return _LEGACY_COUNT_RE.sub(_REPLACEMENT, description, count=1)


def describe_gap_sql(expression: str) -> str:
    """``describe_gap`` in ClickHouse SQL, applied to the String SQL ``expression``."""
    return f"replaceRegexpOne({expression}, '{LEGACY_COUNT_PREFIX}', '{_REPLACEMENT}')"


def gap_topic(description: str) -> str:
    """What a flag's ``description`` is about, for grouping flags into gaps.

    For the ``local`` engine's flag text ("Refusals categorised 'C' of requests about: w1,
    w2. No policy clause matches them ..."), only the listed request words ("w1, w2"), or
    the category when no words are listed: the rest of that text is the same in every one
    of its flags, so comparing it would make every two of them look alike. Any other
    description is its own topic (returned unchanged).
    """
    match = _LOCAL_FLAG_RE.match(description)
    if match is None:
        return description
    words = (match.group("words") or "").strip()
    return words or f"category {match.group('category')}"
