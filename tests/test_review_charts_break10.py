"""break10 (issue 27) on the report's bounded review charts (``review_agreement``: the 8
model / bundle pairs with the most compared items; ``verified_vs_estimated``: the 25 most
recent model-weeks): 0, 1, 8 and 9 groups, ties in compared counts, rows in any order, a
week whose kappa is undefined (None), many bundles."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from test_html_report import period  # noqa: F401  (fixture)
from test_review_queries import reviewed  # noqa: F401  (fixture)

from refusal_audit.report.html import PeriodData
from refusal_audit.report.html.charts import (
    MAX_MODEL_ROWS,
    MAX_SERIES,
    review_agreement,
    verified_vs_estimated,
)

pytestmark = pytest.mark.integration


def _legend(chart: Any) -> list[str]:
    return [t.get_text() for t in chart.figure.axes[0].get_legend().get_texts()]


def _pairs(base: dict[str, Any], n: int, compared: list[int]) -> list[dict[str, Any]]:
    return [base | {"model": f"model-{i:02d}", "compared": compared[i]} for i in range(n)]


@pytest.mark.parametrize("n", [1, MAX_SERIES, MAX_SERIES + 1])
def test_agreement_with_1_8_and_9_pairs(period: PeriodData, n: int) -> None:  # noqa: F811
    base = period.agreement[0]
    rows = _pairs(base, n, [100 - i for i in range(n)])
    chart = review_agreement(replace(period, agreement=rows))
    assert chart is not None
    models = {x.split(" / ")[0] for x in _legend(chart)}
    assert models == {f"model-{i:02d}" for i in range(min(n, MAX_SERIES))}
    left_out = f"pairs with the most compared items of {n}" in chart.caption
    assert left_out == (n > MAX_SERIES)


def test_agreement_with_no_pair_compared_enough_draws_nothing(
    period: PeriodData,  # noqa: F811
) -> None:
    rows = [r | {"fp_agreement": None} for r in period.agreement]
    assert review_agreement(replace(period, agreement=rows)) is None
    assert review_agreement(replace(period, agreement=[])) is None


def test_agreement_ties_keep_the_same_pairs_whatever_the_row_order(
    period: PeriodData,  # noqa: F811
) -> None:
    """12 pairs with equal compared counts: the same 8 (by name) in every row order."""
    rows = _pairs(period.agreement[0], 12, [50] * 12)
    seen = set()
    for seed in range(4):
        random.Random(seed).shuffle(rows)
        chart = review_agreement(replace(period, agreement=list(rows)))
        assert chart is not None
        seen.add(tuple(sorted(_legend(chart))))
    assert len(seen) == 1
    assert {x.split(" / ")[0] for x in next(iter(seen))} == {f"model-{i:02d}" for i in range(8)}


def test_agreement_draws_a_week_whose_kappa_is_undefined(period: PeriodData) -> None:  # noqa: F811
    """Every item judged alike by model and reviewers: agreement 1, kappa None
    (``processors.agreement``: 'kappa undefined'); the chart still draws that week's
    agreement and the other weeks' kappa."""
    base = period.agreement[0]
    undefined = base | {"week": base["week"] + timedelta(weeks=1), "fp_agreement": 1.0,
                        "fp_low": 0.88, "fp_high": 1.0, "fp_kappa": None,
                        "fp_kappa_low": None, "fp_kappa_high": None}  # fmt: skip
    chart = review_agreement(replace(period, agreement=[base, undefined]))
    assert chart is not None
    assert chart.svg().startswith("<svg")


@pytest.mark.parametrize("n", [0, 1, MAX_MODEL_ROWS, MAX_MODEL_ROWS + 1])
def test_verified_with_0_1_25_and_26_model_weeks(period: PeriodData, n: int) -> None:  # noqa: F811
    base = period.verified[0]
    rows = [base | {"week": base["week"] - timedelta(weeks=k)} for k in range(n)]
    chart = verified_vs_estimated(replace(period, verified=rows))
    if n == 0:
        assert chart is None
        return
    assert chart is not None
    ticks = [t.get_text() for t in chart.figure.axes[0].get_yticklabels()]
    assert len(ticks) == min(n, MAX_MODEL_ROWS)
    assert f"week of {base['week'] - timedelta(weeks=n - 1)}" in " ".join(ticks) or n > 25
    assert ("most recent of" in chart.caption) == (n > MAX_MODEL_ROWS)


def test_verified_rows_of_many_bundles_are_told_apart(period: PeriodData) -> None:  # noqa: F811
    """One model, one week, 5 bundles (a verified row each: the query's key is week, model
    and bundle): every row of the chart has its own label, and the caption counts what the
    rows are."""
    base = period.verified[0]
    rows = [base | {"policy_bundle": f"bundle-{b}"} for b in range(5)]
    rows += [base | {"policy_bundle": f"bundle-{b}", "week": base["week"] - timedelta(weeks=k)}
             for b in range(5) for k in range(1, 10)]  # fmt: skip
    chart = verified_vs_estimated(replace(period, verified=rows))
    assert chart is not None
    ticks = [t.get_text() for t in chart.figure.axes[0].get_yticklabels()]
    assert len(ticks) == MAX_MODEL_ROWS
    assert len(set(ticks)) == len(ticks), "rows of different bundles drawn under one label"
    assert all("bundle-" in t for t in ticks)
    assert "The 25 most recent of 50 model / bundle weeks" in chart.caption
