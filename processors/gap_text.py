"""How a policy gap's description is shown: pure text, no heavy imports (SQL code uses it).

A gap is described by the description of the flag that opened it (``processors.gaps``); its
counts are its distinct log ids. Descriptions written by the ``local`` engine before it
stopped stating a count began with one batch's count ("3 refusal(s) categorised ..."), which
a gap grouped from several flags, or a listing of several batches' flags, does not hold:
``describe_gap`` (and ``describe_gap_sql``, the same in ClickHouse SQL) drops it.
"""

from __future__ import annotations

import re

__all__ = ["LEGACY_COUNT_PREFIX", "describe_gap", "describe_gap_sql"]

LEGACY_COUNT_PREFIX = "^[0-9]+ refusal[(]s[)] categorised "
"""The start of a ``local`` engine flag description written before it stopped stating the
flag's count (``"3 refusal(s) categorised 'policy_gray_zone' of requests about: ..."``): a
regular expression valid in Python and in ClickHouse (RE2), without quotes or backslashes."""

_LEGACY_COUNT_RE = re.compile(LEGACY_COUNT_PREFIX)
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
