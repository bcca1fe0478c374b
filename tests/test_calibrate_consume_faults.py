"""``calibrate consume`` under faults, as a process on a real broker (issue 26's one consumer
loop): killed with SIGKILL mid-run and restarted, joined by a second instance (a rebalance),
or under a broker restart, it loses no request and stores no run twice; SIGTERM mid-batch
exits 0 having committed exactly the requests whose runs it stored."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from streaming import Deployment, read_topic
from test_calibration_kafka import PIPE_BOMB, Consume, committed, send

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


def requests_on_topic(bootstrap: str, prefix: str, data: Path, n: int) -> tuple[Deployment, str]:
    """A deployment of ``prefix`` (two partitions per topic) with ``n`` calibration requests
    (log ids ``r-0`` ...) on its ``calibrate.requests``; returns it and that topic."""
    dep = Deployment(bootstrap, prefix, data)
    dep.extra.update({"REFUSAL_AUDIT_ENGINE": "local", "REFUSAL_AUDIT_CALIBRATE_ENGINE": "local",
                      "REFUSAL_AUDIT_KAFKA_TOPIC_PARTITIONS": "2"})  # fmt: skip
    dep.cli("topics", "create")
    topic = dep.topic("calibrate.requests")
    ids = [f"r-{i}" for i in range(n)]
    send(bootstrap, topic, [{**PIPE_BOMB, "log_id": i} for i in ids], [i.encode() for i in ids])
    return dep, topic


def assert_each_once(dep: Deployment, topic: str, n: int, extra: int = 0) -> None:
    """Every request (and ``extra`` other messages) committed, each run stored once."""
    assert sum(committed(dep.bootstrap, dep.topic("calibrate"), topic, 2)) == n + extra
    rows = dep.sql("SELECT log_id, count() AS n FROM calibration_runs GROUP BY log_id")
    assert sorted(r["log_id"] for r in rows) == sorted(f"r-{i}" for i in range(n))
    assert all(r["n"] == 1 for r in rows), [r for r in rows if r["n"] != 1]


def finish(dep: Deployment) -> None:
    """Run ``calibrate consume`` until it is idle; it must exit 0."""
    again = Consume(dep, "--batch-size", "50", "--idle-timeout", "3")
    try:
        assert again.wait(240) == 0, again.text()[-3000:]
    finally:
        again.kill()


@pytest.mark.parametrize("delay", [0.3, 1.0])
def test_sigkill_mid_run_then_a_restart_loses_and_doubles_nothing(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path, delay: float
) -> None:
    n = 200
    dep, topic = requests_on_topic(kafka_bootstrap, unique_topic_prefix, tmp_path / "data", n)
    send(kafka_bootstrap, topic, [b"{broken"])
    consume = Consume(dep, "--batch-size", "3")
    try:
        consume.wait_for("assigned")
        time.sleep(delay)
    finally:
        consume.kill()  # SIGKILL
    finish(dep)
    assert_each_once(dep, topic, n, extra=1)
    published = read_topic(kafka_bootstrap, dep.topic("calibrate.runs"), idle=1.5)
    runs = {orjson.loads(m.value() or b"")["calibration_run_id"] for m in published}
    assert len(runs) == n
    letters = list(read_topic(kafka_bootstrap, dep.topic("dead-letters"), idle=1.5))
    assert {dict(m.headers() or [])["x-reason-code"] for m in letters} == {b"not_json"}


def test_a_second_instance_joining_mid_run_loses_and_doubles_nothing(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path
) -> None:
    n = 300
    dep, topic = requests_on_topic(kafka_bootstrap, unique_topic_prefix, tmp_path / "data", n)
    first = Consume(dep, "--batch-size", "3", "--idle-timeout", "4")
    second = None
    try:
        first.wait_for("assigned")
        time.sleep(0.5)
        second = Consume(dep, "--batch-size", "3", "--idle-timeout", "4")
        assert first.wait(240) == 0, first.text()[-4000:]
        assert second.wait(240) == 0, second.text()[-4000:]
    finally:
        first.kill()
        if second is not None:
            second.kill()
    assert_each_once(dep, topic, n)


def test_a_broker_restart_under_the_loop_loses_and_doubles_nothing(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path, broker_control: Any
) -> None:
    if not broker_control.manageable:
        pytest.skip("the broker is not ours to restart")
    n = 400
    dep, topic = requests_on_topic(kafka_bootstrap, unique_topic_prefix, tmp_path / "data", n)
    consume = Consume(dep, "--batch-size", "3", "--idle-timeout", "20")
    try:
        consume.wait_for("assigned")
        time.sleep(0.5)
        broker_control.stop()
        time.sleep(6)
        broker_control.start()
        code = consume.wait(240)
    finally:
        consume.kill()
    assert code in (0, 70), consume.text()[-3000:]  # 70: a batch not confirmed, uncommitted
    finish(dep)
    assert_each_once(dep, topic, n)


def test_sigterm_mid_batch_commits_exactly_what_was_stored(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path
) -> None:
    n = 300
    dep, topic = requests_on_topic(kafka_bootstrap, unique_topic_prefix, tmp_path / "data", n)
    consume = Consume(dep, "--batch-size", "7")
    try:
        consume.wait_for("assigned")
        time.sleep(1.0)
        consume.proc.send_signal(signal.SIGTERM)
        assert consume.wait(120) == 0, consume.text()[-3000:]
    finally:
        consume.kill()
    done = sum(max(0, o) for o in committed(kafka_bootstrap, dep.topic("calibrate"), topic, 2))
    stored = dep.sql("SELECT count() AS n FROM calibration_runs")[0]["n"]
    assert 0 < done < n and stored == done
    assert f"{done} message(s) committed: {done} stored" in consume.text()
    finish(dep)
    assert_each_once(dep, topic, n)
