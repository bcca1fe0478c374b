"""Batcher: count and token bounds, per-bundle grouping, order and determinism."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from processors.batching import Batcher, event_tokens, make_batches
from processors.tokens import count_tokens
from schemas.events import RefusalEvent

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ev(i: int, bundle: str = "default", text: str = "I can't help with that.") -> RefusalEvent:
    return RefusalEvent(
        log_id=f"e{i}",
        event_time=T0,
        request=f"request {i}",
        response=text,
        model="m",
        policy_bundle=bundle,
    )


def test_count_tokens_is_offline_o200k() -> None:
    assert count_tokens("") == 0
    assert count_tokens("hello world") == 2  # o200k_base: "hello", " world"
    assert count_tokens("hello world " * 50) > count_tokens("hello world")


def test_max_events_bound() -> None:
    batches = make_batches([ev(i) for i in range(23)], max_events=10, token_budget=10**6)
    assert [len(b.events) for b in batches] == [10, 10, 3]
    assert [e.log_id for b in batches for e in b.events] == [f"e{i}" for i in range(23)]


def test_token_budget_bound() -> None:
    events = [ev(i) for i in range(20)]
    per = event_tokens(events[0])
    budget = per * 4 + 1
    batches = make_batches(events, max_events=100, token_budget=budget)
    assert all(b.tokens is not None and b.tokens <= budget for b in batches)
    assert all(b.tokens == sum(event_tokens(e) for e in b.events) for b in batches)
    assert sum(len(b.events) for b in batches) == 20
    assert max(len(b.events) for b in batches) == 4


def test_without_a_token_budget_batches_close_by_count_and_nothing_is_counted() -> None:
    counted: list[str] = []

    def count(event: RefusalEvent) -> int:
        counted.append(event.log_id)
        return 10**9

    events = [ev(0), ev(1, text="word " * 2000), *(ev(i) for i in range(2, 7))]
    batcher = Batcher(max_events=3, token_budget=None, count=count)
    batches = [b for e in events for b in batcher.add(e)] + batcher.flush()
    assert [b.log_ids for b in batches] == [["e0", "e1", "e2"], ["e3", "e4", "e5"], ["e6"]]
    assert all(b.tokens is None for b in batches)
    assert counted == []
    # the same events with a budget: the long one is alone, and every event is counted
    bounded = make_batches(events, max_events=3, token_budget=200)
    assert [b.log_ids for b in bounded][:2] == [["e0"], ["e1"]]


def test_oversized_event_gets_its_own_batch() -> None:
    big = ev(1, text="word " * 2000)
    batches = make_batches([ev(0), big, ev(2)], max_events=10, token_budget=200)
    assert [b.log_ids for b in batches] == [["e0"], ["e1"], ["e2"]]


def test_batches_are_per_bundle() -> None:
    events = [ev(i, bundle="a" if i % 2 else "b") for i in range(9)]
    batches = make_batches(events, max_events=3, token_budget=10**6)
    for batch in batches:
        assert {e.policy_bundle for e in batch.events} == {batch.policy_bundle}
    assert sorted(len(b.events) for b in batches) == [1, 2, 3, 3]


def test_incremental_add_and_pending() -> None:
    batcher = Batcher(max_events=2, token_budget=10**6)
    assert batcher.add(ev(0)) == []
    assert batcher.pending() == 1
    closed = batcher.add(ev(1))
    assert [b.log_ids for b in closed] == [["e0", "e1"]]
    assert batcher.pending() == 0
    assert batcher.flush() == []


def test_invalid_bounds() -> None:
    with pytest.raises(ValueError):
        Batcher(0, 100)
    with pytest.raises(ValueError):
        Batcher(0, None)
