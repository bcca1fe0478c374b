"""The streaming worker against a real Kafka broker (no mocks): delivery, bad input, crashes."""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from streaming import Deployment, read_topic, stop, wait_for_web

from processors.adapters import DecodeFailure, DecodeOptions, decode_record
from refusal_audit.audit.readers import read_records
from streams.topics import ROLES

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"
MALFORMED = REPO / "tests" / "fixtures" / "malformed.jsonl"
# logged by tests/worker_harness.py around its HARNESS_FAULT=slow:SECONDS engine call
SLOW_STARTED = "harness: slow engine call started"
SLOW_FINISHED = "harness: slow engine call finished"

pytestmark = pytest.mark.kafka


@pytest.fixture
def dep(kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path) -> Deployment:
    deployment = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path)
    deployment.cli("topics", "create")
    return deployment


def assert_one_current_assessment_per_refusal(dep: Deployment) -> set[str]:
    """Every event stored once; every refusal exactly one current assessment; return ids."""
    dupes = dep.sql(
        "SELECT log_id, count() AS n FROM refusal_events FINAL GROUP BY log_id HAVING n > 1"
    )
    assert dupes == []
    per_log = dep.sql("SELECT log_id, count() AS n FROM assessments FINAL GROUP BY log_id")
    assert all(row["n"] == 1 for row in per_log), [r for r in per_log if r["n"] != 1][:5]
    refusals = dep.sql("SELECT log_id FROM refusal_events FINAL WHERE is_refusal")
    assessed = {row["log_id"] for row in per_log}
    assert assessed == {row["log_id"] for row in refusals}
    return assessed


def first_events(path: Path, n: int) -> Path:
    """The first ``n`` events of the example log, as a new JSONL file."""
    out = path / f"first-{n}.jsonl"
    lines = [line for line in EXAMPLE_LOG.read_bytes().splitlines() if line.strip()]
    out.write_bytes(b"\n".join(lines[:n]) + b"\n")
    return out


def many_events(path: Path, copies: int) -> Path:
    """The example log repeated ``copies`` times with fresh log ids, as a new JSONL file."""
    out = path / "many.jsonl"
    lines = [orjson.loads(line) for line in EXAMPLE_LOG.read_bytes().splitlines() if line.strip()]
    with out.open("wb") as f:
        for copy in range(copies):
            for event in lines:
                f.write(orjson.dumps({**event, "log_id": f"{event['log_id']}-{copy}"}) + b"\n")
    return out


def test_topics_are_idempotent_and_worker_needs_the_input_topic(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path
) -> None:
    dep = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path)
    missing = dep.cli("worker", check=False, timeout=120)
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr and "topics create" in missing.stderr
    no_topic = dep.cli("produce", str(EXAMPLE_LOG), check=False)
    assert no_topic.returncode == 2 and "does not exist" in no_topic.stderr
    first = dep.cli("topics", "create").stdout
    assert first.count("created") == len(ROLES)  # audit, alerts, dead letters, clarification
    again = dep.cli("topics", "create").stdout
    assert "created" not in again and again.count("exists") == len(ROLES)


def test_xstest_end_to_end(dep: Deployment, shared_data: Path) -> None:
    files = sorted(str(p) for p in (shared_data / "xstest").glob("xstest_v2_completions_*.csv"))
    produced = dep.cli("produce", *files, "--event-time", "2026-01-05")
    assert "delivered 900" in produced.stdout
    worker = dep.start_worker()
    try:
        wait_for_web(dep, worker)
        dep.wait_drained(worker)
        status, health = dep.health()
        assert status == 200 and health["broker"]["ok"] and health["warehouse"]["ok"]
        metrics = dep.metrics()
        assert "refusal_audit_events_consumed_total 900.0" in metrics
    finally:
        stop(worker)
    assert worker.returncode == 0, dep.worker_logs()
    assert dep.sql("SELECT count() AS n FROM refusal_events FINAL") == [{"n": 900}]
    assessed = assert_one_current_assessment_per_refusal(dep)
    labelled = dep.sql(
        "SELECT countIf(attributes['final_label'] != '1_full_compliance' "
        "AND is_refusal) AS kept, countIf(attributes['final_label'] != "
        "'1_full_compliance') AS refusals FROM refusal_events FINAL"
    )[0]
    assert labelled["refusals"] == 569 and labelled["kept"] >= 0.95 * 569
    on_topic = Counter(
        m.key().decode() for m in read_topic(dep.bootstrap, dep.topic("assessments"))
    )
    assert set(on_topic) == assessed
    review = {m.key().decode() for m in read_topic(dep.bootstrap, dep.topic("review-queue"))}
    sampled = dep.sql("SELECT log_id FROM assessments FINAL WHERE sampled_for_review")
    assert review == {row["log_id"] for row in sampled}


