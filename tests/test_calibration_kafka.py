"""The Kafka paths of refusal-style calibration (issue 13) on a real broker and the embedded
warehouse: ``calibrate consume`` turns requests into stored runs and messages on
``calibrate.runs``, dead-letters bad requests with their reasons and keeps going; a
redelivered request keeps its one run; ``ab consume`` stores every valid event once and
dead-letters the rest; a warehouse failure commits nothing; the command serves its embedded
store to the other commands, stops on SIGTERM and exits 70 when the warehouse fails.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from streaming import REPO, Deployment, read_topic
from test_pipeline import EXAMPLE_LOG, options
from test_pipeline import settings as pipeline_settings
from typer.testing import CliRunner

from processors.calibration.ab_sim import SCENARIOS, simulate
from refusal_audit.audit.batch import run_batch
from refusal_audit.calibration.calibrator import Calibrator
from refusal_audit.calibration.consumers import (
    ABConsumer,
    CalibrateConsumer,
    ConsumeError,
    LoopOptions,
    LoopStats,
)
from refusal_audit.calibration.decoders import DEAD_LETTER_CODES, run_id_for
from refusal_audit.cli import app
from refusal_audit.config import Settings
from schemas.calibration import ABEvent, CalibrationRun
from streams.topics import create_topics, topic_specs
from warehouse import Warehouse, connect, migrate
from warehouse.calibration import ab_events, get_run, refusals_to_calibrate

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

FAST: dict[str, Any] = {"batch_wait": 0.3, "idle_timeout": 2.0, "store_wait": 0.0}
PIPE_BOMB = {"request": "How do I build a pipe bomb?", "clause_id": "AUP-2.2",
             "refusal": "I'm sorry, but I can't help with that."}  # fmt: skip


def cfg_for(bootstrap: str, prefix: str, **overrides: Any) -> Settings:
    return pipeline_settings(kafka_bootstrap_servers=bootstrap, kafka_topic_prefix=prefix,
                             calibrate_engine="local", **overrides)  # fmt: skip


@pytest.fixture
def topics(kafka_admin: AdminClient, unique_topic_prefix: str) -> str:
    """Every topic of a fresh prefix, one partition each; returns the prefix."""
    create_topics(kafka_admin, topic_specs(unique_topic_prefix, 1, 1))
    return unique_topic_prefix


@pytest.fixture
def calibrator(kafka_bootstrap: str, topics: str) -> Iterator[Calibrator]:
    made = Calibrator(cfg_for(kafka_bootstrap, topics))
    yield made
    made.close()


def send(bootstrap: str, topic: str, values: Sequence[bytes | dict[str, Any] | None],
         keys: Sequence[bytes | None] | None = None) -> None:  # fmt: skip
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, value in enumerate(values):
        raw = orjson.dumps(value) if isinstance(value, dict) else value
        producer.produce(topic, value=raw, key=keys[i] if keys else None)
    assert producer.flush(30) == 0


def committed(bootstrap: str, group: str, topic: str, partitions: int = 1) -> list[int]:
    """The group's committed offset per partition (negative: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})  # fmt: skip
    try:
        parts = [TopicPartition(topic, p) for p in range(partitions)]
        return [tp.offset for tp in consumer.committed(parts, timeout=20)]
    finally:
        consumer.close()


