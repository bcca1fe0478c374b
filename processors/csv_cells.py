"""CSV cells safe to open in a spreadsheet, and back (issue 23; pure).

A spreadsheet tool runs a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
return as a formula (``=HYPERLINK(...)``, ``=cmd|' /C calc'!A0``, ``@SUM(1+1)``): "CSV
injection" (OWASP, https://owasp.org/www-community/attacks/CSV_Injection). OWASP's remedy is
a single quote before such a cell, which the spreadsheet shows as text. ``review export``
writes logged (attacker-controlled) texts, so every CSV cell goes through
:func:`neutralise_cell`; ``review import`` reads every CSV cell through :func:`restore_cell`.

The quoting is reversible: a value whose first character after its leading single quotes is
a trigger gets one more quote in front (``=x`` -> ``'=x``, ``'=x`` -> ``''=x``), and only such
a cell loses its first quote on the way back, so ``restore_cell(neutralise_cell(v)) == v``
for every string ``v`` (a value like ``'hello``, whose quotes are not followed by a trigger,
is written as it is). JSON exports are not spreadsheets and are never quoted.
"""

from __future__ import annotations

FORMULA_TRIGGERS = frozenset("=+-@\t\r")
"""First characters that make a spreadsheet cell a formula (OWASP's list)."""
QUOTE = "'"


def _quoted_form(text: str) -> bool:
    """True when ``text``, after its leading single quotes, starts with a trigger."""
    return text.lstrip(QUOTE)[:1] in FORMULA_TRIGGERS


def neutralise_cell(text: str) -> str:
    """``text`` as a CSV cell no spreadsheet runs as a formula: one single quote in front
    when, after its leading quotes, it starts with ``= + - @``, tab or carriage return."""
    return QUOTE + text if _quoted_form(text) else text


def restore_cell(text: str) -> str:
    """The value :func:`neutralise_cell` wrote as ``text`` (its first quote removed when it
    was added there); a cell that was not quoted comes back unchanged."""
    if text.startswith(QUOTE) and _quoted_form(text[1:]):
        return text[1:]
    return text