def test_bad_input_goes_to_the_dead_letter_topic(dep: Deployment, tmp_path: Path) -> None:
    bad_bundle = tmp_path / "bundle.jsonl"
    bad_bundle.write_bytes(
        orjson.dumps(
            {
                "log_id": "bb-1",
                "event_time": "2026-01-01T00:00:00Z",
                "request": "q",
                "response": "I can't help with that.",
                "model": "m",
                "policy_bundle": "nope",
            }
        )
        + b"\n"
    )
    dep.cli("produce", "--raw", str(MALFORMED), str(bad_bundle), "-f", "jsonl")
    # one keyed record with headers and one tombstone, straight from a producer
    producer = Producer({"bootstrap.servers": dep.bootstrap})
    producer.produce(dep.input_topic, b"<not json>", b"k-1", headers=[("trace", b"abc")])
    producer.produce(dep.input_topic, None, b"k-2")
    assert producer.flush(30) == 0
    worker = dep.start_worker()
    try:
        dep.wait_drained(worker)
    finally:
        stop(worker)
    letters = list(read_topic(dep.bootstrap, dep.topic("dead-letters")))
    reasons = Counter(dict(m.headers() or [])["x-reason-code"].decode() for m in letters)
    assert len({r for r in reasons if r != "duplicate_log_id"}) >= 10, reasons
    assert reasons["unknown_policy_bundle"] == 1
    for m in letters:
        headers = dict(m.headers() or [])
        assert headers["x-source-topic"].decode() == dep.input_topic
        assert int(headers["x-source-offset"]) >= 0 and headers["x-reason"]
    # Expected outcome per record, from the same decoder the worker uses.
    records = list(read_records(MALFORMED, "jsonl", 262_144))
    decoded = [decode_record(r, "jsonl", DecodeOptions()) for r in records]
    bad = sum(isinstance(d, DecodeFailure) for d in decoded) + 3  # + bundle, keyed, tombstone
    by_key = {m.key(): m for m in letters if m.key() in (b"k-1", b"k-2")}
    keyed = dict(by_key[b"k-1"].headers() or [])
    assert by_key[b"k-1"].value() == b"<not json>"
    assert keyed["x-original-header-trace"] == b"abc"
    assert by_key[b"k-2"].value() is None  # a tombstone stays a tombstone
    assert dict(by_key[b"k-2"].headers() or [])["x-tombstone"] == b"true"
    assert dict(by_key[b"k-2"].headers() or [])["x-reason-code"] == b"tombstone"
    good = {d.log_id for d in decoded if not isinstance(d, DecodeFailure)}
    assert sum(n for r, n in reasons.items() if r != "duplicate_log_id") == bad
    assert dep.sql("SELECT count() AS n FROM dead_letters FINAL")[0]["n"] == len(letters)
    stored = dep.sql("SELECT log_id FROM refusal_events FINAL")
    assert {row["log_id"] for row in stored} == good
    assert_one_current_assessment_per_refusal(dep)


def test_sigkill_three_times_loses_nothing(dep: Deployment, tmp_path: Path) -> None:
    # 12,000 events: a restarted worker takes its partitions back at once (static
    # membership), so three short lives must not drain the topic before the last kill
    source = many_events(tmp_path, copies=30)
    total = sum(1 for _ in source.open("rb"))
    dep.cli("produce", str(source))
    rng = random.Random(20261129)
    for _ in range(3):
        worker = dep.start_worker()
        time.sleep(rng.uniform(3.0, 6.0))
        assert worker.poll() is None, dep.worker_logs()
        worker.kill()
        worker.wait()
    assert dep.committed_lag() > 0, "the kills came too late to test anything"
    worker = dep.start_worker()
    try:
        dep.wait_drained(worker, timeout=600)
    finally:
        stop(worker)
    assert dep.sql("SELECT count() AS n FROM refusal_events FINAL") == [{"n": total}]
    assert_one_current_assessment_per_refusal(dep)


