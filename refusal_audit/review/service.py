"""The review app's operations, independent of HTTP: queues, claims, verdicts (issue 10).

``ReviewService`` hands out review items one at a time under a lease
(``processors.leases``), stores verdicts (``warehouse.review``) and enforces
``reviews_per_item`` on the server: an item is handed out only while it needs verdicts, and a
verdict is accepted only from the lease holder, from a reviewer revising their own verdict,
or (after a lease expired or the server restarted) while the item still needs one and nobody
else holds it. Claims and submits are decided under the registry's lock, so concurrent
requests never give one item to two reviewers at once.

Every method blocks on the warehouse: call it from a worker thread in async code. Errors:
``ReviewRefused`` (the request cannot be granted; the message says why), ``WarehouseError``
(the warehouse failed; nothing was stored, the request can be retried).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from processors.leases import Lease, LeaseRegistry
from processors.review import RowError, make_verdict
from processors.review_queue import (
    ItemKey,
    QueueProgress,
    ReviewItem,
    in_queue,
    make_item,
    pick_next,
    progress,
    reasons_of,
)
from schemas.policy import PolicyBundle
from schemas.review import ALL_ITEMS, ReviewQueue, Verdict, VerdictInput
from warehouse.review import (
    insert_verdicts,
    item_detail,
    review_item_rows,
    reviewers_per_item,
    save_queue,
    saved_queues,
    verdict_history,
    verdicts_on,
)
from warehouse.store import Warehouse


class ReviewRefused(Exception):
    """A review request that cannot be granted (unknown queue or item, an item held by or
    completed by others, a re-audited assessment, a bad correction). ``status`` is the HTTP
    status that fits (404 or 409 or 422)."""

    def __init__(self, message: str, status: int = 409) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ItemView:
    """Everything the item page shows: the current assessment with the event's redacted
    texts (``assessment``), its bundle, the cited clause, why it is in review, the lease
    (when the viewer holds it), the viewer's own current verdict and, for admins, every
    reviewer's verdicts."""

    assessment: dict[str, Any]
    bundle: PolicyBundle
    key: ItemKey
    reasons: tuple[str, ...]
    lease: Lease[ItemKey] | None
    held_by_other: bool
    mine: Verdict | None
    others: list[Verdict]
    reviewers_needed: int
    reviewers_done: int


