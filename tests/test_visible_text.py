"""Logged text on the review pages: isolated in <bdi>, invisible characters as markers."""

from __future__ import annotations

from refusal_audit.web.visible_text import INVISIBLE, visible, visible_plain


def test_bidi_controls_nul_and_invisible_characters_become_markers() -> None:
    text = "a\u202eb<i>\x00c\u200bd\U000e0041e\tf\ng\u200dh"
    html = str(visible(text))
    assert html.startswith("<bdi>") and html.endswith("</bdi>")
    assert not INVISIBLE.search(html)  # none of them left in the page
    assert '<span class="invisible-char" title="RIGHT-TO-LEFT OVERRIDE">⟨U+202E⟩</span>' in html
    assert '<span class="invisible-char" title="control character">⟨U+0000⟩</span>' in html
    assert "⟨U+200B⟩" in html and "⟨U+E0041⟩" in html
    assert "b&lt;i&gt;" in html  # escaped as ever
    assert "e\tf\ng\u200dh" in html  # tab, newline and the emoji joiner stay
    assert visible_plain(text) == "a⟨U+202E⟩b<i>⟨U+0000⟩c⟨U+200B⟩d⟨U+E0041⟩e\tf\ng\u200dh"
    assert str(visible(None)) == "<bdi></bdi>" and visible_plain(None) == ""
