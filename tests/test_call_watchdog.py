"""The watchdog on transaction calls (librdkafka #5456: ``send_offsets_to_transaction``
ignores its timeout while the coordinator moves): a call that overruns its allowance makes
the watchdog call ``on_stuck`` once; calls that return in time never do."""

from __future__ import annotations

import threading
import time

from streams.transactional import CallWatchdog


def test_a_call_over_its_allowance_is_reported_once_and_quick_ones_never() -> None:
    stuck: list[tuple[str, float]] = []
    reported = threading.Event()

    def on_stuck(what: str, seconds: float) -> None:
        stuck.append((what, seconds))
        reported.set()

    watchdog = CallWatchdog(on_stuck)
    for _ in range(20):
        with watchdog.guard("quick", 0.5):
            time.sleep(0.01)
    time.sleep(0.6)
    assert stuck == []
    with watchdog.guard("send_offsets_to_transaction", 0.2):
        assert reported.wait(5.0)  # reported while the call is still inside
        time.sleep(0.3)
    assert stuck == [("send_offsets_to_transaction", 0.2)]
    with watchdog.guard("commit_transaction", 5.0):
        pass
    time.sleep(0.3)
    assert len(stuck) == 1