def assert_crash_names_the_window(dep: Deployment, worker: subprocess.Popen[bytes]) -> None:
    """The CRITICAL line names the unacked window: topic, every partition's offsets and count.

    It is the group's first window, so each of its partitions starts at offset 0.
    """
    crashes = [
        r
        for r in dep.log_records(worker)
        if r.get("level") == "CRITICAL"
        and str(r.get("message", "")).startswith("stopping without acking the window")
    ]
    assert len(crashes) == 1, dep.worker_logs()
    crash = crashes[0]
    assert crash["topic"] == dep.input_topic and dep.input_topic in crash["message"]
    partitions = crash["partitions"]
    assert partitions, crash
    numbers = [p["partition"] for p in partitions]
    assert numbers == sorted(set(numbers))
    for p in partitions:
        assert p["first_offset"] == 0 and p["records"] == p["last_offset"] + 1, crash
        described = f"partition {p['partition']} offsets 0-{p['last_offset']} ({p['records']} "
        assert described in crash["message"], crash["message"]
    assert sum(p["records"] for p in partitions) == crash["records"] > 0
    assert "injected: ClickHouse unavailable" in crash["message"]


def assert_stored_windows_cover_the_topic(
    dep: Deployment, worker: subprocess.Popen[bytes], total: int
) -> None:
    """The "window stored" lines of a worker that drained the topic from offset 0: their
    per-partition offset ranges tile every partition exactly, and count every record."""
    stored = [r for r in dep.log_records(worker) if r.get("message") == "window stored"]
    assert stored, dep.worker_logs()
    ranges: dict[int, list[tuple[int, int]]] = {}
    for window in stored:
        assert window["topic"] == dep.input_topic
        assert sum(p["records"] for p in window["partitions"]) == window["records"]
        for p in window["partitions"]:
            assert p["records"] == p["last_offset"] - p["first_offset"] + 1, window
            ranges.setdefault(p["partition"], []).append((p["first_offset"], p["last_offset"]))
    for partition, spans in ranges.items():
        expected_first = 0
        for first, last in sorted(spans):
            assert first == expected_first, (partition, sorted(spans))
            expected_first = last + 1
    assert sum(window["records"] for window in stored) == total
    assert len(ranges) > 1, "the example log should spread over several partitions"


def test_warehouse_failures_crash_unacked_then_recover(dep: Deployment) -> None:
    dep.cli("produce", str(EXAMPLE_LOG))
    total = sum(1 for line in EXAMPLE_LOG.read_bytes().splitlines() if line.strip())
    failing = dep.start_worker(fault="fatal:1")
    assert failing.wait(timeout=120) == 70, dep.worker_logs()
    assert dep.committed_lag() > 0
    assert_crash_names_the_window(dep, failing)
    worker = dep.start_worker(fault="transient:3")  # absorbed by retries with backoff
    try:
        dep.wait_drained(worker)
        assert_stored_windows_cover_the_topic(dep, worker, total)
        assert "refusal_audit_warehouse_retries_total" in dep.metrics()
        retries = [
            line
            for line in dep.metrics().splitlines()
            if line.startswith("refusal_audit_warehouse_retries_total{")
        ]
        assert sum(float(line.rsplit(" ", 1)[1]) for line in retries) == 3
    finally:
        stop(worker)
    assert dep.sql("SELECT count() AS n FROM refusal_events FINAL") == [{"n": total}]
    assert_one_current_assessment_per_refusal(dep)


