"""Leases on review items: who holds which item, until when (issue 10; pure, in memory).

A reviewer holds at most one item at a time; an item is held by at most one reviewer; a
lease ends when its holder submits, skips or takes another item, or after ``duration``
seconds. The registry is thread-safe: callers that must decide and grant atomically (look up
the open items, then take the first free one) do so inside ``with registry.lock:``.

Leases live in the review server's memory: a restart returns every held item to its queue
(a reviewer's verdict on it is still accepted; see ``refusal_audit.review.service``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Lease(Generic[K]):
    """``reviewer`` holds ``key`` until ``expires`` (``clock`` seconds)."""

    key: K
    reviewer: str
    expires: float


class LeaseRegistry(Generic[K]):
    """In-memory leases; ``clock`` is a monotonic clock in seconds (``time.monotonic``).

    Raises ``ValueError`` for a non-positive ``duration``.
    """

    def __init__(self, duration: float, clock: Callable[[], float] = time.monotonic) -> None:
        if duration <= 0:
            raise ValueError(f"lease duration {duration} must be positive")
        self.duration = duration
        self.clock = clock
        self.lock = threading.RLock()
        self._by_key: dict[K, Lease[K]] = {}
        self._by_reviewer: dict[str, Lease[K]] = {}
        self._skipped: dict[str, set[K]] = {}

    def _expire(self) -> None:
        now = self.clock()
        for lease in [x for x in self._by_key.values() if x.expires <= now]:
            del self._by_key[lease.key]
            if self._by_reviewer.get(lease.reviewer) == lease:
                del self._by_reviewer[lease.reviewer]

    def held_by(self, reviewer: str) -> Lease[K] | None:
        """``reviewer``'s unexpired lease, if any."""
        with self.lock:
            self._expire()
            return self._by_reviewer.get(reviewer)

    def holder(self, key: K) -> str | None:
        """Who holds ``key`` now (None when free)."""
        with self.lock:
            self._expire()
            lease = self._by_key.get(key)
            return lease.reviewer if lease is not None else None

    def unavailable_to(self, reviewer: str) -> set[K]:
        """Keys ``reviewer`` may not take now: held by others, or skipped by ``reviewer``."""
        with self.lock:
            self._expire()
            held = {k for k, x in self._by_key.items() if x.reviewer != reviewer}
            return held | self._skipped.get(reviewer, set())

    def grant(self, key: K, reviewer: str) -> Lease[K]:
        """Give ``key`` to ``reviewer`` (ending their other lease) or renew their lease on it.

        Raises ``LookupError`` when another reviewer holds ``key``.
        """
        with self.lock:
            self._expire()
            current = self._by_key.get(key)
            if current is not None and current.reviewer != reviewer:
                raise LookupError(f"item held by {current.reviewer}")
            self.release_all(reviewer)
            lease = Lease(key, reviewer, self.clock() + self.duration)
            self._by_key[key] = lease
            self._by_reviewer[reviewer] = lease
            return lease

    def release(self, key: K, reviewer: str) -> None:
        """End ``reviewer``'s lease on ``key`` (nothing when they do not hold it)."""
        with self.lock:
            lease = self._by_key.get(key)
            if lease is not None and lease.reviewer == reviewer:
                del self._by_key[key]
                self._by_reviewer.pop(reviewer, None)

    def release_all(self, reviewer: str) -> None:
        """End whatever lease ``reviewer`` holds."""
        with self.lock:
            lease = self._by_reviewer.pop(reviewer, None)
            if lease is not None:
                self._by_key.pop(lease.key, None)

    def skip(self, key: K, reviewer: str) -> None:
        """Release ``key`` and keep it from ``reviewer`` until ``clear_skips``."""
        with self.lock:
            self.release(key, reviewer)
            self._skipped.setdefault(reviewer, set()).add(key)

    def skipped(self, reviewer: str) -> int:
        """How many items ``reviewer`` has skipped."""
        with self.lock:
            return len(self._skipped.get(reviewer, set()))

    def clear_skips(self, reviewer: str) -> None:
        """Offer ``reviewer``'s skipped items again."""
        with self.lock:
            self._skipped.pop(reviewer, None)
