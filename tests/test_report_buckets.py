"""The report's time buckets: day, week or month by the period's length, and the daily
named-query rows summed into them with the Wilson interval of the summed counts."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from processors.stats import wilson_interval
from refusal_audit.report.html.buckets import (
    bucket_grid,
    bucket_size,
    bucket_start,
    category_buckets,
    fp_buckets,
)


@pytest.mark.parametrize(
    ("days", "size"), [(1, "day"), (62, "day"), (63, "week"), (728, "week"), (729, "month")]
)
def test_the_bucket_follows_the_period_length(days: int, size: str) -> None:
    since = date(2025, 1, 1)
    assert bucket_size(since, since + timedelta(days=days - 1)) == size


def test_buckets_start_on_the_day_the_monday_or_the_first_and_cover_the_period() -> None:
    wednesday = date(2025, 6, 4)
    assert bucket_start(wednesday, "day") == wednesday
    assert bucket_start(wednesday, "week") == date(2025, 6, 2)
    assert bucket_start(wednesday, "month") == date(2025, 6, 1)
    months = bucket_grid(date(1970, 1, 1), date(2025, 6, 8), "month")
    assert months[0] == date(1970, 1, 1) and months[-1] == date(2025, 6, 1)
    assert len(months) == 55 * 12 + 6
    weeks = bucket_grid(date(2024, 12, 31), date(2025, 1, 13), "week")
    assert weeks == [date(2024, 12, 30), date(2025, 1, 6), date(2025, 1, 13)]


def test_summed_counts_carry_their_own_wilson_interval() -> None:
    daily = [
        {"day": date(2025, 6, 2), "model": "m", "audited": 10, "estimated_false_positives": 2},
        {"day": date(2025, 6, 5), "model": "m", "audited": 30, "estimated_false_positives": 9},
        {"day": date(2025, 6, 9), "model": "m", "audited": 5, "estimated_false_positives": 5},
        {"day": date(2025, 6, 3), "model": "n", "audited": 4, "estimated_false_positives": 0},
    ]
    rows = fp_buckets(daily, "week")
    sums = [(r["start"], r["model"], r["audited"], r["estimated_false_positives"]) for r in rows]
    assert sums == [
        (date(2025, 6, 2), "m", 40, 11),
        (date(2025, 6, 2), "n", 4, 0),
        (date(2025, 6, 9), "m", 5, 5),
    ]
    assert (rows[0]["wilson_low"], rows[0]["wilson_high"]) == wilson_interval(11, 40)
    assert rows[0]["rate"] == pytest.approx(11 / 40)
    same = fp_buckets(daily, "day")  # a day bucket is the named query's row
    assert [(r["start"], r["audited"]) for r in same] == [
        (date(2025, 6, 2), 10),
        (date(2025, 6, 3), 4),
        (date(2025, 6, 5), 30),
        (date(2025, 6, 9), 5),
    ]


def test_category_shares_are_of_the_bucket() -> None:
    daily = [
        {"day": date(2025, 6, 2), "category": "a", "assessments": 3},
        {"day": date(2025, 6, 3), "category": "b", "assessments": 1},
        {"day": date(2025, 6, 4), "category": "a", "assessments": 4},
    ]
    rows = category_buckets(daily, "week")
    assert [(r["category"], r["assessments"], r["share"]) for r in rows] == [
        ("a", 7, 7 / 8), ("b", 1, 1 / 8),
    ]  # fmt: skip