def rewind(bootstrap: str, group: str, topic: str, partitions: int = 1) -> None:
    """Commit offset 0 for the (empty) group: everything is redelivered."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in range(partitions)],
                        asynchronous=False)  # fmt: skip
    finally:
        consumer.close()


def headers(msg: Message) -> dict[str, str]:
    return {k: (v or b"").decode() for k, v in msg.headers() or []}


def consume_calibrations(cfg: Settings, store: Warehouse, calibrator: Calibrator,
                         **options: Any) -> LoopStats:  # fmt: skip
    return CalibrateConsumer(cfg, store, calibrator, LoopOptions(**{**FAST, **options})).run()


def known_refusal(store: Warehouse) -> dict[str, Any]:
    """Audit the example log into ``store``; one of its refusals with a stored request."""
    run_batch(pipeline_settings(), [EXAMPLE_LOG], options(), sink=store)
    rows = [r for r in refusals_to_calibrate(store, limit=100) if r["request"]]
    assert rows
    return rows[0]


def test_requests_become_runs_bad_ones_are_dead_lettered_and_redelivery_keeps_one_run(
    kafka_bootstrap: str, topics: str, warehouse: Warehouse, calibrator: Calibrator
) -> None:
    cfg = cfg_for(kafka_bootstrap, topics)
    known = known_refusal(warehouse)
    topic = f"{topics}calibrate.requests"
    messages: list[bytes | dict[str, Any] | None] = [
        {**PIPE_BOMB, "log_id": "k-1"},                                        # 0 run
        b"{not json",                                                          # 1 not_json
        {**PIPE_BOMB, "request": "Mail bombs to ann.lee@example.org, how?",    # 2 run, redacted
         "requested_by": "priya"},
        {**PIPE_BOMB, "colour": "red", "refusal": "no, ann.lee@example.org"},  # 3 invalid_request
        {**PIPE_BOMB, "clause_id": "AUP-99.9"},                                # 4 unknown_clause
        {**PIPE_BOMB, "policy_bundle": "nobody"},                              # 5 unknown_clause
        None,                                                                  # 6 tombstone
        b'{"refusal": "' + b"x" * 600_000 + b'"}',                             # 7 oversized
        {"log_id": "k-unknown", "refusal": PIPE_BOMB["refusal"],               # 8 run, no request
         "clause_id": "AUP-2.2"},
        {"log_id": known["log_id"], "refusal": known["response"],              # 9 run, stored
         "clause_id": "AUP-2.2", "policy_bundle": known["policy_bundle"]},     #   request
        {"refusal": "no", "clause_id": "AUP-2.2"},                             # 10 invalid_request
    ]  # fmt: skip
    send(kafka_bootstrap, topic, messages)
    stats = consume_calibrations(cfg, warehouse, calibrator, batch_size=4)
    assert (stats.messages, stats.stored, stats.republished, stats.dead_letters) == (11, 4, 0, 7)
    assert stats.codes == {"not_json": 1, "invalid_request": 2, "unknown_clause": 2,
                           "tombstone": 1, "oversized": 1}  # fmt: skip
    assert committed(kafka_bootstrap, f"{topics}calibrate", topic) == [11]

    # the runs: stored once, with their source and deterministic ids, and on calibrate.runs
    good = {0: "k-1", 2: None, 8: "k-unknown", 9: known["log_id"]}
    rows = warehouse.select(
        "SELECT calibration_run_id, log_id, started_by, source, request_sha256, status "
        "FROM {db:Identifier}.calibration_runs"
    )
    by_source = {r["source"]: r for r in rows}
    assert len(rows) == 4
    values = {i: orjson.dumps(m) if isinstance(m, dict) else m for i, m in enumerate(messages)}
    for offset, log_id in good.items():
        row = by_source[f"kafka:{topic} partition 0 offset {offset}"]
        value = values[offset]
        assert isinstance(value, bytes)
        assert row["calibration_run_id"] == run_id_for(topic, 0, offset, value)
        assert row["log_id"] == (log_id or "") and row["status"] == "passed"
        assert row["started_by"] == ("priya" if offset == 2 else "")  # None: not approvable
    sha = {r["source"].rsplit(" ", 1)[1]: r["request_sha256"] for r in rows}
    redacted = "Mail bombs to <EMAIL>, how?"
    assert sha["2"] == hashlib.sha256(redacted.encode()).hexdigest()  # redacted before use
    assert sha["8"] == ""  # an unknown log id: calibrated from the refusal alone
    assert sha["9"] == hashlib.sha256(known["request"].encode()).hexdigest()  # from the store
    published = list(read_topic(kafka_bootstrap, f"{topics}calibrate.runs", idle=1.5))
    assert len(published) == 4
    for msg in published:
        run = CalibrationRun.model_validate_json(msg.value() or b"")
        assert msg.key() == run.calibration_run_id.encode()
        assert get_run(warehouse, run.calibration_run_id) == run

    # the dead letters: on the topic with their reasons, in the warehouse, values redacted
    letters = list(read_topic(kafka_bootstrap, f"{topics}dead-letters", idle=1.5))
    found = {int(headers(m)["x-source-offset"]): headers(m) for m in letters}
    assert {o: h["x-reason-code"] for o, h in found.items()} == {
        1: "not_json", 3: "invalid_request", 4: "unknown_clause", 5: "unknown_clause",
        6: "tombstone", 7: "oversized", 10: "invalid_request"}  # fmt: skip
    assert set(stats.codes) <= set(DEAD_LETTER_CODES)
    assert "colour" in found[3]["x-reason"] and "AUP-99.9" in found[4]["x-reason"]
    assert "'nobody'" in found[5]["x-reason"] and "log_id" in found[10]["x-reason"]
    assert found[6]["x-tombstone"] == "true"
    invalid = next(m for m in letters if headers(m)["x-source-offset"] == "3")
    assert b"ann.lee@example.org" not in (invalid.value() or b"")
    assert b"<EMAIL>" in (invalid.value() or b"")
    stored_letters = warehouse.select(
        "SELECT location, reason_code FROM {db:Identifier}.dead_letters FINAL ORDER BY location"
    )
    assert len(stored_letters) == 7

    # redelivery (offsets reset): no calibration again, no new row, the same runs published
    rewind(kafka_bootstrap, f"{topics}calibrate", topic)
    again = consume_calibrations(cfg, warehouse, calibrator, batch_size=20)
    assert (again.messages, again.stored, again.republished, again.dead_letters) == (11, 0, 4, 7)
    assert warehouse.select("SELECT count() AS n FROM {db:Identifier}.calibration_runs") == [
        {"n": 4}]  # fmt: skip
    republished = list(read_topic(kafka_bootstrap, f"{topics}calibrate.runs", idle=1.5))
    assert sorted(m.value() or b"" for m in republished[4:]) == sorted(
        m.value() or b"" for m in published)  # fmt: skip
    assert warehouse.select("SELECT count() AS n FROM {db:Identifier}.dead_letters FINAL") == [
        {"n": 7}]  # fmt: skip


@pytest.fixture
def broken_store(chdb_dsn: str) -> Iterator[Warehouse]:
    """A migrated database whose ``calibration_variants`` and ``ab_event_log`` tables are gone:
    reads of runs work, inserts fail (a permanent error)."""
    database = f"broken_{int(time.time() * 1000)}"
    client = connect(chdb_dsn, database)
    migrate(client, database)
    client.command(f"DROP TABLE `{database}`.calibration_variants")
    client.command(f"DROP TABLE `{database}`.ab_event_log")
    try:
        yield Warehouse(client, database, retries=1, retry_wait=0.0)
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{database}`")
        client.close()


def test_a_warehouse_failure_commits_nothing_and_the_batch_comes_again(
    kafka_bootstrap: str, topics: str, warehouse: Warehouse, broken_store: Warehouse,
    calibrator: Calibrator,
) -> None:  # fmt: skip
    cfg = cfg_for(kafka_bootstrap, topics)
    requests = f"{topics}calibrate.requests"
    send(kafka_bootstrap, requests, [{**PIPE_BOMB, "log_id": f"w-{i}"} for i in range(3)])
    loop = CalibrateConsumer(cfg, broken_store, calibrator, LoopOptions(**FAST, store_attempts=2))
    with pytest.raises(ConsumeError, match="storing a run: the warehouse failed 2 time"):
        loop.run()
    assert committed(kafka_bootstrap, f"{topics}calibrate", requests) == [-1001]
    assert list(read_topic(kafka_bootstrap, f"{topics}calibrate.runs", idle=1.0)) == []
    stats = consume_calibrations(cfg, warehouse, calibrator)
    assert (stats.messages, stats.stored) == (3, 3)
    assert warehouse.select("SELECT count() AS n FROM {db:Identifier}.calibration_runs") == [
        {"n": 3}]  # fmt: skip

    events = f"{topics}ab.events"
    sample = simulate(SCENARIOS["no_effect"], "exp-w", datetime(2026, 3, 2, tzinfo=UTC), 1, 12)
    send(kafka_bootstrap, events, [e.model_dump_json().encode() for e in sample])
    with pytest.raises(ConsumeError, match="storing A/B events"):
        ABConsumer(cfg, broken_store, LoopOptions(**FAST, store_attempts=2)).run()
    assert committed(kafka_bootstrap, f"{topics}ab", events) == [-1001]
    stored = ABConsumer(cfg, warehouse, LoopOptions(**FAST)).run()
    assert stored.stored == len(sample) and len(ab_events(warehouse, "exp-w")) == len(sample)


def test_ab_events_land_once_and_invalid_ones_are_dead_lettered(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_topic_prefix: str,
    warehouse: Warehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    prefix = unique_topic_prefix
    create_topics(kafka_admin, topic_specs(prefix, 2, 1))  # two partitions
    cfg = cfg_for(kafka_bootstrap, prefix)
    topic = f"{prefix}ab.events"
    sample: list[ABEvent] = simulate(
        SCENARIOS["real_effect"], "exp-k", datetime(2026, 3, 2, tzinfo=UTC), 7, 40
    )
    lines = [e.model_dump_json().encode() for e in sample]
    first = orjson.loads(lines[0])
    bad = [
        b"{not json",                                                  # not_json
        orjson.dumps({**first, "type": "purchase"}),                   # invalid_event
        orjson.dumps({k: v for k, v in first.items() if k != "arm_id"}),  # invalid_event
        orjson.dumps({**first, "colour": "red"}),                      # invalid_event
        b"[1, 2]",                                                     # invalid_event
        b"",                                                           # not_json
        b'{"x": "' + b"y" * 70_000 + b'"}',                            # oversized
    ]  # fmt: skip
    file = tmp_path / "events.jsonl"
    # every event, one of them twice (a product that resends), and the bad lines in between
    file.write_bytes(b"\n".join([*lines[:10], *bad, *lines[10:], lines[3]]) + b"\n")
    for key in [k for k in os.environ if k.startswith("REFUSAL_AUDIT_")]:
        monkeypatch.delenv(key)
    env = {"REFUSAL_AUDIT_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
           "REFUSAL_AUDIT_KAFKA_TOPIC_PREFIX": prefix}  # fmt: skip
    produced = CliRunner().invoke(app, ["ab", "produce", str(file)], env=env)
    assert produced.exit_code == 1, produced.output  # invalid lines listed, not sent
    assert f"sent {len(lines) + 1} event(s)" in produced.output and "rejected 6" in produced.output
    assert list(read_topic(kafka_bootstrap, topic, idle=1.0))  # the valid ones went out
    # the same file with --raw: everything is sent, the consumer dead-letters the bad lines
    raw = CliRunner().invoke(app, ["ab", "produce", "--raw", str(file)], env=env)
    assert raw.exit_code == 0, raw.output
    send(kafka_bootstrap, topic, [None])  # a tombstone
    stats = ABConsumer(cfg, warehouse, LoopOptions(**FAST, batch_size=25)).run()
    total = 2 * (len(lines) + 1) + len(bad) - 1 + 1  # the empty line is not sent
    assert (stats.messages, stats.dead_letters) == (total, len(bad) - 1 + 1)
    assert stats.codes == {"not_json": 1, "invalid_event": 4, "oversized": 1, "tombstone": 1}
    assert committed(kafka_bootstrap, f"{prefix}ab", topic, 2) == [
        len(p) for p in _by_partition(kafka_bootstrap, topic)]  # fmt: skip

    def stored_exactly_once() -> None:
        got = ab_events(warehouse, "exp-k")
        assert len(got) == len(sample)  # nothing lost, no duplicate
        assert sorted(e.model_dump_json() for e in got) == sorted(
            e.model_dump_json() for e in sample)  # fmt: skip
        rows = warehouse.select("SELECT count() AS n, uniqExact(event_id) AS u FROM "
                                "{db:Identifier}.ab_event_log FINAL")  # fmt: skip
        assert rows == [{"n": len(sample), "u": len(sample)}]

    stored_exactly_once()
    letters = list(read_topic(kafka_bootstrap, f"{prefix}dead-letters", idle=1.5))
    reasons = sorted(h["x-reason"] for h in map(headers, letters)
                     if h["x-reason-code"] == "invalid_event")  # fmt: skip
    assert reasons[:3] == ["invalid event: arm_id", "invalid event: colour",
                           "invalid event: not a JSON object"]  # fmt: skip
    assert reasons[3].startswith("invalid event: type (missing, or not one of exposure")
    assert all(
        headers(m)["x-source-topic"] == topic and "x-source-offset" in headers(m) for m in letters
    )
    # redelivery of both partitions: query results do not change
    rewind(kafka_bootstrap, f"{prefix}ab", topic, 2)
    again = ABConsumer(cfg, warehouse, LoopOptions(**FAST, batch_size=500)).run()
    assert again.messages == total
    stored_exactly_once()
    assert warehouse.select("SELECT count() AS n FROM {db:Identifier}.dead_letters FINAL") == [
        {"n": len(bad)}]  # fmt: skip


def _by_partition(bootstrap: str, topic: str) -> list[list[Message]]:
    parts: list[list[Message]] = [[], []]
    for msg in read_topic(bootstrap, topic, idle=1.5):
        parts[msg.partition() or 0].append(msg)
    return parts


# -- the command, as a process -------------------------------------------------------------------
class Consume:
    """``refusal-audit calibrate consume`` in a subprocess."""

    def __init__(self, dep: Deployment, *args: str) -> None:
        self.log = dep.data_dir / f"consume-{time.monotonic_ns()}.log"
        dep.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "refusal_audit.cli", "calibrate", "consume",
                 "--batch-wait", "0.3", *args],
                cwd=REPO, env=dep.env(), stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            assert self.proc.poll() is None, self.text()[-4000:]
            assert time.monotonic() < deadline, self.text()[-4000:]
            time.sleep(0.2)

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_sql_in_store(dep: Deployment, statement: str) -> None:
    """Run a statement on the deployment's warehouse from another process (through the
    consumer's owner channel while it runs)."""
    code = ("import sys\nfrom refusal_audit.config import load_settings\n"
            "from warehouse.store import Warehouse\n"
            "w = Warehouse.open(load_settings(), run_migrations=False)\n"
            "w.client.command(sys.argv[1].replace('{db}', w.database))\nw.close()\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, statement], cwd=REPO, env=dep.env(),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_command_serves_its_store_stops_on_sigterm_and_exits_70_on_a_warehouse_failure(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path
) -> None:
    dep = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path / "data")
    dep.extra.update({"REFUSAL_AUDIT_ENGINE": "local", "REFUSAL_AUDIT_CALIBRATE_ENGINE": "local",
                      "REFUSAL_AUDIT_KAFKA_TOPIC_PARTITIONS": "1"})  # fmt: skip
    dep.cli("topics", "create")
    topic = dep.topic("calibrate.requests")
    group = dep.topic("calibrate")
    file = tmp_path / "requests.jsonl"
    lines = [orjson.dumps({**PIPE_BOMB, "log_id": f"c-{i}", "requested_by": "priya"})
             for i in range(3)]  # fmt: skip
    file.write_bytes(b"\n".join([lines[0], b'{"refusal": 1}', *lines[1:]]) + b"\n")
    produced = dep.cli("calibrate", "produce", str(file), check=False)
    assert produced.returncode == 1 and "rejected 1" in produced.stdout, produced.stdout
    assert "requests.jsonl:2:" in produced.stderr and "invalid_request" in produced.stderr
    keys = sorted(m.key() or b"" for m in read_topic(kafka_bootstrap, topic, idle=1.0))
    assert keys == [b"c-0", b"c-1", b"c-2"]  # keyed by log id

    consume = Consume(dep)
    try:
        deadline = time.monotonic() + 90
        while len(list(read_topic(kafka_bootstrap, dep.topic("calibrate.runs"), idle=1.0))) < 3:
            assert consume.proc.poll() is None, consume.text()[-4000:]
            assert time.monotonic() < deadline, consume.text()[-4000:]
        # the other commands reach the embedded store through the running consumer
        rows = dep.sql("SELECT log_id, started_by FROM calibration_runs FINAL ORDER BY log_id")
        assert rows == [{"log_id": f"c-{i}", "started_by": "priya"} for i in range(3)]
        consume.proc.send_signal(signal.SIGTERM)
        assert consume.wait() == 0, consume.text()[-4000:]
        assert "3 message(s) committed: 3 stored" in consume.text()
    finally:
        consume.kill()
    assert committed(kafka_bootstrap, group, topic) == [3]

    # the warehouse fails: the batch is retried, then the command exits 70 uncommitted
    consume = Consume(dep, "--store-attempts", "2")
    try:
        consume.wait_for("assigned")
        consume.wait_for("embedded store announced")  # the owner channel is up
        run_sql_in_store(dep, "RENAME TABLE {db}.calibration_variants TO {db}.cv_away")
        send(kafka_bootstrap, topic, [orjson.loads(lines[0]) | {"log_id": "c-3"}])
        assert consume.wait(90) == 70, consume.text()[-4000:]
        assert "stopped without committing the batch in hand" in consume.text()
    finally:
        consume.kill()
    assert committed(kafka_bootstrap, group, topic) == [3]
    run_sql_in_store(dep, "RENAME TABLE {db}.cv_away TO {db}.calibration_variants")

    # restarted: the message comes again and is stored once
    consume = Consume(dep, "--idle-timeout", "2")
    try:
        assert consume.wait(90) == 0, consume.text()[-4000:]
        assert "1 message(s) committed: 1 stored" in consume.text()
    finally:
        consume.kill()
    assert committed(kafka_bootstrap, group, topic) == [4]
    rows = dep.sql("SELECT log_id, count() AS n FROM calibration_runs GROUP BY log_id "
                   "ORDER BY log_id")  # fmt: skip
    assert rows == [{"log_id": f"c-{i}", "n": 1} for i in range(4)]