def test_health_and_metrics_answer_while_a_window_is_audited(
    dep: Deployment, tmp_path: Path
) -> None:
    """The window's CPU work runs off faust's event loop: the web endpoints stay responsive."""
    worker = dep.start_worker(fault="slow:8")  # the first engine call spins the CPU for 8 s
    try:
        wait_for_web(dep, worker)
        dep.cli("produce", str(first_events(tmp_path, 20)))
        dep.wait_for_log(worker, SLOW_STARTED)
        answered: list[tuple[str, float]] = []
        for _ in range(3):
            started = time.monotonic()
            status, health = dep.health()
            answered.append(("health", time.monotonic() - started))
            assert status == 200 and health["ok"], health
            started = time.monotonic()
            assert "refusal_audit_events_consumed_total" in dep.metrics()
            answered.append(("metrics", time.monotonic() - started))
            time.sleep(0.5)
        messages = {r.get("message") for r in dep.log_records(worker)}
        assert SLOW_FINISHED not in messages, "the requests did not overlap the slow window"
        assert all(seconds < 1.0 for _, seconds in answered), answered
        dep.wait_drained(worker)
        assert SLOW_FINISHED in {r.get("message") for r in dep.log_records(worker)}
    finally:
        stop(worker)
    assert worker.returncode == 0, dep.worker_logs()
    assert dep.sql("SELECT count() AS n FROM refusal_events FINAL") == [{"n": 20}]
    assert_one_current_assessment_per_refusal(dep)


