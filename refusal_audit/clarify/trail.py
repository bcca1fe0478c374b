"""Writing the clarification audit trail to the warehouse, off the request path.

:class:`StepTrail` receives every state the service stores (``ClarifyService.on_change``),
turns it into its ``clarification_steps`` row (``processors.clarification.trail.step_row``)
and inserts the rows in batches from a thread of its own, so an HTTP answer never waits for
ClickHouse. A failed insert is retried (the warehouse's own retries, then again every
``retry_seconds``); rows are dropped only beyond ``max_pending``, with an error logged.

A crash can lose the rows still queued; :meth:`StepTrail.reconcile` (run at start-up over
every stored state) writes the newest step of each conversation the trail is behind on, so
the trail always ends at each conversation's current state, whose row carries its whole
history. Re-writing a row is harmless: the table keeps one row per (conversation, revision).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from processors.clarification.trail import step_row
from schemas.clarification import ConversationState
from warehouse.clarification import insert_steps, recorded_revisions
from warehouse.client import WarehouseError
from warehouse.store import Warehouse

log = logging.getLogger("refusal_audit.clarify")


def _utcnow() -> datetime:
    return datetime.now(UTC)


class StepTrail:
    """Batches step rows into ``store`` (see the module docstring).

    ``rate``/``accepted_weight``: the review sample's settings (``clarify_review_*``).
    """

    def __init__(
        self,
        store: Warehouse,
        rate: float = 0.05,
        accepted_weight: float = 4.0,
        flush_seconds: float = 0.5,
        retry_seconds: float = 5.0,
        max_pending: int = 100_000,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.store = store
        self.rate = rate
        self.accepted_weight = accepted_weight
        self.flush_seconds = flush_seconds
        self.retry_seconds = retry_seconds
        self.max_pending = max_pending
        self.clock = clock
        self.written = 0
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name="clarify-trail", daemon=True)
        self._thread.start()

    def record(self, state: ConversationState) -> None:
        """Queue the step row of ``state`` (never raises)."""
        try:
            row = step_row(state, self.clock(), self.rate, self.accepted_weight)
        except Exception:  # a trail problem must never fail a user's request
            log.exception("clarify: no trail row for %s", state.conversation_id)
            return
        with self._lock:
            if len(self._pending) >= self.max_pending:
                log.error("clarify: trail queue full; step %s/%s not logged",
                          state.conversation_id, state.revision)  # fmt: skip
                return
            self._pending.append(row)
            self._idle.clear()
        self._wake.set()

    def reconcile(self, states: Iterable[ConversationState], chunk: int = 1000) -> int:
        """Queue the current step of every state in ``states`` whose revision the trail does
        not hold yet; return how many. Raises ``WarehouseError``."""
        queued = 0
        batch: list[ConversationState] = []

        def flush() -> int:
            known = recorded_revisions(self.store, [s.conversation_id for s in batch])
            behind = [s for s in batch if known.get(s.conversation_id, -1) < s.revision]
            for state in behind:
                self.record(state)
            batch.clear()
            return len(behind)

        for state in states:
            batch.append(state)
            if len(batch) >= chunk:
                queued += flush()
        if batch:
            queued += flush()
        return queued

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.flush_seconds)
            self._wake.clear()
            self._write()

    def _write(self) -> bool:
        with self._lock:
            rows, self._pending = self._pending, []
        if not rows:
            self._idle.set()
            return True
        try:
            insert_steps(self.store, rows)
        except WarehouseError as exc:
            log.error("clarify: the trail could not be written (%d rows kept, retrying): %s",
                      len(rows), exc)  # fmt: skip
            with self._lock:
                self._pending = rows + self._pending
            self._stop.wait(self.retry_seconds)
            return False
        self.written += len(rows)
        with self._lock:
            if not self._pending:
                self._idle.set()
        return True

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every queued row is written (True) or ``timeout`` passes (False)."""
        self._wake.set()
        return self._idle.wait(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued (up to ``timeout`` seconds) and stop the thread."""
        self.flush(timeout)
        self._stop.set()
        self._wake.set()
        self._thread.join(5.0)
        if self._pending:
            self._write()
