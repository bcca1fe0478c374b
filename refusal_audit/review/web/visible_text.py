"""Logged text on the review pages: isolated, with its invisible characters shown (issue 23).

A logged request can carry characters a reader never sees but that change what the page shows:
a right-to-left override (U+202E) reverses everything after it on its line, including the
page's own words; zero-width spaces and Unicode tag characters hide text from a reader (and
smuggle instructions past one). The Jinja filter ``visible`` (registered by ``web.app``)
writes a value inside ``<bdi>`` (so its direction cannot leak into the page) with every such
character replaced by a visible marker ``⟨U+202E⟩`` in a ``<span class="invisible-char">``
(its Unicode name as the title). ``visible_plain`` gives the markers as plain text, for places
that take no markup (the page title). Tab, newline and carriage return stay as they are; the
joiners U+200C/U+200D stay too (Persian, Indic scripts and emoji sequences need them), and so
does a single U+FE0F after an emoji; every other variation selector is marked, since a run of
them after one glyph can hide a whole message.
"""

from __future__ import annotations

import re
import unicodedata

from markupsafe import Markup, escape

INVISIBLE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"  # C0 (but tab, LF, CR), DEL and C1 controls
    "\u061c\u200b\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidi marks, overrides, isolates
    "\u2060-\u2064\u206a-\u206f\ufeff\ufff9-\ufffb"  # word joiner, invisible operators, BOM
    "\U000e0000-\U000e007f"  # tag characters (invisible "ASCII smuggling")
    "\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f"  # soft hyphen, CGJ, fillers, FVS
    "\u2028\u2029\u3164\uffa0"  # line and paragraph separators, Hangul fillers
    "\ufe00-\ufe0e\U000e0100-\U000e01ef]"  # variation selectors (hide bytes after a glyph)
    # U+FE0F (emoji presentation) follows most emoji: shown only after another selector
    "|(?<=[\ufe00-\ufe0f\U000e0100-\U000e01ef])\ufe0f"
)
"""Characters shown as markers: controls, bidirectional controls and invisible formatters."""


def marker(char: str) -> str:
    """The visible stand-in of ``char``: ``⟨U+202E⟩``."""
    return f"⟨U+{ord(char):04X}⟩"


def visible_plain(value: object) -> str:
    """``value`` as text with every ``INVISIBLE`` character replaced by its marker (None is
    empty)."""
    if value is None:
        return ""
    return INVISIBLE.sub(lambda m: marker(m.group(0)), str(value))


def _marker_span(char: str) -> Markup:
    name = unicodedata.name(char, "control character")
    return Markup('<span class="invisible-char" title="{}">{}</span>').format(name, marker(char))


def visible(value: object) -> Markup:
    """``value`` as escaped HTML inside ``<bdi>``, every ``INVISIBLE`` character replaced by a
    marker span (None is an empty ``<bdi>``)."""
    text = "" if value is None else str(value)
    parts: list[Markup] = [Markup("<bdi>")]
    last = 0
    for match in INVISIBLE.finditer(text):
        parts.append(escape(text[last : match.start()]))
        parts.append(_marker_span(match.group(0)))
        last = match.end()
    parts.append(escape(text[last:]))
    parts.append(Markup("</bdi>"))
    return Markup("").join(parts)