def test_kcat_interop(dep: Deployment) -> None:
    """kcat produces the input; kcat and `alerts tail` read the assessments and the grouped
    policy-gap alerts (each alert id once, one per gap)."""
    kcat = shutil.which("kcat")
    assert kcat, "kcat is required (Debian package kcat; .ci/run installs it)"
    lines = [line for line in EXAMPLE_LOG.read_bytes().splitlines() if line.strip()]
    subprocess.run(
        [kcat, "-P", "-b", dep.bootstrap, "-t", dep.input_topic],
        input=b"\n".join(lines) + b"\n",
        check=True,
        timeout=60,
    )
    worker = dep.start_worker()
    try:
        dep.wait_drained(worker)
        wait_for_web(dep, worker)
        dep.wait_detector_passes(worker, passes=2)  # a full pass after every batch is stored
    finally:
        stop(worker)
    assessed = assert_one_current_assessment_per_refusal(dep)

    def kcat_read(topic: str, fmt: str | None = None) -> bytes:
        args = [kcat, "-C", "-b", dep.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q"]
        out = subprocess.run(
            args + (["-f", fmt] if fmt else []), capture_output=True, check=True, timeout=60
        )
        return out.stdout

    keys = kcat_read(dep.topic("assessments"), "%k\\n").decode().split()
    assert set(keys) == assessed
    alerts = [orjson.loads(x) for x in kcat_read(dep.topic("alerts.policy-gap")).splitlines() if x]
    assert alerts, "the example log should raise at least one policy-gap alert"
    assert all(a["kind"] == "policy_gap" and a["example_log_ids"] for a in alerts)
    ids = [a["alert_id"] for a in alerts]
    assert len(ids) == len(set(ids)), "an alert id reached the topic twice"
    gaps = [orjson.loads(x) for x in dep.cli("gaps", "--json").stdout.splitlines() if x.strip()]
    assert sorted(a["gap_id"] for a in alerts) == sorted(g["gap_id"] for g in gaps)
    stored = dep.sql("SELECT alert_id FROM alerts FINAL WHERE kind = 'policy_gap'")
    assert sorted(r["alert_id"] for r in stored) == sorted(ids)
    tailed = dep.cli(
        "alerts",
        "tail",
        "--kind",
        "policy-gap",
        "--from-beginning",
        "--max",
        str(len(alerts)),
        "--idle-timeout",
        "20",
    ).stdout
    got = [orjson.loads(line)["alert"] for line in tailed.splitlines() if line.strip()]
    assert sorted(a["alert_id"] for a in got) == sorted(ids)


def test_worker_survives_a_broker_restart(dep: Deployment, broker_control: Any) -> None:
    dep.cli("produce", str(EXAMPLE_LOG))
    total = sum(1 for line in EXAMPLE_LOG.read_bytes().splitlines() if line.strip())
    worker = dep.start_worker()
    try:
        wait_for_web(dep, worker)  # running (the worker refuses to start without a broker)
        time.sleep(1.0)
        broker_control.stop()
        time.sleep(15)  # aiokafka tries to reconnect about ten times a second meanwhile
        broker_control.start()
        dep.cli("produce", str(many_events(dep.data_dir, copies=1)))
        dep.wait_drained(worker)
    finally:
        stop(worker)
    # the outage's repeated client errors are folded: one line per kind per 30 s
    client_errors = Counter(
        (r["logger"], r["message"].split(" [")[0])
        for r in dep.log_records(worker)
        if r.get("level") in ("ERROR", "WARNING") and r.get("logger", "").startswith("aiokafka")
    )
    assert client_errors, "the outage left no trace in the log"
    assert max(client_errors.values()) <= 2, client_errors.most_common(3)
    assert dep.sql("SELECT count() AS n FROM refusal_events FINAL") == [{"n": 2 * total}]
    assert_one_current_assessment_per_refusal(dep)


def group_members(dep: Deployment) -> list[str | None]:
    """The group.instance.id of every member of the worker's consumer group right now."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": dep.bootstrap})
    group = admin.describe_consumer_groups([dep.group])[dep.group].result(timeout=30)
    return [m.group_instance_id for m in group.members]


def test_a_restarted_worker_takes_its_partitions_back_at_once(dep: Deployment) -> None:
    """Static membership (KIP-345): after SIGKILL the same worker rejoins under its
    group.instance.id and gets its partitions without waiting for the dead member's session
    (60 s here) to time out; an orderly stop leaves the group at once."""
    dep.extra["REFUSAL_AUDIT_KAFKA_SESSION_TIMEOUT_SECONDS"] = "60"
    worker = dep.start_worker()
    first = dep.wait_for_log(worker, "partitions assigned")
    assert first["assigned"] == [0, 1, 2] and first["group_instance_id"]
    worker.kill()
    worker.wait()
    again = dep.start_worker()
    try:
        back = dep.wait_for_log(again, "partitions assigned", timeout=120)
        assert back["assigned"] == [0, 1, 2]
        assert back["group_instance_id"] == first["group_instance_id"]
        assert back["waited_seconds"] < 30, back  # not the 60 s session timeout
        dep.cli("produce", str(first_events(dep.data_dir, 20)))
        dep.wait_drained(again)
    finally:
        stop(again)
    assert again.returncode == 0
    assert any(r.get("message") == "left the consumer group" for r in dep.log_records(again))
    assert group_members(dep) == []


def test_a_start_that_waits_for_a_dead_member_says_why(dep: Deployment) -> None:
    dep.extra.update(
        REFUSAL_AUDIT_KAFKA_STATIC_MEMBERSHIP="false",
        REFUSAL_AUDIT_KAFKA_SESSION_TIMEOUT_SECONDS="12",
    )
    worker = dep.start_worker()
    dep.wait_for_log(worker, "partitions assigned")
    worker.kill()
    worker.wait()
    again = dep.start_worker()
    try:
        back = dep.wait_for_log(again, "partitions assigned", timeout=120)
    finally:
        stop(again)
    notes = [
        r["message"]
        for r in dep.log_records(again)
        if str(r.get("message", "")).startswith("no partitions assigned")
    ]
    assert back["waited_seconds"] >= 5 and notes, back
    assert "session times out (kafka_session_timeout_seconds=12)" in notes[0]


def test_a_log_id_reused_in_a_later_window_is_dead_lettered(
    dep: Deployment, tmp_path: Path
) -> None:
    """The duplicate-log-id rule in the worker: a different event under a stored log id
    (here a compliant answer after a refusal) goes to the dead-letter topic and retires
    nothing; the identical record sent again is harmless."""
    first = orjson.loads(EXAMPLE_LOG.read_bytes().splitlines()[0])
    first["response"] = "I can't help with that."
    reused = {**first, "response": "Sure, here is how: step one ..."}
    worker = dep.start_worker()
    try:
        for event in (first, reused, first):
            path = tmp_path / "one.jsonl"
            path.write_bytes(orjson.dumps(event) + b"\n")
            dep.cli("produce", str(path))
            dep.wait_drained(worker)  # each in a window of its own
    finally:
        stop(worker)
    letters = list(read_topic(dep.bootstrap, dep.topic("dead-letters")))
    (letter,) = letters
    headers = dict(letter.headers() or [])
    assert headers["x-reason-code"] == b"duplicate_log_id"
    assert headers["x-log-id"] == first["log_id"].encode()
    rows = dep.sql("SELECT log_id, response FROM refusal_events FINAL")
    assert rows == [{"log_id": first["log_id"], "response": first["response"]}]
    assert [r["log_id"] for r in dep.sql("SELECT log_id FROM current_assessments")] == [
        first["log_id"]
    ]