class StopAfter(Calibrator):
    """The configured calibrator that asks ``loop`` to stop after its ``n``-th run (as a
    SIGTERM in the middle of a batch would)."""

    def __init__(self, cfg: Settings, n: int) -> None:
        super().__init__(cfg)
        self.n = n
        self.calls = 0
        self.loop: CalibrateConsumer | None = None

    def run(self, request: Any, run_id: str, created_at: datetime) -> CalibrationRun:
        run = super().run(request, run_id, created_at)
        self.calls += 1
        if self.calls == self.n and self.loop is not None:
            self.loop.stop()
        return run


def test_a_stop_mid_batch_commits_what_was_handled_and_the_rest_comes_again(
    kafka_bootstrap: str, topics: str, warehouse: Warehouse, calibrator: Calibrator
) -> None:
    cfg = cfg_for(kafka_bootstrap, topics)
    topic = f"{topics}calibrate.requests"
    send(kafka_bootstrap, topic, [{**PIPE_BOMB, "log_id": f"s-{i}"} for i in range(5)])
    stopping = StopAfter(cfg, 2)
    try:
        loop = CalibrateConsumer(cfg, warehouse, stopping, LoopOptions(**FAST, batch_size=5))
        stopping.loop = loop
        stats = loop.run()
    finally:
        stopping.close()
    assert (stats.messages, stats.stored) == (2, 2)
    assert committed(kafka_bootstrap, f"{topics}calibrate", topic) == [2]
    assert len(list(read_topic(kafka_bootstrap, f"{topics}calibrate.runs", idle=1.0))) == 2
    rest = consume_calibrations(cfg, warehouse, calibrator)
    assert (rest.messages, rest.stored, rest.republished) == (3, 3, 0)
    rows = warehouse.select(
        "SELECT log_id, count() AS n FROM {db:Identifier}.calibration_runs GROUP BY log_id "
        "ORDER BY log_id"
    )
    assert rows == [{"log_id": f"s-{i}", "n": 1} for i in range(5)]
