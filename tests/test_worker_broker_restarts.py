"""Transactional workers ride through broker restarts (issue 23 A-C), against the real broker.

Two ``refusal-audit worker`` processes (consumer session timeout 15 s) drain the input while
the broker is stopped for 5 s (during a drain), 30 s (while idle: the workers' sessions
expire, their partitions are revoked) and 90 s (during a drain: the open transactions outlive
``transaction.timeout.ms``, 60 s, and the outage the stall limit, 65 s). Until 2026-12-06 the
outages were 60 and 120 s with the default 45 s session: the same states, 65 s longer.
Before issue 23 every worker exited 70 after each restart (librdkafka's
``send_offsets_to_transaction`` hanging, #5456/#5511). Now: no worker exits, every input
record is on ``stored-events`` exactly once (``read_committed``); ``/health`` says 503 while
the broker is away longer than the stall limit, even with no partition assigned (B); and the
consumer-lag gauge matches the group's own committed offsets after the restarts and after
rebalances that hand a worker partitions it never read (C).
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import KafkaException
from scaleout_harness import (
    HUNG_OFFSETS,
    Fleet,
    Member,
    Record,
    abort_hung_offsets,
    committed_offsets,
    example_events,
    produce,
)
from scaleout_harness import read_to_end as read_topics
from streaming import Deployment, json_records

pytestmark = pytest.mark.kafka

PARTITIONS = 4
SESSION_TIMEOUT_S = 15
STALL_LIMIT_S = 10 * 0.5 + 60  # the worker's /health stall limit: 10 x take_within + 60 s


def _web_port(member: Member, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in json_records(member.log):
            found = re.search(r"http://[^:]+:(\d+)/metrics", str(r.get("message", "")))
            if found:
                return int(found.group(1))
        time.sleep(0.2)
    raise AssertionError(f"{member.name} never served /metrics")


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _lag_gauge(port: int) -> dict[int, float]:
    _status, body = _get(port, "/metrics")
    return {
        int(m.group(1)): float(m.group(2))
        for m in re.finditer(
            r'^refusal_audit_consumer_lag_events\{partition="(\d+)"\} (\S+)$', body.decode(), re.M
        )
    }


def _records(events: list[dict[str, Any]]) -> list[Record]:
    return [(e["log_id"].encode(), orjson.dumps(e), None) for e in events]


class GroupOffsetsStuck(AssertionError):
    """The broker runs and answers, but the group's committed offsets stay unreadable: a
    pending transactional offset commit that never resolves (UNSTABLE_OFFSET_COMMIT)."""


def _wait_for_group_offsets(
    dep: Deployment, broker_control: Any, logs: Callable[[], str], within_s: float = 180
) -> None:
    """Wait until the restarted broker answers the group's committed offsets (its group
    coordinator loaded again: NOT_COORDINATOR, UNSTABLE_OFFSET_COMMIT until then). Fails at
    once, with the broker's log, if the broker process died after its start; after
    ``within_s`` seconds with the log and the workers' logs."""
    deadline = time.monotonic() + within_s
    while True:
        if not broker_control.alive():
            raise AssertionError(f"the broker died after its restart:\n{broker_control.log_tail()}")
        try:
            dep.committed_lag(attempts=1)
            return
        except KafkaException as exc:
            if time.monotonic() >= deadline:
                if broker_control.alive():
                    raise GroupOffsetsStuck(
                        f"no committed offsets {within_s:.0f} s after the restart ({exc}); "
                        f"broker alive\n"
                        f"{broker_control.transactions_report(dep.group, dep.prefix)}\n"
                        f"{broker_control.log_tail(20)}\n{logs()}"
                    ) from exc
                raise AssertionError(
                    f"no committed offsets {within_s:.0f} s after the restart ({exc}); broker "
                    f"alive: {broker_control.alive()}\n{broker_control.log_tail()}\n"
                    f"{logs()}"
                ) from exc
            time.sleep(0.5)


