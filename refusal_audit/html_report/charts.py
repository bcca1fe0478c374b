"""The report's charts, drawn with matplotlib (no pyplot, no display): each one an SVG to
inline in the HTML file and a PNG for ``--png`` (slides, the README).

Every chart function takes a ``PeriodData`` and returns a ``Chart`` or None when the period
has nothing to draw (no reviews, no gaps, ...). Intervals are the Wilson 95% intervals
(Wilson 1927) the warehouse queries computed; a chart never computes a rate of its own.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time
from typing import Any

import matplotlib
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from refusal_audit.html_report.data import PeriodData

_ID_REF = re.compile(r'(\bid="|url\(#|href="#)([^"()]+)')
MAX_CATEGORIES = 9
MAX_GAP_LABEL = 60
WIDTH_IN, HEIGHT_IN = 9.0, 3.4
PNG_DPI = 150
_STYLE: dict[Any, Any] = {  # matplotlib types its keys as a Literal of rc names
    "svg.fonttype": "none",  # text stays text: selectable, small
    "font.family": "sans-serif",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
}


@dataclass
class Chart:
    """One chart: ``name`` (a slug, the PNG's file name), ``title``, ``caption`` (what it
    shows and how to read it) and its matplotlib ``figure``."""

    name: str
    title: str
    caption: str
    figure: Figure

    def svg(self) -> str:
        """The chart as an inline ``<svg>`` element (no XML declaration, no DOCTYPE). Every
        element id and every in-document reference to one (``url(#id)``, ``href="#id"``) is
        prefixed with the chart's name, so several charts share one page without clashing
        (matplotlib numbers its ids per figure: ``axes_1``, ``patch_1``, ...)."""
        buffer = io.StringIO()
        with matplotlib.rc_context(_STYLE | {"svg.hashsalt": self.name}):
            self.figure.savefig(buffer, format="svg", metadata={"Date": None})
        text = buffer.getvalue()
        return _ID_REF.sub(rf"\1{self.name}-\2", text[text.index("<svg") :])

    def png(self) -> bytes:
        """The chart as PNG bytes at ``PNG_DPI`` dots per inch."""
        buffer = io.BytesIO()
        with matplotlib.rc_context(_STYLE):
            self.figure.savefig(buffer, format="png", dpi=PNG_DPI, metadata={"Software": None})
        return buffer.getvalue()


def _figure(height: float = HEIGHT_IN) -> tuple[Figure, Any]:
    with matplotlib.rc_context(_STYLE):
        figure = Figure(figsize=(WIDTH_IN, height), layout="constrained")
        axes = figure.add_subplot()
    return figure, axes


def _days(axes: Any) -> None:
    locator = AutoDateLocator(maxticks=10)  # type: ignore[no-untyped-call]
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]


def _error_bars(
    rows: list[dict[str, Any]], value: str, low: str, high: str
) -> list[list[float]]:
    """matplotlib's asymmetric error bars ``[below, above]`` from interval columns."""
    return [[r[value] - r[low] for r in rows], [r[high] - r[value] for r in rows]]


def _as_datetime(day: date) -> datetime:
    return datetime.combine(day, time())


def fp_by_model(data: PeriodData) -> Chart | None:
    """Estimated false-positive rate per model over the period, with its Wilson 95% band."""
    rows = [r for r in data.fp_by_model if r["audited"]]
    if not rows:
        return None
    figure, axes = _figure(max(1.4, 0.35 * len(rows) + 0.9))
    labels = [f"{r['model']} (n={r['audited']})" for r in rows]
    rates = [r["rate"] for r in rows]
    err = _error_bars(rows, "rate", "low", "high")
    axes.errorbar(rates, labels, xerr=err, fmt="o", capsize=4, color="#1f77b4")
    axes.set_xlim(0, 1)
    axes.xaxis.set_major_formatter(PercentFormatter(1.0))
    axes.set_xlabel("estimated false-positive (over-refusal) rate, Wilson 95% interval")
    axes.invert_yaxis()
    return Chart(
        "fp-by-model",
        "False-positive rate per model",
        "Each dot is the share of a model's audited refusals the audit judged over-refusals; "
        "the bar is its Wilson 95% interval.",
        figure,
    )


def fp_over_time(data: PeriodData) -> Chart | None:
    """Estimated false-positive rate per event day and model with Wilson 95% bands; the
    period's alerts as dashed vertical lines at their window start."""
    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in data.fp_daily:
        series[str(r["model"])].append(r)
    if not series:
        return None
    figure, axes = _figure()
    for model, rows in sorted(series.items()):
        x = [_as_datetime(r["day"]) for r in rows]
        (line,) = axes.plot(x, [r["rate"] for r in rows], marker="o", ms=3, label=model)
        low = [r["wilson_low"] for r in rows]
        high = [r["wilson_high"] for r in rows]
        axes.fill_between(x, low, high, color=line.get_color(), alpha=0.12, linewidth=0)
    for alert in data.alerts:
        axes.axvline(alert.window.start, color="#d62728", linestyle="--", linewidth=1)
    axes.set_ylim(0, 1)
    axes.yaxis.set_major_formatter(PercentFormatter(1.0))
    axes.set_ylabel("false-positive rate")
    _days(axes)
    axes.legend(loc="upper left", fontsize=8, frameon=False, ncols=min(3, len(series)))
    caption = "Daily estimated false-positive rate per model; shaded: Wilson 95% band."
    if data.alerts:
        caption += " Dashed red lines: the start of an alert's window."
    return Chart("fp-over-time", "False-positive rate over time", caption, figure)


def category_mix(data: PeriodData) -> Chart | None:
    """Share of each refusal category per event day, stacked; categories beyond the
    ``MAX_CATEGORIES`` largest of the period are pooled as ``other``."""
    if not data.category_daily:
        return None
    totals: dict[str, int] = defaultdict(int)
    for r in data.category_daily:
        totals[str(r["category"])] += int(r["assessments"])
    top = sorted(totals, key=lambda c: (-totals[c], c))[:MAX_CATEGORIES]
    days = sorted({r["day"] for r in data.category_daily})
    shares: dict[str, list[float]] = {c: [0.0] * len(days) for c in [*top, "other"]}
    index = {d: i for i, d in enumerate(days)}
    for r in data.category_daily:
        name = str(r["category"]) if r["category"] in top else "other"
        shares[name][index[r["day"]]] += float(r["share"])
    if not any(shares["other"]):
        del shares["other"]
    figure, axes = _figure(3.8)
    x = [_as_datetime(d) for d in days]
    palette = [f"C{i}" for i in range(len(top))] + ["#c0c0c0"]  # "other" in grey
    axes.stackplot(x, *shares.values(), labels=list(shares), colors=palette, alpha=0.9)
    axes.set_ylim(0, 1)
    if len(x) > 1:
        axes.set_xlim(x[0], x[-1])
    axes.yaxis.set_major_formatter(PercentFormatter(1.0))
    axes.set_ylabel("share of the day's refusals")
    _days(axes)
    axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    return Chart(
        "category-mix",
        "Refusal categories over time",
        "Share of each category among the day's audited refusals (stacked to 100%).",
        figure,
    )


def _short(text: str) -> str:
    return text if len(text) <= MAX_GAP_LABEL else text[: MAX_GAP_LABEL - 1] + "…"


def top_gaps(data: PeriodData) -> Chart | None:
    """Refusals flagged per policy gap (the period's largest), new gaps in another colour;
    bars are numbered as the report's gap table."""
    if not data.gaps:
        return None
    rows = data.gaps
    figure, axes = _figure(max(1.6, 0.4 * len(rows) + 1.0))
    colors = ["#ff7f0e" if r["new_in_period"] else "#7f7f7f" for r in rows]
    labels = [f"{i}. {_short(str(r['description']))}" for i, r in enumerate(rows, 1)]
    axes.barh(labels, [r["refusals"] for r in rows], color=colors)
    axes.invert_yaxis()
    axes.set_xlabel("refusals flagged in the period")
    axes.xaxis.get_major_locator().set_params(integer=True)
    return Chart(
        "policy-gaps",
        "Top policy gaps",
        "Refusals the audit flagged as not covered by any policy clause, per gap; orange: "
        "first flagged for an event of this period (a new gap), grey: flagged before.",
        figure,
    )


def review_agreement(data: PeriodData) -> Chart | None:
    """Reviewers' agreement with the model (false-positive judgement) and Cohen's kappa per
    event week, with 95% intervals; groups below the minimum of compared items are left out
    (their note is in the table)."""
    rows = [r for r in data.agreement if r["fp_agreement"] is not None]
    if not rows:
        return None
    figure, axes = _figure()
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[f"{r['model']} / {r['policy_bundle']}"].append(r)
    for label, items in sorted(groups.items()):
        x = [_as_datetime(r["week"]) for r in items]
        for key, low, high, marker, name in (
            ("fp_agreement", "fp_low", "fp_high", "o", "agreement"),
            ("fp_kappa", "fp_kappa_low", "fp_kappa_high", "s", "kappa"),
        ):
            y = [r[key] for r in items]
            err = _error_bars(items, key, low, high)
            axes.errorbar(x, y, yerr=err, fmt=marker + "-", capsize=3, ms=4,
                          label=f"{label}: {name}")  # fmt: skip
    axes.set_ylim(-0.2, 1.05)
    axes.set_ylabel("agreement / kappa")
    _days(axes)
    axes.legend(loc="lower left", fontsize=8, frameon=False)
    return Chart(
        "review-agreement",
        "Review agreement",
        "Per event week: share of reviewed items where the reviewer agreed with the model's "
        "false-positive judgement (circles) and Cohen's kappa (squares), 95% intervals.",
        figure,
    )


def verified_vs_estimated(data: PeriodData) -> Chart | None:
    """The model's estimated false-positive rate beside the reviewers' verified one per
    model and week (stratified estimate), both with 95% intervals."""
    rows = [r for r in data.verified if r["verified_fp_rate"] is not None]
    if not rows:
        return None
    figure, axes = _figure(max(1.8, 0.5 * len(rows) + 1.0))
    labels = [f"{r['model']}, week of {r['week']}" for r in rows]
    positions = list(range(len(rows)))
    for offset, key, low, high, name in (
        (-0.15, "model_fp_rate", "model_low", "model_high", "estimated by the audit"),
        (0.15, "verified_fp_rate", "verified_low", "verified_high", "verified by reviewers"),
    ):
        values = [r[key] for r in rows]
        err = _error_bars(rows, key, low, high)
        axes.errorbar(values, [p + offset for p in positions], xerr=err, fmt="o",
                      capsize=3, label=name)  # fmt: skip
    axes.set_yticks(positions, labels)
    axes.invert_yaxis()
    axes.set_xlim(0, 1)
    axes.xaxis.set_major_formatter(PercentFormatter(1.0))
    axes.legend(loc="lower right", fontsize=8, frameon=False)
    return Chart(
        "verified-fp",
        "Verified against estimated false-positive rate",
        "The audit's estimate and the reviewers' verified rate (stratified over flagged and "
        "randomly sampled items), 95% intervals.",
        figure,
    )


CHARTS: tuple[Callable[[PeriodData], Chart | None], ...] = (
    fp_by_model,
    fp_over_time,
    category_mix,
    top_gaps,
    review_agreement,
    verified_vs_estimated,
)


def draw(data: PeriodData) -> dict[str, Chart]:
    """Every chart the period has data for, by name, in report order."""
    charts = (make(data) for make in CHARTS)
    return {chart.name: chart for chart in charts if chart is not None}