class ReviewService:
    """Queues, claims and verdicts over one warehouse.

    ``bundles``: the configured policy bundles by name; ``reviews_per_item``: verdicts each
    item needs (>= 1); ``lease_seconds``: lease duration; ``clock``: monotonic seconds for
    leases; ``now``: wall time for verdicts and queue changes.
    """

    def __init__(
        self,
        store: Warehouse,
        bundles: Mapping[str, PolicyBundle],
        reviews_per_item: int = 1,
        lease_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if reviews_per_item < 1:
            raise ValueError("reviews_per_item must be at least 1")
        self.store = store
        self.bundles = dict(bundles)
        self.reviews_per_item = reviews_per_item
        self.leases: LeaseRegistry[ItemKey] = LeaseRegistry(lease_seconds, clock)
        self.now = now

    # ---- queues -----------------------------------------------------------------------

    def _top_level(self, bundle_name: str) -> Callable[[str], str]:
        bundle = self.bundles.get(bundle_name)
        return bundle.top_level if bundle is not None else (lambda code: code)

    def items(self) -> list[ReviewItem]:
        """Every review item, oldest event first."""
        return [
            make_item(row, self._top_level(row["policy_bundle"]))
            for row in review_item_rows(self.store)
        ]

    def queues(self) -> list[ReviewQueue]:
        """The built-in ``all`` queue, then the saved ones."""
        return [ALL_ITEMS, *(q for q in saved_queues(self.store) if q.name != ALL_ITEMS.name)]

    def queue(self, name: str) -> ReviewQueue:
        """The queue called ``name``. Raises ``ReviewRefused`` (404) when there is none."""
        found = next((q for q in self.queues() if q.name == name), None)
        if found is None:
            raise ReviewRefused(f"no queue called {name!r}", 404)
        return found

    def overview(self) -> list[tuple[ReviewQueue, QueueProgress]]:
        """Each queue with its progress."""
        items = self.items()
        reviewed = reviewers_per_item(self.store)
        return [(q, progress(q, items, reviewed, self.reviews_per_item)) for q in self.queues()]

    def save_queue(self, queue: ReviewQueue, by: str) -> None:
        """Create or replace a saved queue. Raises ``ReviewRefused`` for the built-in one."""
        if queue.name == ALL_ITEMS.name:
            raise ReviewRefused("the queue 'all' is built in and cannot be changed", 422)
        if queue.policy_bundle is not None and queue.policy_bundle not in self.bundles:
            raise ReviewRefused(f"policy bundle {queue.policy_bundle!r} is not configured", 422)
        if queue.category is not None:
            bundles = (
                [self.bundles[queue.policy_bundle]]
                if queue.policy_bundle
                else list(self.bundles.values())
            )
            if not any(queue.category in b.category_codes() for b in bundles):
                raise ReviewRefused(
                    f"category {queue.category!r} is in no configured taxonomy "
                    "(use a code or a top-level code)",
                    422,
                )
        save_queue(self.store, queue, by, self.now())

    def delete_queue(self, name: str, by: str) -> None:
        """Delete a saved queue. Raises ``ReviewRefused`` for an unknown or built-in one."""
        queue = self.queue(name)
        if queue.name == ALL_ITEMS.name:
            raise ReviewRefused("the queue 'all' is built in and cannot be deleted", 422)
        save_queue(self.store, queue, by, self.now(), deleted=True)

    # ---- claims -----------------------------------------------------------------------

    def claim(self, reviewer: str, queue_name: str) -> ReviewItem | None:
        """Give ``reviewer`` the next item of the queue under a lease: the item they already
        hold there (renewed), else the oldest one that needs a verdict, that they have not
        judged or skipped and nobody else holds. None when the queue has nothing for them
        (their lease elsewhere is then released). Atomic under concurrent calls."""
        queue = self.queue(queue_name)
        with self.leases.lock:
            items = [i for i in self.items() if in_queue(queue, i)]
            reviewed = reviewers_per_item(self.store)
            held = self.leases.held_by(reviewer)
            if held is not None:
                mine = next((i for i in items if i.key == held.key), None)
                if mine is not None and reviewer not in reviewed.get(mine.key, set()):
                    self.leases.grant(mine.key, reviewer)
                    return mine
            chosen = pick_next(
                items,
                reviewer,
                reviewed,
                self.leases.unavailable_to(reviewer),
                self.reviews_per_item,
            )
            if chosen is None:
                self.leases.release_all(reviewer)
                return None
            self.leases.grant(chosen.key, reviewer)
            return chosen

    def skip(self, reviewer: str, key: ItemKey) -> None:
        """Return ``key`` to the queue and keep it from ``reviewer`` until ``unskip``.
        Raises ``ReviewRefused`` (409) when ``reviewer`` does not hold ``key``."""
        with self.leases.lock:
            if self.leases.holder(key) != reviewer:
                raise ReviewRefused("you do not hold this item (your lease may have expired)")
            self.leases.skip(key, reviewer)

    def unskip(self, reviewer: str) -> None:
        """Offer ``reviewer``'s skipped items again."""
        self.leases.clear_skips(reviewer)

    def skipped(self, reviewer: str) -> int:
        """How many items ``reviewer`` skipped."""
        return self.leases.skipped(reviewer)

    # ---- items and verdicts -------------------------------------------------------------

    def _bundle(self, name: str) -> PolicyBundle:
        bundle = self.bundles.get(name)
        if bundle is None:
            raise ReviewRefused(f"policy bundle {name!r} is not configured on this server", 404)
        return bundle

    def view(self, viewer: str, policy_bundle: str, log_id: str, admin: bool) -> ItemView:
        """The item page of ``log_id``'s current assessment under ``policy_bundle``.

        Raises ``ReviewRefused`` (404) when there is no such assessment or it is not in
        review (admins may look at any current assessment).
        """
        bundle = self._bundle(policy_bundle)
        row = item_detail(self.store, policy_bundle, log_id)
        if row is None:
            raise ReviewRefused(f"no current assessment of {log_id!r} under {policy_bundle!r}", 404)
        reasons = reasons_of(row, bundle.top_level(row["category"]))
        key: ItemKey = (policy_bundle, log_id, row["audited_at"])
        current = [v for v in verdicts_on(self.store, policy_bundle, log_id)
                   if v.assessment_audited_at == row["audited_at"]]  # fmt: skip
        mine = next((v for v in current if v.reviewer == viewer), None)
        if not reasons and mine is None and not admin:
            raise ReviewRefused(f"{log_id!r} is not in review", 404)
        lease = self.leases.held_by(viewer)
        holder = self.leases.holder(key)
        return ItemView(
            assessment=row,
            bundle=bundle,
            key=key,
            reasons=reasons,
            lease=lease if lease is not None and lease.key == key else None,
            held_by_other=holder is not None and holder != viewer,
            mine=mine,
            others=[v for v in current if v.reviewer != viewer] if admin else [],
            reviewers_needed=self.reviews_per_item,
            reviewers_done=len({v.reviewer for v in current}),
        )

    def submit(self, item: VerdictInput, policy_bundle: str, audited_at: datetime) -> Verdict:
        """Store ``item`` (its ``reviewer`` is the logged-in reviewer) as a verdict on the
        assessment of ``item.log_id`` audited at ``audited_at``, and end the lease on it.

        Raises ``ReviewRefused``: the assessment was re-audited since (409), the item is
        held by another reviewer or already has its verdicts (409), the correction names a
        category or clause the bundle lacks (422). ``WarehouseError`` when the verdict could
        not be stored (nothing was; retrying is safe, the verdict id is deterministic).
        """
        bundle = self._bundle(policy_bundle)
        row = item_detail(self.store, policy_bundle, item.log_id)
        if row is None:
            raise ReviewRefused(f"no current assessment of {item.log_id!r}", 404)
        if row["audited_at"] != audited_at:
            raise ReviewRefused(
                "this event was re-audited after you opened it: the new assessment is a new "
                "item; open it again to judge the current verdict",
            )
        key: ItemKey = (policy_bundle, item.log_id, audited_at)
        try:
            verdict = make_verdict(item, row, bundle, self.now(), "web")
        except RowError as exc:
            raise ReviewRefused(str(exc), 422) from exc
        reviewer = item.reviewer
        with self.leases.lock:
            holder = self.leases.holder(key)
            done = reviewers_per_item(self.store).get(key, set())
            if holder is not None and holder != reviewer:
                raise ReviewRefused("another reviewer holds this item now")
            if reviewer not in done and holder != reviewer:
                if not reasons_of(row, bundle.top_level(row["category"])):
                    raise ReviewRefused(f"{item.log_id!r} is not in review", 404)
                if len(done) >= self.reviews_per_item:
                    raise ReviewRefused(
                        f"this item already has its {self.reviews_per_item} verdict(s) from "
                        "other reviewers"
                    )
            insert_verdicts(self.store, [verdict])
            self.leases.release(key, reviewer)
        return verdict

    def history(self, reviewer: str, limit: int = 200) -> list[Verdict]:
        """``reviewer``'s current verdicts, newest first."""
        return verdict_history(self.store, reviewer, limit)