def test_workers_ride_through_broker_restarts_and_report_true_lag_and_health(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path, broker_control: Any
) -> None:
    dep = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path)
    dep.extra["REFUSAL_AUDIT_KAFKA_TOPIC_PARTITIONS"] = str(PARTITIONS)
    dep.extra["REFUSAL_AUDIT_KAFKA_SESSION_TIMEOUT_SECONDS"] = str(SESSION_TIMEOUT_S)
    dep.cli("topics", "create")
    events = example_events(36)  # 14,400 distinct log ids
    batches = [events[:6_000], events[6_000:6_400], events[6_400:12_400], events[12_400:]]
    fleet = Fleet(dep, take_max=100)
    remedied: list[str] = []
    fleet.diagnose = lambda: broker_control.transactions_report(dep.group, dep.prefix)
    sent = 0

    def send(batch: list[dict[str, Any]]) -> None:
        nonlocal sent
        sent += produce(kafka_bootstrap, dep.input_topic, _records(batch))

    def outage(seconds: float, during_drain: bool, ports: dict[str, int]) -> None:
        if during_drain:  # stop the broker while windows are in hand and committing
            start = fleet.committed_input()
            fleet.wait_for("the drain under way", lambda: fleet.committed_input() > start + 300,
                           fleet.committed_input)  # fmt: skip
            assert fleet.committed_input() < sent, "the drain finished before the outage"
        broker_control.stop()
        stopped = time.monotonic()
        seen: set[int] = set()
        bodies: list[bytes] = []
        while time.monotonic() - stopped < seconds:
            fleet.supervise()
            if seconds > STALL_LIMIT_S:  # past the stall limit: not healthy
                for p in ports.values():
                    status, body = _get(p, "/health")
                    seen.add(status)
                    bodies[-4:] = [*bodies[-3:], body]
            time.sleep(1.0)
        broker_control.start()
        if seconds > STALL_LIMIT_S:
            assert 503 in seen, f"/health never 503 in a {seconds} s outage: {seen} {bodies}"
        try:
            _wait_for_group_offsets(dep, broker_control, fleet.logs)
        except GroupOffsetsStuck as stuck:  # the known defect: the runbook, then go on
            if not abort_hung_offsets(broker_control, dep.group, remedied):
                raise
            remedied.append(str(stuck))
            _wait_for_group_offsets(dep, broker_control, fleet.logs)

    try:
        workers = [fleet.worker("w1"), fleet.worker("w2")]
        ports = {m.name: _web_port(m) for m in workers}
        send(batches[0])
        outage(5, during_drain=True, ports=ports)
        fleet.wait_drained()
        outage(2 * SESSION_TIMEOUT_S, during_drain=False, ports=ports)  # idle: sessions expire
        send(batches[1])  # the first records after the restart
        fleet.wait_drained()
        send(batches[2])
        outage(STALL_LIMIT_S + 25, during_drain=True, ports=ports)
        fleet.wait_drained()
        assert fleet.crash_restarts == [], f"exited 70: {fleet.crash_restarts}\n{fleet.logs()}"
        assert all(m.proc.poll() is None for m in workers), fleet.logs()

        # lag against the group's own offsets, after a rebalance that hands w1 partitions it
        # never read (w2 leaves) and after w2's restart (it joins again): 0, /health 200
        partitions = [(dep.input_topic, p) for p in range(PARTITIONS)]
        assert all(o >= 0 for o in committed_offsets(kafka_bootstrap, dep.group,
                                                     partitions).values())  # fmt: skip
        assert fleet.stop("w2") == {"w2": 0}, fleet.logs()
        w1 = ports["w1"]

        def w1_holds_all() -> bool:
            return sorted(_lag_gauge(w1)) == list(range(PARTITIONS))

        fleet.wait_for("w1 to report every partition", w1_holds_all, lambda: _lag_gauge(w1))
        assert _lag_gauge(w1) == dict.fromkeys(range(PARTITIONS), 0.0), fleet.logs()
        assert _get(w1, "/health")[0] == 200
        w2 = _web_port(fleet.restart("w2"))
        fleet.wait_for("w2 to report its partitions", lambda: len(_lag_gauge(w2)) > 0,
                       lambda: _lag_gauge(w2))  # fmt: skip
        fleet.wait_for("w1 to give partitions up",
                       lambda: len(_lag_gauge(w1)) + len(_lag_gauge(w2)) == PARTITIONS,
                       lambda: (_lag_gauge(w1), _lag_gauge(w2)))  # fmt: skip
        assert set(_lag_gauge(w2).values()) == {0.0}
        assert _get(w2, "/health")[0] == 200
        send(batches[3])
        fleet.wait_drained()
        codes = fleet.stop()
        assert set(codes.values()) == {0}, (codes, fleet.logs())
    finally:
        fleet.kill_all()

    messages = read_topics(kafka_bootstrap, [dep.topic("stored-events")])
    stored = Counter((m.key() or b"").decode() for m in messages)
    assert sum(stored.values()) == len(events) == sent
    assert set(stored) == {e["log_id"] for e in events} and set(stored.values()) == {1}
    if remedied:  # everything above held, after an operator's abort
        pytest.xfail(f"{HUNG_OFFSETS}; aborted by the test:\n" + "\n".join(remedied)[:6000])
