"""Logged text on the review pages: isolated in <bdi>, invisible characters as markers."""

from __future__ import annotations

from refusal_audit.review.web.visible_text import INVISIBLE, visible, visible_plain


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


def test_variation_selectors_fillers_and_separators_become_markers() -> None:
    # a breaking run hid 28 variation selectors after one emoji (a message in its "bytes")
    smuggled = "ok \U0001f600" + "".join(chr(0xE0100 + i) for i in range(20)) + "\ufe01\ufe0f"
    plain = visible_plain(smuggled)
    assert plain.startswith("ok \U0001f600⟨U+E0100⟩") and plain.endswith("⟨U+FE01⟩⟨U+FE0F⟩")
    assert plain.count("⟨U+") == 22
    for char in "\u00ad\u034f\u115f\u1160\u180e\u2028\u2029\u3164\uffa0\ufe00":
        assert visible_plain(f"a{char}b") == f"a⟨U+{ord(char):04X}⟩b"
    # an emoji's own presentation selector stays, and so do its joiners
    heart, family = "\u2764\ufe0f", "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    assert visible_plain(heart + " " + family) == heart + " " + family
