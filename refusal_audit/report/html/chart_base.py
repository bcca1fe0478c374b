"""What every report chart shares: the ``Chart`` (SVG for the page, PNG for ``--png``), the
style, the period's day and week axes, and stable category colours."""

from __future__ import annotations

import functools
import io
import math
import re
import textwrap
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from importlib import resources
from typing import Any

import matplotlib
from matplotlib.dates import MO, DateFormatter, DayLocator, MonthLocator, WeekdayLocator
from matplotlib.figure import Figure

from processors.policy import parse_taxonomy

_ID_REF = re.compile(r'(\bid="|url\(#|href="#)([^"()]+)')
_TAG = re.compile(r"<[^>]*>")  # text nodes carry "<" as "&lt;": tags are well delimited
# C0/C1 controls (but tab and newline) and the bidirectional controls: a logged name must not
# reorder the report's own words (U+202E) or break the SVG's XML
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
MAX_LABEL = 40
WIDTH_IN, HEIGHT_IN = 9.0, 3.4
PNG_DPI = 150
MAX_TICKS = 8
STYLE: dict[Any, Any] = {  # matplotlib types its keys as a Literal of rc names
    "svg.fonttype": "none",  # text stays text: selectable, small
    "font.family": "sans-serif",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "text.parse_math": False,  # logged names are text: "$x$" must not become math (or fail)
}
# tab20 without its two greys (grey is "other"): 18 distinguishable colours, its 9 dark
# ones first (tab20 pairs each hue with a light one: neighbours would look alike)
_PALETTE = [
    matplotlib.colormaps["tab20"](i)
    for i in [*range(0, 20, 2), *range(1, 20, 2)]
    if i not in (14, 15)
]
_OTHER_PALETTE = [matplotlib.colormaps["tab20b"](i) for i in range(20)]
OTHER_COLOUR = "#c0c0c0"
SERIES_COLOURS = [matplotlib.colormaps["tab10"](i) for i in range(10)]
"""Colours of the per-model series (matplotlib's default cycle)."""


@dataclass
class Chart:
    """One chart: ``name`` (a slug, the PNG's file name), ``title``, ``caption`` (what it
    shows and how to read it), ``period`` (written on the PNG, which travels alone) and its
    matplotlib ``figure``."""

    name: str
    title: str
    caption: str
    figure: Figure
    period: str = ""

    def svg(self) -> str:
        """The chart as an inline ``<svg>`` element (no XML declaration, no DOCTYPE). Every
        element id and every in-document reference to one (``url(#id)``, ``href="#id"``) is
        prefixed with the chart's name, so several charts share one page without clashing
        (matplotlib numbers its ids per figure: ``axes_1``, ``patch_1``, ...)."""
        buffer = io.StringIO()
        with matplotlib.rc_context(STYLE | {"svg.hashsalt": self.name}):
            self.figure.savefig(buffer, format="svg", metadata={"Date": None})
        text = buffer.getvalue()
        prefix = rf"\1{self.name}-\2"
        return _TAG.sub(lambda tag: _ID_REF.sub(prefix, tag.group(0)), text[text.index("<svg") :])

    def png(self) -> bytes:
        """The chart as PNG bytes at ``PNG_DPI`` dots per inch, titled with its title and
        period (the page's caption is not there to say what it shows)."""
        buffer = io.BytesIO()
        with matplotlib.rc_context(STYLE):
            title = self.figure.suptitle(
                f"{self.title}, {self.period}" if self.period else self.title,
                fontsize=10, fontweight="bold", x=0.01, ha="left",
            )  # fmt: skip
            self.figure.savefig(buffer, format="png", dpi=PNG_DPI, metadata={"Software": None})
            title.remove()
        return buffer.getvalue()


def clean_text(text: str) -> str:
    """``text`` without control characters (tab and newline kept) and bidirectional
    controls, for anything logged that the report shows (HTML and charts)."""
    return _UNSAFE.sub("", text)


def label(text: str, width: int = MAX_LABEL) -> str:
    """A chart label from logged ``text``: cleaned, cut to ``width`` characters ("…"), and
    never starting with "_" (matplotlib leaves such labels out of legends)."""
    text = clean_text(text)
    text = text if len(text) <= width else text[: width - 1] + "…"
    return " " + text if text.startswith("_") else text


