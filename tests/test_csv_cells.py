"""CSV cells against spreadsheet formula injection, reversibly (issue 23, item 2)."""

from __future__ import annotations

from itertools import product

from processors.csv_cells import FORMULA_TRIGGERS, neutralise_cell, restore_cell

# the triggers, the quote itself and two ordinary characters: every string up to 4 of them
ALPHABET = "=+-@\t\r'a "


def test_no_cell_starts_like_a_formula_and_every_value_comes_back() -> None:
    written: dict[str, str] = {}
    for length in range(5):
        for chars in product(ALPHABET, repeat=length):
            value = "".join(chars)
            cell = neutralise_cell(value)
            assert cell[:1] not in FORMULA_TRIGGERS, repr(value)
            assert restore_cell(cell) == value, repr(value)
            assert cell not in written, (value, written.get(cell))  # unambiguous
            written[cell] = value


def test_owasp_examples_and_values_that_already_start_with_a_quote() -> None:
    assert neutralise_cell('=HYPERLINK("http://x","y")') == '\'=HYPERLINK("http://x","y")'
    assert neutralise_cell("=cmd|' /C calc'!A0") == "'=cmd|' /C calc'!A0"
    assert neutralise_cell("@SUM(1+1)") == "'@SUM(1+1)"
    assert neutralise_cell("-2+3") == "'-2+3" and neutralise_cell("+1") == "'+1"
    assert neutralise_cell("\tx") == "'\tx" and neutralise_cell("\rx") == "'\rx"
    # a value that really starts with a quote and a trigger gets a second quote ...
    assert neutralise_cell("'=1+1") == "''=1+1" and restore_cell("''=1+1") == "'=1+1"
    # ... and one whose quote is not followed by a trigger is left alone both ways
    assert neutralise_cell("'hello") == "'hello" and restore_cell("'hello") == "'hello"
    assert neutralise_cell("a=b") == "a=b" and neutralise_cell("") == ""
