"""The report's charts, drawn with matplotlib (no pyplot, no display): each one an SVG to
inline in the HTML file and a PNG for ``--png`` (slides, the README).

Every chart function takes a ``PeriodData`` and returns a ``Chart`` or None when the period
has nothing to draw (no reviews, no gaps, ...). Intervals are the Wilson 95% intervals
(Wilson 1927) the warehouse queries computed; a chart never computes a rate of its own.
Time charts span the whole period on their x axis; a day (or week) without data is a gap,
never a line drawn through it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import matplotlib
from matplotlib.ticker import FixedLocator, MaxNLocator, PercentFormatter

from processors.gap_text import gap_topic
from refusal_audit.report.html.buckets import bucket_grid
from refusal_audit.report.html.chart_base import (
    OTHER_COLOUR,
    SERIES_COLOURS,
    STYLE,
    Chart,
    as_datetime,
    bar_width,
    category_colours,
    date_axis,
    error_bars,
    figure,
    label,
    panel_figure,
    wrapped_label,
)
from refusal_audit.report.html.data import PeriodData

MAX_CATEGORIES = 9
GAP_LABEL_WIDTH = 48
PANEL_HEIGHT = 1.05
MAX_MODEL_ROWS = 25
MAX_SERIES = 8
LEGEND_LABEL = 32
PER_BUCKET = {"day": "Daily", "week": "Weekly", "month": "Monthly"}


def _period(data: PeriodData) -> str:
    s = data.slice
    scope = ", ".join(x for x in (s.model, s.product) if x)
    return f"{s.since} to {s.until}" + (f" ({scope})" if scope else "")


def fp_by_model(data: PeriodData) -> Chart | None:
    """Estimated false-positive rate per model over the period, with its Wilson 95% band."""
    every = [r for r in data.fp_by_model if r["audited"]]
    if not every:
        return None
    rows = sorted(every, key=lambda r: -int(r["audited"]))[:MAX_MODEL_ROWS]
    rows.sort(key=lambda r: str(r["model"]))
    fig, axes = figure(max(1.4, 0.35 * len(rows) + 0.9))
    labels = [f"{label(str(r['model']))} (n={r['audited']})" for r in rows]
    axes.errorbar([r["rate"] for r in rows], labels, xerr=error_bars(rows, "rate", "low", "high"),
                  fmt="o", capsize=4, color="#1f77b4")  # fmt: skip
    axes.set_xlim(0, 1)
    axes.xaxis.set_major_formatter(PercentFormatter(1.0))
    axes.set_xlabel("estimated false-positive (over-refusal) rate, Wilson 95% interval")
    axes.invert_yaxis()
    caption = (
        "Each dot is the share of a model's audited refusals the audit judged over-refusals; "
        "the bar is its Wilson 95% interval (n: audited refusals)."
    )
    if len(every) > len(rows):
        caption += f" The {len(rows)} most audited of {len(every)} models; all are in the table."
    return Chart("fp-by-model", "False-positive rate per model", caption, fig, _period(data))


def fp_over_time(data: PeriodData) -> Chart | None:
    """Estimated false-positive rate per time bucket (``data.bucket``) and model with Wilson
    95% bands over the whole period, as small multiples: one panel per model (the
    ``MAX_SERIES`` most audited, by name), sharing both axes, so no two bands overlap. A
    bucket without audited refusals of a model is a gap in its line; a lone bucket gets its
    interval as a bar; the period's alerts are dashed lines in every panel, named in the
    first."""
    every: dict[str, dict[Any, dict[str, Any]]] = defaultdict(dict)
    for r in data.fp_series:
        every[str(r["model"])][r["start"]] = r
    if not every:
        return None
    volume = {m: sum(int(r["audited"]) for r in rows.values()) for m, rows in every.items()}
    kept = sorted(sorted(every, key=lambda m: (-volume[m], m))[:MAX_SERIES])
    grid = bucket_grid(data.slice.since, data.slice.until, data.bucket)
    x = [as_datetime(d) for d in grid]
    fig, panels = panel_figure(len(kept), PANEL_HEIGHT)
    for i, (model, axes) in enumerate(zip(kept, panels, strict=True)):
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        by_start = every[model]
        rate, low, high = (
            [by_start[d][key] if d in by_start else math.nan for d in grid]
            for key in ("rate", "wilson_low", "wilson_high")
        )
        axes.plot(x, rate, marker="o", ms=3, color=colour, label=label(model, LEGEND_LABEL))
        axes.fill_between(x, low, high, color=colour, alpha=0.18, linewidth=0)
        for j, d in enumerate(grid):  # lone buckets: fill_between draws nothing for them
            alone = d in by_start and all(
                grid[k] not in by_start for k in (j - 1, j + 1) if 0 <= k < len(grid)
            )
            if alone:
                axes.vlines(x[j], low[j], high[j], color=colour, alpha=0.5)
        axes.set_title(label(model, LEGEND_LABEL), loc="left", fontsize=8, pad=2)
        for alert in data.alerts:
            start = alert.window.start.replace(tzinfo=None)
            axes.axvline(start, color="#d62728", linestyle="--", linewidth=1)
            if i == 0:
                axes.annotate(
                    alert.kind.replace("_", " "), (start, 1.0), xytext=(3, -3),
                    textcoords="offset points", fontsize=7, color="#d62728", va="top",
                )  # fmt: skip
        axes.set_ylim(0, 1)
        axes.yaxis.set_major_formatter(PercentFormatter(1.0))
        axes.yaxis.set_major_locator(FixedLocator([0, 0.5, 1]))
    date_axis(panels[-1], grid[0], grid[-1], data.bucket)
    fig.supylabel("false-positive rate", fontsize=9)
    caption = (
        f"{PER_BUCKET[data.bucket]} estimated false-positive rate, one panel per model (same "
        "scales); shaded: Wilson 95% band."
    )
    if len(every) > len(kept):
        caption += f" The {len(kept)} most audited of {len(every)} models."
    if data.alerts:
        caption += " Dashed red lines: the start of an alert's window (kind written beside)."
    return Chart("fp-over-time", "False-positive rate over time", caption, fig, _period(data))


def category_mix(data: PeriodData) -> Chart | None:
    """Share of each refusal category per time bucket, stacked bars over the whole period
    (no bar where nothing was audited); categories beyond the ``MAX_CATEGORIES`` largest of
    the period are pooled as ``other``. A category keeps its colour from report to report."""
    if not data.category_series:
        return None
    totals: dict[str, int] = defaultdict(int)
    for r in data.category_series:
        totals[str(r["category"])] += int(r["assessments"])
    top = sorted(totals, key=lambda c: (-totals[c], c))[:MAX_CATEGORIES]
    starts = sorted({r["start"] for r in data.category_series})  # buckets with data only
    index = {d: i for i, d in enumerate(starts)}
    shares: dict[str, list[float]] = {c: [0.0] * len(starts) for c in [*top, "other"]}
    for r in data.category_series:
        name = str(r["category"]) if r["category"] in top else "other"
        shares[name][index[r["start"]]] += float(r["share"])
    if not any(shares["other"]):
        del shares["other"]
    colours = category_colours(top) | {"other": OTHER_COLOUR}
    fig, axes = figure(3.8)
    x = [as_datetime(d) for d in starts]
    bottom = [0.0] * len(starts)
    width = bar_width(data.bucket)
    for name, values in shares.items():
        axes.bar(x, values, bottom=bottom, width=width, align="edge" if data.bucket != "day"
                 else "center", label=label(name), color=colours[name])  # fmt: skip
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    axes.set_ylim(0, 1)
    axes.yaxis.set_major_formatter(PercentFormatter(1.0))
    axes.set_ylabel(f"share of the {data.bucket}'s refusals")
    grid = bucket_grid(data.slice.since, data.slice.until, data.bucket)
    date_axis(axes, grid[0], grid[-1], data.bucket)
    axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    return Chart(
        "category-mix",
        "Refusal categories over time",
        f"Share of each category among the {data.bucket}'s audited refusals (each bar stacks "
        f"to 100%; no bar: no audited refusal that {data.bucket}).",
        fig,
        _period(data),
    )


def top_gaps(data: PeriodData) -> Chart | None:
    """Refusals flagged per policy gap (the period's largest), new gaps in another colour;
    bars are numbered as the report's gap table, labelled by what sets the gaps apart."""
    if not data.gaps:
        return None
    rows = data.gaps
    fig, axes = figure(max(1.6, 0.55 * len(rows) + 1.0))
    # what the gap is about (a local engine flag: its request words), whole words, cut at
    # the end only
    labels = [
        wrapped_label(f"{i}. {gap_topic(str(r['description']))}", GAP_LABEL_WIDTH)
        for i, r in enumerate(rows, 1)
    ]
    colours = ["#ff7f0e" if r["new_in_period"] else "#7f7f7f" for r in rows]
    axes.barh(labels, [r["refusals"] for r in rows], color=colours)
    axes.invert_yaxis()
    axes.set_xlabel("refusals flagged in the period")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    return Chart(
        "policy-gaps",
        "Top policy gaps",
        "Refusals the audit flagged as not covered by any policy clause, per gap (numbered as "
        "the table below); orange: first flagged for an event of this period (a new gap), "
        "grey: flagged before.",
        fig,
        _period(data),
    )


def _weeks(data: PeriodData) -> tuple[Any, Any]:
    first = data.slice.since - timedelta(days=data.slice.since.weekday())
    last = data.slice.until - timedelta(days=data.slice.until.weekday())
    return first, last


def review_agreement(data: PeriodData) -> Chart | None:
    """Reviewers' agreement with the model (false-positive judgement) and Cohen's kappa per
    event week, with 95% intervals; groups below the minimum of compared items are left out
    (their note is in the table). Series are dodged a little so they do not hide each other.
    At most ``MAX_SERIES`` model / bundle pairs, those with the most compared items (a
    legend entry per series for 50 models collapsed the axes). A week whose kappa is
    undefined (None: one label used) draws its agreement only."""
    rows = [r for r in data.agreement if r["fp_agreement"] is not None]
    if not rows:
        return None
    fig, axes = figure(3.6)
    every: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        every[f"{label(str(r['model']))} / {label(str(r['policy_bundle']))}"].append(r)
    compared = {g: sum(int(r["compared"]) for r in items) for g, items in every.items()}
    kept = sorted(every, key=lambda g: (-compared[g], g))[:MAX_SERIES]
    groups = {g: every[g] for g in kept}
    n_series = 2 * len(groups)
    step = 0
    for group, items in sorted(groups.items()):
        for key, low, high, marker, name in (
            ("fp_agreement", "fp_low", "fp_high", "o", "agreement"),
            ("fp_kappa", "fp_kappa_low", "fp_kappa_high", "s", "kappa"),
        ):
            dodge = timedelta(days=(step - (n_series - 1) / 2) * min(0.8, 5 / n_series))
            step += 1
            # kappa is None where model and reviewers used a single label (processors.agreement)
            drawn = [r for r in items if r[key] is not None]
            if not drawn:
                continue
            x = [as_datetime(r["week"]) + dodge for r in drawn]
            axes.errorbar(x, [r[key] for r in drawn], yerr=error_bars(drawn, key, low, high),
                          fmt=marker + "-", capsize=3, ms=4, label=f"{group}: {name}")  # fmt: skip
    axes.set_ylim(-0.2, 1.05)
    axes.set_ylabel("agreement / kappa")
    first, last = _weeks(data)
    date_axis(axes, first, last, "week")
    axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    caption = (
        "Per event week (its Monday): share of reviewed items where the reviewer agreed with "
        "the model's false-positive judgement (circles) and Cohen's kappa (squares), 95% "
        "intervals."
    )
    if len(every) > len(groups):
        caption += (
            f" The {len(groups)} model / bundle pairs with the most compared items of "
            f"{len(every)}; all are in the table."
        )
    return Chart("review-agreement", "Review agreement", caption, fig, _period(data))


def verified_vs_estimated(data: PeriodData) -> Chart | None:
    """The model's estimated false-positive rate beside the reviewers' verified one per
    model, bundle and week (stratified estimate), both with 95% intervals: the
    ``MAX_MODEL_ROWS`` most recent model-weeks (a row each, the bundle named when there are
    several; all of them drew a figure 1,400 inches high at 50 models and 400 days)."""
    every = [r for r in data.verified if r["verified_fp_rate"] is not None]
    if not every:
        return None

    def newest_first(r: dict[str, Any]) -> tuple[Any, ...]:
        return r["week"], str(r["model"]), str(r["policy_bundle"])

    newest = sorted(every, key=newest_first, reverse=True)
    rows = sorted(newest[:MAX_MODEL_ROWS], key=lambda r: (*newest_first(r)[1:], r["week"]))
    fig, axes = figure(max(1.8, 0.5 * len(rows) + 1.0))
    # a row per model, bundle and week: the bundle is named once there are several
    bundles = len({str(r["policy_bundle"]) for r in every}) > 1
    labels = [
        f"{label(str(r['model']))}"
        + (f" / {label(str(r['policy_bundle']))}" if bundles else "")
        + f", week of {r['week']}"
        for r in rows
    ]
    positions = list(range(len(rows)))
    for offset, key, low, high, name in (
        (-0.15, "model_fp_rate", "model_low", "model_high", "estimated by the audit"),
        (0.15, "verified_fp_rate", "verified_low", "verified_high", "verified by reviewers"),
    ):
        axes.errorbar([r[key] for r in rows], [p + offset for p in positions],
                      xerr=error_bars(rows, key, low, high), fmt="o", capsize=3,
                      label=name)  # fmt: skip
    axes.set_yticks(positions, labels)
    axes.invert_yaxis()
    axes.set_xlim(0, 1)
    axes.xaxis.set_major_formatter(PercentFormatter(1.0))
    axes.legend(loc="lower left", bbox_to_anchor=(0, 1.01), fontsize=8, frameon=False, ncols=2)
    caption = (
        "The audit's estimate and the reviewers' verified rate (stratified over flagged and "
        "randomly sampled items), 95% intervals."
    )
    if len(every) > len(rows):
        caption += (
            f" The {len(rows)} most recent of {len(every)} "
            f"{'model / bundle weeks' if bundles else 'model-weeks'}; "
            "refusal-audit query verified_false_positive_rate lists them all."
        )
    return Chart(
        "verified-fp",
        "Verified against estimated false-positive rate",
        caption,
        fig,
        _period(data),
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
    """Every chart the period has data for, by name, in report order. Drawn under the
    report's style (``chart_base.STYLE``): text objects take settings such as
    ``text.parse_math`` when they are made, not when they are saved."""
    with matplotlib.rc_context(STYLE):
        charts = [make(data) for make in CHARTS]
    return {chart.name: chart for chart in charts if chart is not None}
