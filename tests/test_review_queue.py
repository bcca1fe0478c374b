"""Review items, queues and leases as pure logic (issue 10)."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from processors.leases import LeaseRegistry
from processors.review_queue import (
    ReviewItem,
    in_queue,
    make_item,
    pick_next,
    progress,
    reasons_of,
)
from schemas.review import ReviewQueue

T = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)


def row(**overrides: Any) -> dict[str, Any]:
    base = {
        "policy_bundle": "default",
        "log_id": "a",
        "audited_at": T,
        "event_time": T,
        "model": "m1",
        "product": "p1",
        "category": "privacy",
        "is_estimated_false_positive": False,
        "policy_clause_cited": "AUP-2.7",
        "requires_human_review": True,
        "review_reason": "flagged",
    }
    return {**base, **overrides}


def top_level(code: str) -> str:
    return {"privacy": "genuine_safety_refusal"}.get(code, code)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"is_estimated_false_positive": True}, ("estimated_false_positive",)),
        ({"policy_clause_cited": None}, ("policy_gap",)),
        ({"category": "policy_gray_zone"}, ("gray_zone",)),
        ({}, ("low_confidence",)),
        (
            {"is_estimated_false_positive": True, "policy_clause_cited": None},
            ("estimated_false_positive", "policy_gap"),
        ),
        ({"requires_human_review": False, "review_reason": "random_sample"}, ("random_sample",)),
        ({"requires_human_review": False, "review_reason": "uncertainty"}, ("uncertainty",)),
        ({"requires_human_review": False, "review_reason": ""}, ()),
    ],
)
def test_review_reasons_refine_flagged_and_sampled(
    overrides: dict[str, Any], expected: tuple[str, ...]
) -> None:
    r = row(**overrides)
    assert reasons_of(r, top_level(r["category"])) == expected


def item(log_id: str, **overrides: Any) -> ReviewItem:
    return make_item(row(log_id=log_id, **overrides), top_level)


def test_a_queue_filters_on_uncertainty_apart_from_the_random_sample() -> None:
    near = item("near", requires_human_review=False, review_reason="uncertainty")
    drawn = item("drawn", requires_human_review=False, review_reason="random_sample")
    queue = ReviewQueue(name="near-threshold", review_reason="uncertainty")
    assert in_queue(queue, near) and not in_queue(queue, drawn)
    assert not in_queue(ReviewQueue(name="q", review_reason="random_sample"), near)


def test_queue_filters_each_field_and_the_period_in_utc_days() -> None:
    it = item("a", event_time=datetime(2026, 12, 1, 0, 30, tzinfo=UTC))
    assert in_queue(ReviewQueue(name="all"), it)
    assert in_queue(ReviewQueue(name="q", category="genuine_safety_refusal"), it)  # top level
    assert in_queue(ReviewQueue(name="q", category="privacy"), it)
    assert not in_queue(ReviewQueue(name="q", category="over_refusal"), it)
    assert not in_queue(ReviewQueue(name="q", model="m2"), it)
    assert not in_queue(ReviewQueue(name="q", product="p2"), it)
    assert not in_queue(ReviewQueue(name="q", policy_bundle="other"), it)
    assert in_queue(ReviewQueue(name="q", review_reason="low_confidence"), it)
    assert not in_queue(ReviewQueue(name="q", review_reason="random_sample"), it)
    assert in_queue(ReviewQueue(name="q", since=date(2026, 12, 1), until=date(2026, 12, 1)), it)
    assert not in_queue(ReviewQueue(name="q", until=date(2026, 11, 30)), it)
    assert not in_queue(ReviewQueue(name="q", since=date(2026, 12, 2)), it)


def test_a_queue_with_a_bad_name_or_period_is_refused() -> None:
    with pytest.raises(ValidationError):
        ReviewQueue(name="has space")
    with pytest.raises(ValidationError, match="since is after until"):
        ReviewQueue(name="q", since=date(2026, 12, 2), until=date(2026, 12, 1))
    with pytest.raises(ValidationError):
        ReviewQueue.model_validate({"name": "q", "review_reason": "flagged"})


def test_pick_next_skips_done_judged_and_unavailable_items() -> None:
    items = [item(x) for x in "abcd"]
    keys = {i.log_id: i.key for i in items}
    reviewed = {keys["a"]: {"ann", "bob"}, keys["b"]: {"ann"}}
    # a: done (2 of 2); b: ann judged it; c: held by someone else
    chosen = pick_next(items, "ann", reviewed, {keys["c"]}, reviews_per_item=2)
    assert chosen is not None and chosen.log_id == "d"
    chosen = pick_next(items, "cid", reviewed, set(), reviews_per_item=2)
    assert chosen is not None and chosen.log_id == "b"  # needs a second verdict
    assert pick_next(items, "ann", reviewed, {keys["c"], keys["d"]}, 2) is None


def test_progress_counts_done_items_and_verdicts_per_reviewer() -> None:
    items = [item("a"), item("b"), item("c", model="m2")]
    reviewed = {items[0].key: {"ann", "bob"}, items[1].key: {"ann"}}
    p = progress(ReviewQueue(name="m1", model="m1"), items, reviewed, reviews_per_item=2)
    assert (p.total, p.done, p.open) == (2, 1, 1)
    assert p.by_reviewer == {"ann": 2, "bob": 1}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_leases_hold_one_item_per_reviewer_and_expire() -> None:
    clock = Clock()
    leases: LeaseRegistry[str] = LeaseRegistry(300, clock)
    leases.grant("x", "ann")
    with pytest.raises(LookupError):
        leases.grant("x", "bob")
    assert leases.unavailable_to("bob") == {"x"}
    assert leases.unavailable_to("ann") == set()
    leases.grant("y", "ann")  # taking another item ends the first lease
    assert leases.holder("x") is None and leases.holder("y") == "ann"
    clock.t = 299.9
    assert leases.holder("y") == "ann"
    clock.t = 300.0
    assert leases.holder("y") is None and leases.held_by("ann") is None
    leases.grant("y", "bob")
    leases.skip("y", "bob")
    assert leases.holder("y") is None and leases.unavailable_to("bob") == {"y"}
    leases.clear_skips("bob")
    assert leases.unavailable_to("bob") == set()
    with pytest.raises(ValueError):
        LeaseRegistry(0)


def test_concurrent_grants_give_an_item_to_one_reviewer() -> None:
    leases: LeaseRegistry[str] = LeaseRegistry(300)
    winners: list[str] = []
    start = threading.Barrier(16)

    def claim(name: str) -> None:
        start.wait()
        try:
            leases.grant("only", name)
        except LookupError:
            return
        winners.append(name)

    threads = [threading.Thread(target=claim, args=(f"r{i}",)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and leases.holder("only") == winners[0]
