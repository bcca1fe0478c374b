"""Review sampling: every flagged item, a seeded share of the rest, stable per log_id, and
optional uncertainty sampling near the threshold that never touches the random share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from scipy.stats import binomtest
from test_pipeline import EXAMPLE_LOG, options, settings

from processors.sampling import near_threshold, review_reasons, sample_draw
from refusal_audit.audit.batch import run_batch
from schemas.audit import IndividualAssessment, StoredAssessment
from warehouse import Warehouse


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


# ---- uncertainty sampling (issue 11, item 5) ----------------------------------------------


def scored(n: int, flagged_every: int = 5) -> tuple[list[IndividualAssessment], dict[str, float]]:
    """``n`` assessments (every ``flagged_every``-th flagged) with scores spread over [0, 1];
    every 11th has no score (an engine that gives none)."""
    items = [a(i, i % flagged_every == 0) for i in range(n)]
    scores = {f"id-{i}": (i * 37 % 101) / 100 for i in range(n) if i % 11 != 10}
    return items, scores


def test_a_band_of_zero_changes_nothing() -> None:
    items, scores = scored(2000)
    plain = review_reasons(items, 0.2, seed=5)
    assert review_reasons(items, 0.2, 5, scores=scores, threshold=0.5) == plain
    assert review_reasons(items, 0.2, 5, scores=scores, threshold=0.5, uncertainty_band=0.0) == (
        plain
    )
    assert "uncertainty" not in plain.values()


@pytest.mark.parametrize("rate", [0.0, 0.2, 1.0])
@pytest.mark.parametrize("band", [0.05, 0.2, 0.5])
def test_the_random_and_flagged_decisions_do_not_depend_on_the_band(
    rate: float, band: float
) -> None:
    items, scores = scored(2000)
    plain = review_reasons(items, rate, seed=9)
    banded = review_reasons(items, rate, 9, scores=scores, threshold=0.5, uncertainty_band=band)
    for reason in ("flagged", "random_sample"):
        assert {k for k, v in banded.items() if v == reason} == {
            k for k, v in plain.items() if v == reason
        }
    assert {k: v for k, v in banded.items() if v != "uncertainty"} == plain


@pytest.mark.parametrize(("threshold", "band"), [(0.5, 0.1), (0.5, 0.5), (0.3, 0.15)])
def test_uncertainty_goes_to_the_undrawn_unflagged_items_within_the_band_and_only_them(
    threshold: float, band: float
) -> None:
    items, scores = scored(3000)
    rate, seed = 0.2, 13
    reasons = review_reasons(
        items, rate, seed, scores=scores, threshold=threshold, uncertainty_band=band
    )
    near = 0
    for item in items:
        score = scores.get(item.log_id)
        drawn = sample_draw(item.log_id, seed) < rate
        within = score is not None and abs(score - threshold) <= band
        if item.requires_human_review:
            expected = "flagged"  # a flagged item stays flagged, however near its score
        elif drawn:
            expected = "random_sample"
        elif within:
            expected = "uncertainty"
            near += 1
        else:
            expected = None
        assert reasons.get(item.log_id) == expected, (item.log_id, score)
    assert near > 0
    # items without a score are never uncertainty-sampled, whatever the band
    unscored = [i.log_id for i in items if i.log_id not in scores]
    assert unscored and all(reasons.get(k) != "uncertainty" for k in unscored)


def test_the_band_is_inclusive_and_flagged_items_stay_flagged() -> None:
    items = [a(0, False), a(1, False), a(2, True), a(3, False)]
    scores = {"id-0": 0.4, "id-1": 0.39, "id-2": 0.5, "id-3": 0.6}
    reasons = review_reasons(items, 0.0, 0, scores=scores, threshold=0.5, uncertainty_band=0.1)
    assert reasons == {"id-0": "uncertainty", "id-2": "flagged", "id-3": "uncertainty"}
    assert near_threshold(0.5, 0.5, 0.0) is False  # a band of 0 is off, even on the threshold
    assert near_threshold(None, 0.5, 0.5) is False


def test_band_out_of_range() -> None:
    for band in (-0.01, 0.51):
        with pytest.raises(ValueError, match="uncertainty band"):
            review_reasons([], 0.2, 0, uncertainty_band=band)


class ListSink:
    """An in-memory ``refusal_audit.audit.pipeline.Sink`` keeping the assessments."""

    def __init__(self) -> None:
        self.assessments: list[StoredAssessment] = []

    def insert_events(self, events: Sequence[object]) -> None:
        pass

    def insert_assessments(self, items: Sequence[StoredAssessment]) -> None:
        self.assessments.extend(items)

    def insert_batches(self, batches: Sequence[object]) -> None:
        pass

    def insert_dead_letters(self, items: Sequence[object]) -> None:
        pass

    def stored_identities(self, keys: Sequence[tuple[str, str]]) -> Mapping[str, object]:
        return {}


@pytest.mark.integration
def test_the_batch_path_stores_uncertainty_reasons_with_the_local_engine(
    warehouse: Warehouse,
) -> None:
    band = 0.3  # wider than the local engine's own review margin, so it adds items
    run_batch(settings(review_uncertainty_band=band), [EXAMPLE_LOG], options(), sink=warehouse)
    rows = warehouse.select(
        "SELECT log_id, requires_human_review, sampled_for_review, review_reason, "
        "false_positive_score FROM {db:Identifier}.current_assessments"
    )
    plain = ListSink()
    run_batch(settings(), [EXAMPLE_LOG], options(), sink=plain)  # type: ignore[arg-type]
    before = {x.log_id: x.review_reason for x in plain.assessments}
    assert {r["log_id"] for r in rows} == set(before)

    near = [r for r in rows if r["review_reason"] == "uncertainty"]
    assert near, "the example log has unflagged refusals scored within the band"
    for r in near:
        assert not r["requires_human_review"] and r["sampled_for_review"]
        assert abs(r["false_positive_score"] - 0.5) <= band
        assert before[r["log_id"]] == ""  # unsampled without the band
    for r in rows:
        if r["review_reason"] != "uncertainty":  # flagged and random decisions unchanged
            assert r["review_reason"] == before[r["log_id"]]
    far = [r for r in rows if r["review_reason"] == "" and r["false_positive_score"] is not None]
    assert all(abs(r["false_positive_score"] - 0.5) > band for r in far)
