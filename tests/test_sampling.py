"""Review sampling: every flagged item, a seeded share of the rest, stable per log_id."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from processors.sampling import review_reasons, sample_draw
from schemas.audit import IndividualAssessment


def a(i: int, flagged: bool) -> IndividualAssessment:
    return IndividualAssessment(log_id=f"id-{i}", category="over_refusal",
                                is_estimated_false_positive=flagged, policy_clause_cited=None,
                                assessment_rationale="r", requires_human_review=flagged)


def test_every_flagged_item_is_sampled() -> None:
    items = [a(i, True) for i in range(100)]
    reasons = review_reasons(items, rate=0.0, seed=1)
    assert reasons == {f"id-{i}": "flagged" for i in range(100)}


def test_share_of_unflagged_matches_rate() -> None:
    n, rate = 5000, 0.2
    reasons = review_reasons([a(i, False) for i in range(n)], rate=rate, seed=7)
    k = len(reasons)
    assert set(reasons.values()) == {"random_sample"}
    # two-sided exact binomial test: the hash draw behaves like Bernoulli(rate)
    assert binomtest(k, n, rate).pvalue > 0.001


def test_decision_is_stable_and_seeded() -> None:
    items = [a(i, False) for i in range(500)]
    first = review_reasons(items, 0.3, seed=3)
    assert review_reasons(list(reversed(items)), 0.3, seed=3) == first
    assert review_reasons(items[:100], 0.3, seed=3) == {
        k: v for k, v in first.items() if int(k.split("-")[1]) < 100
    }
    assert review_reasons(items, 0.3, seed=4) != first
    assert 0.0 <= sample_draw("x", 0) < 1.0


def test_rate_out_of_range() -> None:
    with pytest.raises(ValueError):
        review_reasons([], 1.5, 0)
