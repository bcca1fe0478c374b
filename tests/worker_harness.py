"""Run the streaming worker in a subprocess with optional faults (tests only).

``python tests/worker_harness.py`` runs ``refusal_audit.streaming.worker.run_worker`` with the
settings from the environment. ``HARNESS_FAULT`` injects one fault:

- ``transient:N`` -- the first N ClickHouse inserts raise ``OperationalError`` (the
  warehouse's retries with backoff must absorb them);
- ``fatal:N`` -- the first N ``insert_assessments`` calls raise ``WarehouseError`` past the
  retries (the worker must stop without acking, exit status 70);
- ``slow:SECONDS`` -- the first engine call (``LocalEngine.audit``) busy-spins the CPU for
  SECONDS before auditing, holding the GIL like real CPU-bound audit work would; it logs
  ``harness: slow engine call started`` / ``... finished`` (JSON lines on stderr) around
  the spin, so a test can act while the window is being processed.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from clickhouse_connect.driver.exceptions import OperationalError

from processors.engines.base import EngineOutput
from processors.engines.local import LocalEngine
from refusal_audit.audit.pipeline import Sink
from refusal_audit.config import load_settings
from refusal_audit.streaming.worker import run_worker
from schemas.audit import StoredAssessment
from schemas.events import RefusalEvent
from schemas.policy import PolicyBundle
from warehouse.client import WarehouseError

log = logging.getLogger("refusal_audit.harness")

SLOW_STARTED = "harness: slow engine call started"
SLOW_FINISHED = "harness: slow engine call finished"


class Countdown:
    """Fails the first ``n`` calls."""

    def __init__(self, n: int) -> None:
        self.left = n

    def fire(self) -> bool:
        if self.left > 0:
            self.left -= 1
            return True
        return False


class FatalSink:
    """Delegates to the warehouse; ``insert_assessments`` raises while the countdown runs."""

    def __init__(self, inner: Any, countdown: Countdown) -> None:
        self.inner = inner
        self.countdown = countdown

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def insert_assessments(self, items: Sequence[StoredAssessment]) -> None:
        if self.countdown.fire():
            raise WarehouseError("injected: ClickHouse unavailable")
        self.inner.insert_assessments(items)


def fault() -> tuple[str, str]:
    """``HARNESS_FAULT`` as (kind, argument)."""
    kind, _, arg = os.environ.get("HARNESS_FAULT", "").partition(":")
    return kind, arg


def wrap(inner: Sink) -> Sink:
    kind, count = fault()
    if kind == "fatal":
        return FatalSink(inner, Countdown(int(count or 0)))
    if kind == "transient":
        countdown = Countdown(int(count or 0))
        client = inner.client  # type: ignore[attr-defined]
        # the driver's row inserts and the columnar ones (the events' and results' tables,
        # warehouse.columnar) share the countdown
        for name in ("insert", "insert_arrow"):
            setattr(client, name, _flaky(getattr(client, name), countdown))
    return inner


def _flaky(real: Any, countdown: Countdown) -> Any:
    """``real`` failing with a transient error while ``countdown`` fires."""

    def flaky_insert(*args: Any, **kwargs: Any) -> Any:
        if countdown.fire():
            raise OperationalError("injected: connection refused")
        return real(*args, **kwargs)

    return flaky_insert


def busy(seconds: float) -> None:
    """Spin the CPU for ``seconds`` in pure Python (holds the GIL between switch intervals)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def slow_engine(seconds: float) -> None:
    """Make the first ``LocalEngine.audit`` call of this process spin for ``seconds`` first."""
    real_audit = LocalEngine.audit
    countdown = Countdown(1)

    async def audit(
        self: LocalEngine, events: Sequence[RefusalEvent], bundle: PolicyBundle
    ) -> EngineOutput:
        if countdown.fire():
            log.warning(SLOW_STARTED, extra={"seconds": seconds})
            busy(seconds)
            log.warning(SLOW_FINISHED)
        return await real_audit(self, events, bundle)

    LocalEngine.audit = audit  # type: ignore[method-assign]


if __name__ == "__main__":
    kind, arg = fault()
    if kind == "slow":
        slow_engine(float(arg))
    run_worker(load_settings(), "info", wrap_sink=wrap)
