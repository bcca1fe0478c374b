"""Drift alerts from the running worker on the real broker: the XSTest shift replayed in two
consecutive one-minute windows, the worker killed (SIGKILL) and restarted mid-stream, and
every alert id on the drift topic once, equal to the alerts table; kcat and `alerts tail`
both read them.

Timing: windows close by processing time (window end + grace), and an event arriving after
its window's end + grace counts as late in its arrival window. The replayed events are
stamped into the two minutes before the next minute boundary, and the grace is set so the
second window closes BUDGET seconds after the test starts: every event arrives before that
(so each counts in its own window), and the test waits for the close before it expects the
alerts. (Before, the windows ended in the past and a fixed 240 s grace made the test wait
180-240 s.)
"""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from streaming import Deployment, read_topic, stop, wait_for_web

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

BUDGET = 120  # seconds from the start to the second window's close: produce + two kills +
# drain took 22 s on a quiet machine (2026-12-06); a run slower than the budget fails the
# "too slow: late" assertion rather than counting events as late


@pytest.fixture
def dep(kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path) -> Deployment:
    deployment = Deployment(
        kafka_bootstrap,
        unique_topic_prefix,
        tmp_path,
        extra={
            "REFUSAL_AUDIT_ALERTS_WINDOW_SECONDS": "60",
            "REFUSAL_AUDIT_ALERTS_BASELINE_WINDOWS": "1",
            "REFUSAL_AUDIT_ALERTS_MIN_EVENTS": "150",
            "REFUSAL_AUDIT_ALERTS_LOOKBACK_WINDOWS": "10",
            "REFUSAL_AUDIT_WORKER_TAKE_MAX": "50",
        },
    )
    deployment.cli("topics", "create")
    return deployment


def test_drift_alerts_once_across_kills(dep: Deployment, shared_data: Path) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    end = now.replace(second=0) + timedelta(minutes=1)  # the next minute boundary
    t0 = end - timedelta(minutes=2)  # windows [t0, t0+1m) and [t0+1m, end)
    grace = BUDGET - int((end - now).total_seconds())  # the second window closes at now+BUDGET
    dep.extra["REFUSAL_AUDIT_ALERTS_GRACE_SECONDS"] = str(grace)
    for minute, model in enumerate(("llama2orig", "gpt4")):
        path = shared_data / "xstest" / f"xstest_v2_completions_{model}.csv"
        at = (t0 + timedelta(minutes=minute, seconds=10)).isoformat()
        dep.cli("produce", str(path), "--event-time", at, "--model", "chat")
    rng = random.Random(5)
    for _ in range(2):  # killed mid-stream, twice
        worker = dep.start_worker()
        wait_for_web(dep, worker)
        time.sleep(rng.uniform(1.0, 4.0))
        worker.kill()
        worker.wait()
    worker = dep.start_worker()
    try:
        dep.wait_drained(worker)
        closes = end + timedelta(seconds=grace)
        assert datetime.now(UTC) < closes, "too slow: late"
        time.sleep(max(0.0, (closes - datetime.now(UTC)).total_seconds()) + 1)
        wait_for_web(dep, worker)
        dep.wait_detector_passes(worker, passes=2)
    finally:
        stop(worker)
    on_topic = [
        orjson.loads(m.value() or b"") for m in read_topic(dep.bootstrap, dep.topic("alerts.drift"))
    ]
    ids = [a["alert_id"] for a in on_topic]
    assert len(ids) == len(set(ids)), "an alert id reached the drift topic twice"
    stored = dep.sql("SELECT alert_id FROM alerts FINAL WHERE kind != 'policy_gap'")
    assert sorted(r["alert_id"] for r in stored) == sorted(ids)
    by_kind = {(a["kind"], a["scope"]["model"]): a for a in on_topic}
    fp = by_kind[("false_positive_rate_shift", "chat")]
    assert fp["statistic"]["effect_size"] < -10  # GPT-4 over-refuses less than Llama-2
    assert datetime.fromisoformat(fp["window"]["start"]) == t0 + timedelta(minutes=1)
    assert fp["late_events"] == 0
    assert ("category_mix_drift", "chat") in by_kind
    assert by_kind[("category_mix_drift", "chat")]["moved"]
    # the evidence query reproduces the alert's counts from ClickHouse
    rows = {r["period"]: r for r in dep.sql(fp["evidence_query"])}
    assert rows["window"]["false_positives"] == fp["current_counts"]["false_positives"]
    assert rows["baseline"]["refusals"] == fp["baseline_counts"]["refusals"]

    kcat = shutil.which("kcat")
    assert kcat, "kcat is required (Debian package kcat; .ci/run installs it)"
    out = subprocess.run(
        [
            kcat,
            "-C",
            "-b",
            dep.bootstrap,
            "-t",
            dep.topic("alerts.drift"),
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%k %s\\n",
        ],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    kcat_ids = [
        orjson.loads(line.split(" ", 1)[1])["alert_id"] for line in out.splitlines() if line
    ]
    assert sorted(kcat_ids) == sorted(ids)
    assert all(line.split(" ", 1)[0].count("/") == 2 for line in out.splitlines() if line)
    tailed = dep.cli(
        "alerts",
        "tail",
        "--kind",
        "drift",
        "--from-beginning",
        "--max",
        str(len(ids)),
        "--idle-timeout",
        "20",
    ).stdout
    got = [orjson.loads(line)["alert"]["alert_id"] for line in tailed.splitlines() if line.strip()]
    assert sorted(got) == sorted(ids)
    listed = dep.cli("alerts", "list", "--json", "--limit", "500").stdout
    assert {orjson.loads(x)["alert_id"] for x in listed.splitlines() if x} >= set(ids)
