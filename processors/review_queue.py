"""Review items, queues and who gets which item next (issue 10; pure, no I/O).

A review item is a current assessment that requires human review or was sampled for it.
Its ``reasons`` refine the stored ``review_reason`` (``flagged`` / ``random_sample`` /
``uncertainty``) into what a queue filters on (``schemas.review.REVIEW_REASONS``):

- ``estimated_false_positive``: the engine judged the refusal an over-refusal;
- ``policy_gap``: flagged, and no clause of the bundle applies (``policy_clause_cited`` null);
- ``gray_zone``: flagged, with a category under the taxonomy's ``policy_gray_zone``;
- ``low_confidence``: flagged for none of the above: the engine was unsure (for the local
  engine, a score near its threshold or a weakly matched clause);
- ``random_sample``: drawn by the seeded random review sample (``processors.sampling``);
- ``uncertainty``: unflagged and not drawn, but its over-refusal score lies within
  ``review_uncertainty_band`` of the engine's threshold (``processors.sampling``); never part
  of the random sample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from typing import Any

from schemas.review import ReviewQueue

ItemKey = tuple[str, str, datetime]  # (policy_bundle, log_id, the assessment's audited_at)


@dataclass(frozen=True)
class ReviewItem:
    """One review item, without its texts (what queues and claims need).

    ``key`` = (policy bundle, log id, audited_at of the judged assessment): a re-audit of the
    same event is a new item. ``top_category`` is ``category``'s top-level taxonomy code.
    """

    key: ItemKey
    event_time: datetime
    model: str
    product: str
    category: str
    top_category: str
    estimated_false_positive: bool
    reasons: tuple[str, ...]

    @property
    def policy_bundle(self) -> str:
        return self.key[0]

    @property
    def log_id(self) -> str:
        return self.key[1]


def reasons_of(row: Mapping[str, Any], top_category: str) -> tuple[str, ...]:
    """Why a ``current_assessments`` row is in review (see the module docstring); empty
    when it is neither flagged nor sampled."""
    reasons: list[str] = []
    if row["requires_human_review"]:
        if row["is_estimated_false_positive"]:
            reasons.append("estimated_false_positive")
        if row["policy_clause_cited"] is None:
            reasons.append("policy_gap")
        if top_category == "policy_gray_zone":
            reasons.append("gray_zone")
        if not reasons:
            reasons.append("low_confidence")
    if row["review_reason"] in ("random_sample", "uncertainty"):
        reasons.append(row["review_reason"])
    return tuple(reasons)


def make_item(row: Mapping[str, Any], top_level: Callable[[str], str]) -> ReviewItem:
    """A ``ReviewItem`` from a ``current_assessments`` row; ``top_level`` maps a category
    code to its top-level code (the bundle's ``top_level``)."""
    top = top_level(row["category"])
    return ReviewItem(
        key=(row["policy_bundle"], row["log_id"], row["audited_at"]),
        event_time=row["event_time"],
        model=row["model"],
        product=row["product"],
        category=row["category"],
        top_category=top,
        estimated_false_positive=bool(row["is_estimated_false_positive"]),
        reasons=reasons_of(row, top),
    )


def in_queue(queue: ReviewQueue, item: ReviewItem) -> bool:
    """Whether ``item`` passes every filter ``queue`` sets."""
    if queue.policy_bundle is not None and item.policy_bundle != queue.policy_bundle:
        return False
    if queue.model is not None and item.model != queue.model:
        return False
    if queue.product is not None and item.product != queue.product:
        return False
    if queue.category is not None and queue.category not in (item.category, item.top_category):
        return False
    if queue.review_reason is not None and queue.review_reason not in item.reasons:
        return False
    moment = item.event_time.astimezone(UTC)
    if queue.since is not None and moment < datetime.combine(queue.since, time(), UTC):
        return False
    until = queue.until
    return until is None or moment < datetime.combine(until, time(), UTC) + timedelta(days=1)


def pick_next(
    items: Sequence[ReviewItem],
    reviewer: str,
    reviewed_by: Mapping[ItemKey, set[str]],
    unavailable: set[ItemKey],
    reviews_per_item: int,
) -> ReviewItem | None:
    """The first item (in ``items``' order) ``reviewer`` may take: it still needs verdicts
    (fewer than ``reviews_per_item`` reviewers in ``reviewed_by``), ``reviewer`` has not
    judged it, and it is not in ``unavailable`` (held by someone else, or skipped)."""
    for item in items:
        done = reviewed_by.get(item.key, set())
        if reviewer in done or len(done) >= reviews_per_item or item.key in unavailable:
            continue
        return item
    return None


@dataclass
class QueueProgress:
    """A queue's progress: ``total`` items, ``done`` (with all their verdicts), ``open``
    (still needing a verdict) and verdicts per reviewer among the queue's items."""

    total: int = 0
    done: int = 0
    by_reviewer: dict[str, int] = field(default_factory=dict)

    @property
    def open(self) -> int:
        return self.total - self.done


def progress(
    queue: ReviewQueue,
    items: Iterable[ReviewItem],
    reviewed_by: Mapping[ItemKey, set[str]],
    reviews_per_item: int,
) -> QueueProgress:
    """``QueueProgress`` of ``queue`` over ``items``."""
    result = QueueProgress()
    for item in items:
        if not in_queue(queue, item):
            continue
        result.total += 1
        done = reviewed_by.get(item.key, set())
        if len(done) >= reviews_per_item:
            result.done += 1
        for name in done:
            result.by_reviewer[name] = result.by_reviewer.get(name, 0) + 1
    return result