def figure(height: float = HEIGHT_IN) -> tuple[Figure, Any]:
    """A new figure, ``WIDTH_IN`` x ``height`` inches, and its one axes."""
    with matplotlib.rc_context(STYLE):
        made = Figure(figsize=(WIDTH_IN, height), layout="constrained")
        axes = made.add_subplot()
    return made, axes


def panel_figure(panels: int, height: float) -> tuple[Figure, list[Any]]:
    """A new figure of ``panels`` axes stacked in one column (small multiples), sharing
    both axes, each ``height`` inches high (plus room for the date axis)."""
    with matplotlib.rc_context(STYLE):
        made = Figure(figsize=(WIDTH_IN, panels * height + 0.6), layout="constrained")
        grid = made.subplots(panels, 1, sharex=True, sharey=True, squeeze=False)
    return made, [row[0] for row in grid]


def as_datetime(day: date) -> datetime:
    """Midnight of ``day`` (naive; matplotlib's date axis)."""
    return datetime.combine(day, time())


def date_axis(axes: Any, first: date, last: date, size: str = "day") -> None:
    """An x axis from half a bucket before ``first`` to half a bucket after ``last`` (bucket
    ``size``: day, week or month), at most ``MAX_TICKS`` ticks on bucket starts, labelled
    YYYY-MM-DD (YYYY-MM for months). One bucket still gets a readable axis."""
    step = {"day": 1, "week": 7, "month": 30}[size]
    half = timedelta(days=step / 2)
    axes.set_xlim(as_datetime(first) - half, as_datetime(last) + half)
    steps = max(1, (last - first).days // step + 1)
    every = max(1, math.ceil(steps / MAX_TICKS))
    if size == "month":
        locator: Any = MonthLocator(interval=every)  # type: ignore[no-untyped-call]
    elif size == "week":
        locator = WeekdayLocator(byweekday=MO, interval=every)  # type: ignore[no-untyped-call]
    else:
        locator = DayLocator(interval=every)  # type: ignore[no-untyped-call]
    axes.xaxis.set_major_locator(locator)
    pattern = "%Y-%m" if size == "month" else "%Y-%m-%d"
    axes.xaxis.set_major_formatter(DateFormatter(pattern))  # type: ignore[no-untyped-call]


def bar_width(size: str) -> float:
    """Bar width in days for a bucket ``size`` (80% of the bucket)."""
    return {"day": 0.8, "week": 5.6, "month": 24.0}[size]


def error_bars(
    rows: Sequence[dict[str, Any]], value: str, low: str, high: str
) -> list[list[float]]:
    """matplotlib's asymmetric error bars ``[below, above]`` from interval columns."""
    return [[r[value] - r[low] for r in rows], [r[high] - r[value] for r in rows]]


@functools.cache
def _taxonomy_codes() -> tuple[str, ...]:
    """The shipped example taxonomy's codes, in its order (17 codes)."""
    text = resources.files("refusal_audit").joinpath("example_policies/refusal_taxonomy.md")
    return tuple(code.code for code in parse_taxonomy(text.read_text(encoding="utf-8")))


def category_colours(names: Iterable[str]) -> dict[str, Any]:
    """A colour per category that depends on its name only, never on the other categories
    of the report: the codes of the shipped taxonomy (``over_refusal``, ...,
    ``intellectual_property``) have fixed, distinct colours of ``_PALETTE`` in the
    taxonomy's order; any other name gets one of tab20b's 20 colours by the CRC-32 of the
    name (stable, but two such names may share a colour)."""
    codes = _taxonomy_codes()
    colours: dict[str, Any] = {}
    for name in names:
        if name in codes:
            colours[name] = _PALETTE[codes.index(name) % len(_PALETTE)]
        else:
            colours[name] = _OTHER_PALETTE[zlib.crc32(name.encode("utf-8")) % len(_OTHER_PALETTE)]
    return colours


def wrapped_label(text: str, width: int, lines: int = 2) -> str:
    """A chart label from logged ``text`` (cleaned as ``label`` does) wrapped at word
    boundaries into at most ``lines`` lines of ``width`` characters; only its end is cut
    ("…") when it is longer."""
    text = label(text, width * lines + 40)
    return "\n".join(textwrap.wrap(text, width, max_lines=lines, placeholder=" …")) or text
