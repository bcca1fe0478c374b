"""Time buckets of the report's trend charts: a day, an ISO week or a month, chosen from the
period's length so that a chart has at most about a hundred points (a year of days would
be 365 thin points, each resting on a handful of refusals).

The daily rows of the named queries are summed into buckets; a bucket's false-positive
rate is recomputed from its summed counts with its Wilson 95% interval
(``processors.stats.wilson_interval``, Wilson 1927), so a day bucket equals the named
query's row exactly.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import date, timedelta
from typing import Any, Literal

from processors.stats import wilson_interval

Bucket = Literal["day", "week", "month"]
MAX_DAY_BUCKETS = 62
MAX_WEEK_BUCKETS = 104


def bucket_size(since: date, until: date) -> Bucket:
    """``day`` for up to ``MAX_DAY_BUCKETS`` days, ``week`` for up to ``MAX_WEEK_BUCKETS``
    weeks, else ``month``."""
    days = (until - since).days + 1
    if days <= MAX_DAY_BUCKETS:
        return "day"
    return "week" if days <= 7 * MAX_WEEK_BUCKETS else "month"


def bucket_start(day: date, size: Bucket) -> date:
    """The first day of the bucket holding ``day``: itself, its ISO week's Monday, or the
    first of its month."""
    if size == "week":
        return day - timedelta(days=day.weekday())
    if size == "month":
        return day.replace(day=1)
    return day


def next_bucket(start: date, size: Bucket) -> date:
    """The first day of the bucket after the one starting on ``start``."""
    if size == "month":
        return (start.replace(day=28) + timedelta(days=4)).replace(day=1)
    return start + timedelta(days=7 if size == "week" else 1)


def bucket_grid(since: date, until: date, size: Bucket) -> list[date]:
    """The first day of every bucket from the one holding ``since`` to the one holding
    ``until`` (empty when ``until`` < ``since``)."""
    grid: list[date] = []
    start, last = bucket_start(since, size), bucket_start(until, size)
    while start <= last:
        grid.append(start)
        start = next_bucket(start, size)
    return grid


def bucket_label(start: date, size: Bucket) -> str:
    """How a bucket is named in sentences: ``2025-06-03``, ``week of 2025-06-02``,
    ``2025-06``."""
    if size == "week":
        return f"week of {start.isoformat()}"
    return start.strftime("%Y-%m") if size == "month" else start.isoformat()


def fp_buckets(daily: Iterable[dict[str, Any]], size: Bucket) -> list[dict[str, Any]]:
    """``false_positive_rate`` rows (day, model, audited, estimated_false_positives) summed
    per bucket and model: ``start``, ``model``, ``audited``, ``estimated_false_positives``,
    ``rate``, ``wilson_low``, ``wilson_high``; ordered by start, then model."""
    sums: dict[tuple[date, str], list[int]] = defaultdict(lambda: [0, 0])
    for r in daily:
        cell = sums[(bucket_start(r["day"], size), str(r["model"]))]
        cell[0] += int(r["audited"])
        cell[1] += int(r["estimated_false_positives"])
    rows = []
    for (start, model), (audited, fps) in sorted(sums.items()):
        low, high = wilson_interval(fps, audited)
        rows.append({
            "start": start, "model": model, "audited": audited,
            "estimated_false_positives": fps, "rate": fps / audited if audited else None,
            "wilson_low": low, "wilson_high": high,
        })  # fmt: skip
    return rows


def category_buckets(daily: Iterable[dict[str, Any]], size: Bucket) -> list[dict[str, Any]]:
    """``category_mix`` rows (day, category, assessments) summed per bucket: ``start``,
    ``category``, ``assessments``, ``share`` (of the bucket's assessments); ordered by
    start, then assessments (most first), then category."""
    counts: dict[date, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in daily:
        counts[bucket_start(r["day"], size)][str(r["category"])] += int(r["assessments"])
    rows = []
    for start in sorted(counts):
        total = sum(counts[start].values())
        for category, n in sorted(counts[start].items(), key=lambda kv: (-kv[1], kv[0])):
            rows.append({"start": start, "category": category, "assessments": n,
                         "share": n / total})  # fmt: skip
    return rows
