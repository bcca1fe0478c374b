"""The warehouse sink's detector schedule (no broker: the loop itself is tested against the
real broker in tests/test_transactional_worker.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from refusal_audit.sink import WarehouseSink


def test_detector_passes_follow_the_interval_and_a_failure_is_not_fatal() -> None:
    calls: list[datetime] = []
    now = [0.0]

    def detectors(at: datetime) -> None:
        calls.append(at)
        if len(calls) == 3:
            raise RuntimeError("warehouse briefly unavailable")

    sink = WarehouseSink(cast(Any, None), cast(Any, None), cast(Any, None), detectors, 10.0)
    for t in (0.0, 5.0, 9.9, 10.0, 15.0, 20.5, 31.0):
        now[0] = t
        sink.maybe_detect(lambda: now[0])
    assert len(calls) == 4  # at 0, 10, 20.5 (fails) and 31
    assert sink.stats.detector_passes == 3 and sink.stats.detector_failures == 1
    idle = WarehouseSink(cast(Any, None), cast(Any, None), cast(Any, None))
    idle.maybe_detect()  # no detectors configured: nothing happens
    assert idle.stats.detector_passes == 0
