"""Batch-summary trend lines come from counts, with Wilson intervals, not from free text."""

from __future__ import annotations

from processors.drift_detection import WindowCounts
from processors.stats import wilson_interval
from processors.trends import trend_lines
from schemas.audit import IndividualAssessment


def assessment(i: int, fp: bool, category: str = "a") -> IndividualAssessment:
    return IndividualAssessment(
        log_id=f"l{i}",
        category=category,
        is_estimated_false_positive=fp,
        policy_clause_cited=None if fp else "AUP-1",
        assessment_rationale="r",
        requires_human_review=fp,
    )


def test_rates_against_the_baseline_with_wilson_intervals() -> None:
    batch = [assessment(i, fp=i < 10) for i in range(25)]
    baseline = WindowCounts(
        refusals=1000, false_positives=80, review_flags=80, categories={"a": 1000}
    )
    lines = trend_lines(batch, baseline)
    low, high = wilson_interval(10, 25)
    blow, bhigh = wilson_interval(80, 1000)
    assert lines[0] == (
        f"over-refusal rate 0.40 [{low:.2f}, {high:.2f}] (n=25) vs baseline "
        f"0.08 [{blow:.2f}, {bhigh:.2f}] (n=1000)"
    )
    assert lines[1].startswith("human-review flag rate 0.40")


def test_category_lines_only_when_intervals_separate() -> None:
    batch = [assessment(i, False, "new" if i < 20 else "a") for i in range(25)]
    baseline = WindowCounts(refusals=1000, categories={"a": 950, "new": 50})
    lines = trend_lines(batch, baseline)
    assert any(line.startswith("category new share 0.80") for line in lines)
    same = [assessment(i, False, "a") for i in range(25)]
    assert not [x for x in trend_lines(same, baseline) if x.startswith("category")]


def test_without_baseline_and_empty_batch() -> None:
    lines = trend_lines([assessment(0, True)], None)
    assert lines[0].startswith("over-refusal rate 1.00") and lines[0].endswith("no baseline yet")
    assert trend_lines([], None) == []
