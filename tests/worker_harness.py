"""Run the streaming worker in a subprocess with optional storage faults (tests only).

``python tests/worker_harness.py`` runs ``streams.worker.run_worker`` with the settings from
the environment. ``HARNESS_FAULT`` injects faults into the warehouse:

- ``transient:N`` -- the first N ClickHouse inserts raise ``OperationalError`` (the
  warehouse's retries with backoff must absorb them);
- ``fatal:N`` -- the first N ``insert_assessments`` calls raise ``WarehouseError`` past the
  retries (the worker must stop without acking, exit status 70).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from clickhouse_connect.driver.exceptions import OperationalError

from refusal_audit.config import load_settings
from refusal_audit.pipeline import Sink
from schemas.audit import StoredAssessment
from streams.worker import run_worker
from warehouse.client import WarehouseError


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


def wrap(inner: Sink) -> Sink:
    kind, _, count = os.environ.get("HARNESS_FAULT", "").partition(":")
    countdown = Countdown(int(count or 0))
    if kind == "fatal":
        return FatalSink(inner, countdown)  # type: ignore[return-value]
    if kind == "transient":
        client = inner.client  # type: ignore[attr-defined]
        real_insert = client.insert

        def flaky_insert(*args: Any, **kwargs: Any) -> Any:
            if countdown.fire():
                raise OperationalError("injected: connection refused")
            return real_insert(*args, **kwargs)

        client.insert = flaky_insert
    return inner


if __name__ == "__main__":
    run_worker(load_settings(), "info", wrap_sink=wrap)
