"""The faust worker's streaming scenarios in the scale-out shape, against the real broker:
bad input of every kind to the dead-letter topic with its reason headers and, through the
sink, to the ``dead_letters`` table (``tests/test_worker.py``); dead-letter copies keeping the
original key, headers and null value (``tests/test_edges_streaming.py``); kcat producing the
input and reading the assessments, and the grouped policy-gap alerts (``test_kcat_interop``).

Here a transactional worker (``refusal-audit worker --outputs topics``) and the warehouse
sink (``refusal-audit sink``) run as subprocesses (``tests/scaleout_harness.py``); result
topics are read as ``read_committed`` readers see them, the warehouse through the sink.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from scaleout_harness import (
    EXAMPLE_LOG,
    Fleet,
    one_current_assessment_per_refusal,
    produce,
    read_to_end,
)
from streaming import Deployment

from processors.adapters import DecodeFailure, DecodeOptions, decode_record
from refusal_audit.audit.readers import read_records

REPO = Path(__file__).resolve().parents[1]
MALFORMED = REPO / "tests" / "fixtures" / "malformed.jsonl"

pytestmark = pytest.mark.kafka


@pytest.fixture
def dep(kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path) -> Deployment:
    deployment = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path)
    deployment.cli("topics", "create")
    return deployment


def event(log_id: str, **fields: Any) -> dict[str, Any]:
    return {"log_id": log_id, "event_time": "2026-01-05T10:00:00Z",
            "request": "How do I kill a zombie process?",
            "response": "I can't help with that.", "model": "m", **fields}  # fmt: skip


def header_list(message: Any) -> list[tuple[str, bytes | None]]:
    return list(message.headers() or [])


def headers_of(message: Any) -> dict[str, Any]:
    return dict(header_list(message))


def test_bad_input_goes_to_the_dead_letter_topic_and_table(dep: Deployment, tmp_path: Path) -> None:
    bad_bundle = tmp_path / "bundle.jsonl"
    bad_bundle.write_bytes(orjson.dumps(event("bb-1", policy_bundle="nope")) + b"\n")
    dep.cli("produce", "--raw", str(MALFORMED), str(bad_bundle), "-f", "jsonl")
    # keyed records with headers, tombstones and a keyless one, straight from a producer
    bad_time = orjson.dumps(event("bt-1", event_time="yesterday"))
    other_bundle = orjson.dumps(event("bb-2", policy_bundle="nope"))
    spoofing = [("trace", b"t-1"), ("x-reason-code", b"spoof"), ("dup", b"1"), ("dup", b"2")]
    produce(dep.bootstrap, dep.input_topic, [
        (b"k-1", b"<not json>", [("trace", b"abc")]),
        (b"k-2", None, None),
        (b"k-bad-time", bad_time, list(spoofing)),
        (b"k-tomb", None, [("h", b"v")]),
        (None, b"not json", None),
        (b"k-good", orjson.dumps(event("good-1")), [("trace", b"t-2")]),
        (b"k-bundle", other_bundle, [("nullh", None)]),
    ])  # fmt: skip
    fleet = Fleet(dep)
    fleet.worker("w1")
    fleet.sink()
    try:
        fleet.wait_drained()
        results = fleet.wait_loaded()
        # the warehouse through the sink (it serves its embedded store to the CLI)
        assessed = one_current_assessment_per_refusal(dep)
        rows = dep.sql("SELECT dead_letter_id, stage, reason_code, source, location, log_id, "
                       "raw FROM dead_letters FINAL")  # fmt: skip
        stored = {r["log_id"] for r in dep.sql("SELECT log_id FROM refusal_events FINAL")}
        assert fleet.stop() == {"w1": 0, "sink": 0}, fleet.logs()
    finally:
        fleet.kill_all()

    letters = [m for m in results if m.topic() == dep.topic("dead-letters")]
    reasons = Counter(headers_of(m)["x-reason-code"].decode() for m in letters)
    assert len({r for r in reasons if r != "duplicate_log_id"}) >= 10, reasons
    assert reasons["unknown_policy_bundle"] == 2
    for m in letters:
        headers = headers_of(m)
        assert headers["x-source-topic"].decode() == dep.input_topic
        assert int(headers["x-source-offset"]) >= 0 and headers["x-reason"]
    # expected outcome per record, from the same decoder the worker uses
    records = list(read_records(MALFORMED, "jsonl", 262_144))
    decoded = [decode_record(r, "jsonl", DecodeOptions()) for r in records]
    good = {d.log_id for d in decoded if not isinstance(d, DecodeFailure)}
    # + the bad bundle file, and k-1, k-2, k-bad-time, k-tomb, the keyless one, k-bundle
    bad = sum(isinstance(d, DecodeFailure) for d in decoded) + 1 + 6
    assert sum(n for r, n in reasons.items() if r != "duplicate_log_id") == bad, reasons

    # each dead letter keeps the original key (none stays none), headers and null value
    by_key = {m.key() or b"": m for m in letters if (m.key() or b"").startswith(b"k-")}
    assert sorted(by_key) == [b"k-1", b"k-2", b"k-bad-time", b"k-bundle", b"k-tomb"]
    assert by_key[b"k-1"].value() == b"<not json>"
    assert headers_of(by_key[b"k-1"])["x-original-header-trace"] == b"abc"
    for key in (b"k-2", b"k-tomb"):  # a tombstone stays a tombstone
        assert by_key[key].value() is None
        assert headers_of(by_key[key])["x-tombstone"] == b"true"
        assert headers_of(by_key[key])["x-reason-code"] == b"tombstone"
        assert "x-log-id" not in headers_of(by_key[key])
    assert headers_of(by_key[b"k-tomb"])["x-original-header-h"] == b"v"
    timed = by_key[b"k-bad-time"]
    assert timed.value() == bad_time
    assert headers_of(timed)["x-reason-code"] == b"bad_timestamp"
    assert headers_of(timed)["x-log-id"] == b"bt-1"  # known to the decoder
    names = [n for n, _ in header_list(timed)]
    assert names.count("x-reason-code") == 1 and names.index("x-dead-letter-id") == 0
    assert [(n, v) for n, v in header_list(timed) if n.startswith("x-original-header-")] == [
        (f"x-original-header-{n}", v) for n, v in spoofing
    ]  # ours first, then the originals in order, duplicates kept, ours not overridden
    (keyless,) = [m for m in letters if m.key() is None and m.value() == b"not json"]
    assert not any(n.startswith("x-original-header-") for n in headers_of(keyless))
    assert "x-tombstone" not in headers_of(keyless)
    bundle = by_key[b"k-bundle"]
    assert headers_of(bundle)["x-log-id"] == b"bb-2"
    assert ("x-original-header-nullh", None) in header_list(bundle)

    # the sink stored every dead letter of the topic, as its headers describe it; any other
    # row is the sink's own duplicate-log-id rule at work
    by_id = {r["dead_letter_id"]: r for r in rows}
    on_topic = {headers_of(m)["x-dead-letter-id"].decode(): m for m in letters}
    assert set(on_topic) <= set(by_id)
    assert {by_id[i]["reason_code"] for i in set(by_id) - set(on_topic)} <= {"duplicate_log_id"}
    # and those describe the refused copy's input record, like every other dead letter
    assert {by_id[i]["source"] for i in set(by_id) - set(on_topic)} <= {dep.input_topic}
    for ident, m in on_topic.items():
        headers, row = headers_of(m), by_id[ident]
        assert (row["stage"], row["reason_code"], row["source"], row["location"]) == (
            headers["x-stage"].decode(), headers["x-reason-code"].decode(),
            headers["x-source"].decode(), headers["x-source-location"].decode(),
        )  # fmt: skip
        assert row["log_id"] == (headers["x-log-id"].decode() if "x-log-id" in headers else None)
        value = m.value() or b""
        if value.isascii():  # the rest is as the CLI's JSON renders it
            assert row["raw"] == value.decode()
    assert stored == good | {"good-1"}
    assert assessed <= stored


def test_kcat_interop(dep: Deployment) -> None:
    """kcat produces the input and reads the assessments (read_committed: each log id once)
    and the policy-gap alerts the sink's detectors publish (each id once, one per gap);
    `alerts tail` reads them too."""
    kcat = shutil.which("kcat")
    assert kcat, "kcat is required (Debian package kcat; .ci/run installs it)"
    lines = [line for line in EXAMPLE_LOG.read_bytes().splitlines() if line.strip()]
    subprocess.run([kcat, "-P", "-b", dep.bootstrap, "-t", dep.input_topic],
                   input=b"\n".join(lines) + b"\n", check=True, timeout=60)  # fmt: skip

    def kcat_read(topic: str, fmt: str | None = None) -> bytes:
        args = [kcat, "-C", "-b", dep.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
                "-X", "isolation.level=read_committed"]  # fmt: skip
        out = subprocess.run(
            args + (["-f", fmt] if fmt else []), capture_output=True, check=True, timeout=60
        )
        return out.stdout

    def gap_alerts() -> list[dict[str, Any]]:
        raw = read_to_end(dep.bootstrap, [dep.topic("alerts.policy-gap")], "read_uncommitted")
        return [orjson.loads(m.value() or b"") for m in raw]

    def gaps() -> list[dict[str, Any]]:
        out = dep.cli("gaps", "--json").stdout
        return [orjson.loads(x) for x in out.splitlines() if x.strip()]

    fleet = Fleet(dep)
    fleet.worker("w1")
    fleet.sink()
    try:
        fleet.wait_drained()
        fleet.wait_loaded()
        # the sink's detector pass (every 2 s here) raises one alert per policy gap
        state: dict[str, Any] = {}

        def alerted() -> bool:
            state.update(alerts=gap_alerts(), gaps=gaps())
            gap_ids = {a["gap_id"] for a in state["alerts"]}
            return bool(gap_ids) and gap_ids == {g["gap_id"] for g in state["gaps"]}

        fleet.wait_for(
            "one policy-gap alert per gap",
            alerted,
            lambda: (len(state.get("alerts", [])), len(state.get("gaps", []))),
            idle_limit=60,
        )
        assessed = one_current_assessment_per_refusal(dep)
        stored = dep.sql("SELECT alert_id FROM alerts FINAL WHERE kind = 'policy_gap'")
        assert fleet.stop() == {"w1": 0, "sink": 0}, fleet.logs()
    finally:
        fleet.kill_all()

    keys = Counter(kcat_read(dep.topic("assessments"), "%k\\n").decode().split())
    assert set(keys) == assessed and set(keys.values()) == {1}
    alerts = [orjson.loads(x) for x in kcat_read(dep.topic("alerts.policy-gap")).splitlines() if x]
    assert sorted(alerts, key=orjson.dumps) == sorted(state["alerts"], key=orjson.dumps)
    assert all(a["kind"] == "policy_gap" and a["example_log_ids"] for a in alerts)
    ids = [a["alert_id"] for a in alerts]
    assert len(ids) == len(set(ids)), "an alert id reached the topic twice"
    assert sorted(a["gap_id"] for a in alerts) == sorted(g["gap_id"] for g in state["gaps"])
    assert sorted(r["alert_id"] for r in stored) == sorted(ids)
    tailed = dep.cli("alerts", "tail", "--kind", "policy-gap", "--from-beginning",
                     "--max", str(len(alerts)), "--idle-timeout", "20").stdout  # fmt: skip
    got = [orjson.loads(line)["alert"] for line in tailed.splitlines() if line.strip()]
    assert sorted(a["alert_id"] for a in got) == sorted(ids)


def test_a_second_sink_on_the_embedded_store_refuses_and_the_first_goes_on(
    dep: Deployment,
) -> None:
    dep.cli("produce", str(EXAMPLE_LOG))
    fleet = Fleet(dep)
    fleet.worker("w1")
    fleet.sink()
    try:
        fleet.wait_drained()
        fleet.wait_loaded()
        second = dep.cli("sink", check=False, timeout=120)
        assert second.returncode == 2, second.stderr[-2000:]
        assert "one sink per embedded store" in second.stderr
        # the first sink still owns the store and serves it
        assert dep.sql("SELECT count() AS n FROM refusal_events FINAL")[0]["n"] > 0
        assert fleet.stop() == {"w1": 0, "sink": 0}, fleet.logs()
    finally:
        fleet.kill_all()
