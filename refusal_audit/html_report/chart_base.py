"""What every report chart shares: the ``Chart`` (SVG for the page, PNG for ``--png``), the
style, the period's day and week axes, and stable category colours."""

from __future__ import annotations

import io
import math
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

import matplotlib
from matplotlib.dates import MO, DateFormatter, DayLocator, MonthLocator, WeekdayLocator
from matplotlib.figure import Figure

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
# tab20 without its two greys (grey is "other"): 18 distinguishable colours
_PALETTE = [matplotlib.colormaps["tab20"](i) for i in range(20) if i not in (14, 15)]
OTHER_COLOUR = "#c0c0c0"


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


def category_colours(names: Iterable[str]) -> dict[str, Any]:
    """A colour per category that does not depend on the report: the CRC-32 of the name
    picks one of 18 colours, and a clash within one chart takes the next free colour."""
    taken: set[int] = set()
    colours: dict[str, Any] = {}
    for name in sorted(names):
        index = zlib.crc32(name.encode("utf-8")) % len(_PALETTE)
        while index in taken and len(taken) < len(_PALETTE):
            index = (index + 1) % len(_PALETTE)
        taken.add(index)
        colours[name] = _PALETTE[index]
    return colours


def shorten(texts: Sequence[str], width: int) -> list[str]:
    """Labels for ``texts`` that tell them apart: the words they all begin with are dropped
    (shown as "…"), then each is cut to ``width`` characters."""
    words = [t.split() for t in texts]
    common = 0
    if len(texts) > 1:
        while all(len(w) > common + 1 for w in words) and len({w[common] for w in words}) == 1:
            common += 1
    return [label(("… " if common else "") + " ".join(w[common:]), width) for w in words]
