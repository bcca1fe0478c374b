"""Writing the clarification audit trail to the warehouse, as part of every step.

:class:`StepTrail` is the service's ``trail`` (``ClarifyService.trail``): the service
submits the states of a step (:meth:`StepTrail.submit`), and the HTTP answer or the Kafka
commit waits until their ``clarification_steps`` rows (``processors.clarification.trail.
step_row``) are stored, like the step's outputs. A writer thread inserts the rows of every
pending submission in one insert (group commit: concurrent steps share an insert, and a
lone step is written at once, with no batching delay), then completes each submission's
future, or fails it with :class:`~refusal_audit.clarification.service.TrailUnavailableError` when
the warehouse refused the insert (after the warehouse's own retries). Nothing is retried or
kept here: a failed step is answered 503 ``trail_unavailable`` (HTTP) or left uncommitted
(Kafka), and the same call again writes the row again.

Re-writing a row is harmless: the table keeps one row per (conversation, revision), and
every column but ``recorded_at`` is a function of the state. :meth:`StepTrail.reconcile`
(run at start-up over every stored state) remains as a safety net: it writes the newest step
of each conversation the trail is behind on (a step stored by a process that died before its
row was, and whose caller never retried).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

from processors.clarification.trail import step_row
from refusal_audit.clarification.service import TrailUnavailableError
from schemas.clarification import ConversationState
from warehouse.clarification import insert_steps, recorded_revisions
from warehouse.client import WarehouseError
from warehouse.store import Warehouse

log = logging.getLogger("refusal_audit.clarify")


def _utcnow() -> datetime:
    return datetime.now(UTC)


class StepTrail:
    """Writes step rows into ``store`` (module docstring); the service's ``StepLog``.

    ``rate``/``accepted_weight``: the review sample's settings (``clarify_review_*``);
    ``max_batch``: the most rows in one insert (the rest wait for the next one).
    ``written``/``inserts`` count the rows stored and the inserts that stored them.
    """

    def __init__(
        self,
        store: Warehouse,
        rate: float = 0.05,
        accepted_weight: float = 4.0,
        max_batch: int = 5000,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.store = store
        self.rate = rate
        self.accepted_weight = accepted_weight
        self.max_batch = max(1, max_batch)
        self.clock = clock
        self.written = 0
        self.inserts = 0
        self._pending: list[tuple[list[dict[str, Any]], Future[None]]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="clarify-trail", daemon=True)
        self._thread.start()

    def rows(self, states: Iterable[ConversationState]) -> list[dict[str, Any]]:
        """The step rows of ``states``, recorded now."""
        now = self.clock()
        return [step_row(s, now, self.rate, self.accepted_weight) for s in states]

    def submit(self, states: Sequence[ConversationState]) -> Future[None]:
        """Queue the rows of ``states`` for the next insert; the future completes once they
        are stored, or fails with ``TrailUnavailableError``. Never blocks on the warehouse.
        (A state whose row cannot be built is a bug: the exception propagates.)"""
        done: Future[None] = Future()
        rows = self.rows(states)
        if not rows:
            done.set_result(None)
            return done
        with self._cond:
            if self._closed:
                done.set_exception(TrailUnavailableError("the trail is closed"))
                return done
            self._pending.append((rows, done))
            self._cond.notify()
        return done

    def write(self, states: Sequence[ConversationState], timeout: float | None = None) -> None:
        """Store the rows of ``states`` and return once they are stored. Raises
        ``TrailUnavailableError`` (``TimeoutError`` after ``timeout`` seconds)."""
        self.submit(states).result(timeout)

    def reconcile(self, states: Iterable[ConversationState], chunk: int = 1000) -> int:
        """Write the current step of every state in ``states`` whose revision the trail does
        not hold yet; return how many. Raises ``WarehouseError``, ``TrailUnavailableError``."""
        written = 0
        batch: list[ConversationState] = []

        def flush() -> int:
            known = recorded_revisions(self.store, [s.conversation_id for s in batch])
            behind = [s for s in batch if known.get(s.conversation_id, -1) < s.revision]
            if behind:
                self.write(behind)
            batch.clear()
            return len(behind)

        for state in states:
            batch.append(state)
            if len(batch) >= chunk:
                written += flush()
        if batch:
            written += flush()
        return written

    def _take(self) -> list[tuple[list[dict[str, Any]], Future[None]]] | None:
        """The next group of submissions (at most ``max_batch`` rows, at least one
        submission), waiting for one; None once closed and drained."""
        with self._cond:
            while not self._pending:
                if self._closed:
                    return None
                self._cond.wait()
            taken: list[tuple[list[dict[str, Any]], Future[None]]] = []
            size = 0
            while self._pending:
                if taken and size + len(self._pending[0][0]) > self.max_batch:
                    break
                item = self._pending.pop(0)
                taken.append(item)
                size += len(item[0])
            return taken

    def _run(self) -> None:
        while (taken := self._take()) is not None:
            # a submission its caller gave up on (cancelled) is not written
            group = [(rows, f) for rows, f in taken if f.set_running_or_notify_cancel()]
            rows = [row for part, _ in group for row in part]
            if not rows:
                continue
            try:
                insert_steps(self.store, rows)
            except WarehouseError as exc:
                log.error("clarify: %d trail row(s) could not be written: %s", len(rows), exc)
                error = TrailUnavailableError(f"the warehouse refused the trail rows: {exc}")
                for _, future in group:
                    future.set_exception(error)
                continue
            except Exception as exc:  # never leave a caller waiting
                log.exception("clarify: writing %d trail row(s) failed", len(rows))
                for _, future in group:
                    future.set_exception(TrailUnavailableError(f"writing the trail: {exc}"))
                continue
            self.written += len(rows)
            self.inserts += 1
            for _, future in group:
                future.set_result(None)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued (up to ``timeout`` seconds) and stop the thread; later
        submissions fail."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
