"""The scale-out shape under failures, against the real broker (issue 14): transactional
workers (``refusal-audit worker --outputs topics``) and the warehouse sink (``refusal-audit
sink``) as subprocesses drain 20,000 events while workers and the sink are SIGKILLed, a worker
joins (a rebalance) and the broker restarts; nothing is lost and nothing is duplicated, on the
result topics (``read_committed``) and in ClickHouse.

The input arrives while the processes run (at most ``BACKLOG`` records waiting, ``RATE`` a
second), so every failure strikes with work pending. Failures strike at progress points
(input records committed by the workers' group), not at fixed times, and each SIGKILL hits
a process that did work since its start. Processes that exit 70 (the documented crash
status) are restarted as their supervisor would; any other exit fails the test, and so does
a deployment that makes no progress for 150 s.

Expected counts come from the input, not from the system under test: every produced log id
stored once; the refusals, as the pipeline judges them, alike in all 50 copies of an example
event; the three bad records, and nothing else, dead letters.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from scaleout_harness import (
    HUNG_OFFSETS,
    DrainStuck,
    Feeder,
    Fleet,
    Record,
    abort_hung_offsets,
    example_events,
    read_to_end,
)
from streaming import Deployment

pytestmark = pytest.mark.kafka

COPIES = 50  # x 400 example events = 20,000
PARTITIONS = 6  # 3 workers hold 2 each; with a 4th, 2/2/1/1
BACKLOG = 3_000  # input produced but not yet committed, at most (about 2 windows a partition)
RATE = 300  # input records a second until the last failure (the workers take about 1,500)
# (key, value, headers, reason code): bad records among the events, each a dead letter once
BAD: list[tuple[bytes, bytes | None, list[tuple[str, str | bytes | None]], str]] = [
    (b"bad-json", b"{not json", [("trace", b"t-1")], "not_json"),
    (b"bad-tomb", None, [("trace", b"t-2")], "tombstone"),
    (b"bad-field", b'{"log_id": "bad-field-1"}', [("trace", b"t-3")], "missing_field"),
]


def _base(log_id: str) -> str:
    return log_id.rsplit("-", 1)[0]


def test_workers_sink_and_broker_failures_lose_and_duplicate_nothing(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path, broker_control: Any
) -> None:
    dep = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path)
    dep.extra["REFUSAL_AUDIT_KAFKA_TOPIC_PARTITIONS"] = str(PARTITIONS)
    dep.cli("topics", "create")
    events = example_events(COPIES)
    records: list[Record] = [(e["log_id"].encode(), orjson.dumps(e), None) for e in events]
    for i, (key, value, sent_headers, _) in enumerate(BAD):  # at 5,000, 10,000 and 15,000
        records.insert((i + 1) * len(events) // (len(BAD) + 1), (key, value, sent_headers))
    total = len(records)
    produced_ids = {e["log_id"] for e in events}
    # the input arrives while the processes run and fail (scaleout_harness.Feeder)
    feeder = Feeder(kafka_bootstrap, dep.input_topic, records, BACKLOG, rate=RATE)
    fleet = Fleet(dep, take_max=250)
    fleet.diagnose = lambda: broker_control.transactions_report(dep.group, dep.prefix)
    progress = {"committed": 0}

    def committed() -> int:
        progress["committed"] = fleet.committed_input()
        feeder.top_up(progress["committed"])
        return progress["committed"]

    def at(n: int, *busy: str) -> None:
        """Wait until the group committed ``n`` input records and each of ``busy`` did work
        (committed a window, stored a block) since this call or its latest start; there
        must be work left then."""
        before = {b: (fleet.members[b].log, fleet.members[b].done_work()) for b in busy}

        def worked(name: str) -> bool:
            member, (log, done) = fleet.members[name], before[name]
            return member.done_work() > (done if member.log == log else 0)

        ride_hung_offsets(lambda: fleet.wait_for(
            f"{n} committed records and work done by {busy}",
            lambda: committed() >= n and all(worked(b) for b in busy),
            lambda: progress["committed"],
        ))  # fmt: skip
        assert progress["committed"] < total, "the drain finished before the failure"

    remedied: list[str] = []

    def ride_hung_offsets(wait: Callable[[], None]) -> None:
        """``wait()``; when it stalls on the known defect (the group's offsets unreadable,
        a transaction open on its offsets partition), abort that transaction as the runbook
        says and wait again: the rest of the test still holds, and it ends as an expected
        failure naming the defect."""
        try:
            wait()
        except DrainStuck as stuck:
            if stuck.progress != -1 or not abort_hung_offsets(broker_control, dep.group, remedied):
                raise
            remedied.append(stuck.broker)
            wait()

    try:
        feeder.top_up(0)
        for name in ("w1", "w2", "w3"):
            fleet.worker(name)
        fleet.sink()
        at(2_000, "w1", "sink")
        fleet.kill("w1")  # its open transaction is aborted when it starts again (fenced)
        fleet.kill("sink")  # the block in hand is loaded again
        at(3_000, "w2")
        fleet.kill("w2")
        at(5_000, "w1", "w2")  # back at work after the dead members' sessions expired
        fleet.worker("w4")  # a new member: the group rebalances while windows are in hand
        at(7_000, "w4")
        broker_control.restart()  # stop (controlled shutdown), start: the data is kept
        at(progress["committed"] + 1_500, "w3", "sink")  # all at work again
        fleet.kill("w3")
        fleet.kill("sink")
        feeder.rate = None  # the rest at once
        ride_hung_offsets(lambda: fleet.wait_for("the input drained", lambda: committed() == total,
                                                 lambda: progress["committed"]))  # fmt: skip
        feeder.finish()
        codes = fleet.stop("w1", "w2", "w3", "w4")
        assert set(codes.values()) == {0}, (codes, fleet.logs())

        results = fleet.wait_loaded()  # as read_committed readers and the sink see them
        assert fleet.stop("sink") == {"sink": 0}, fleet.logs()
    finally:
        fleet.kill_all()
    log = fleet.logs()

    by_topic: dict[str, list[Any]] = defaultdict(list)
    for m in results:
        by_topic[(m.topic() or "")[len(unique_topic_prefix) :]].append(m)

    # every event stored exactly once; refusals as the pipeline judges them, alike in copies
    stored = Counter((m.key() or b"").decode() for m in by_topic["stored-events"])
    assert set(stored) == produced_ids and set(stored.values()) == {1}, log
    flags: dict[str, set[bool]] = defaultdict(set)
    refusals = set()
    for m in by_topic["stored-events"]:
        row = orjson.loads(m.value() or b"")
        flags[_base(row["event"]["log_id"])].add(row["is_refusal"])
        if row["is_refusal"]:
            refusals.add(row["event"]["log_id"])
    assert all(len(f) == 1 for f in flags.values()), "copies of one event judged differently"
    base_refusals = sum(1 for f in flags.values() if f == {True})
    assert 0 < base_refusals < len(flags) and len(refusals) == COPIES * base_refusals

    # the assessments topic holds each refusal's log id exactly once; batches cover each once
    assessed = Counter((m.key() or b"").decode() for m in by_topic["assessments"])
    assert set(assessed) == refusals and set(assessed.values()) == {1}
    batch_ids = Counter(m.key() for m in by_topic["audit-batches"])
    assert set(batch_ids.values()) == {1}
    in_batches = Counter(i for m in by_topic["audit-batches"]
                         for i in orjson.loads(m.value() or b"")["log_ids"])  # fmt: skip
    assert set(in_batches) == refusals and set(in_batches.values()) == {1}

    # exactly the bad records are dead letters, each once, with their key and headers
    letters = by_topic["dead-letters"]
    assert sorted(m.key() for m in letters) == sorted(k for k, *_ in BAD), log
    for m in letters:
        headers = dict(m.headers() or [])
        _key, value, original, reason = next(b for b in BAD if b[0] == m.key())
        assert headers["x-reason-code"] == reason.encode() and m.value() == value
        assert headers["x-original-header-trace"] == original[0][1]
    letter_ids = sorted(dict(m.headers() or [])["x-dead-letter-id"].decode() for m in letters)

    # the alerts the sink published: each id once on the topics
    alert_msgs = read_to_end(
        kafka_bootstrap,
        [dep.topic("alerts.drift"), dep.topic("alerts.policy-gap")],
        isolation="read_uncommitted",
    )
    alert_ids = Counter(orjson.loads(m.value() or b"")["alert_id"] for m in alert_msgs)
    assert alert_ids and set(alert_ids.values()) == {1}, alert_ids.most_common(3)

    # ClickHouse: the store the sink loaded (opened by the CLI, the sink has stopped)
    (row,) = dep.sql(
        "SELECT (SELECT count() FROM refusal_events FINAL) AS events, "
        "(SELECT arraySort(groupArray(log_id)) FROM refusal_events FINAL WHERE is_refusal) "
        "AS refusals, "
        "(SELECT arraySort(groupArray(log_id)) FROM current_assessments) AS current, "
        "(SELECT arraySort(groupArray(log_id)) FROM assessments FINAL) AS assessed, "
        "(SELECT count() FROM audit_batches FINAL) AS batches, "
        "(SELECT arraySort(groupArray(dead_letter_id)) FROM dead_letters FINAL) AS letters, "
        "(SELECT arraySort(groupArray(alert_id)) FROM alerts FINAL) AS alerts"
    )
    assert row["events"] == len(produced_ids)
    assert row["refusals"] == sorted(refusals)
    assert row["current"] == sorted(refusals)  # exactly one current assessment per refusal
    assert row["assessed"] == sorted(refusals)  # and no other assessment
    assert row["batches"] == len(batch_ids)
    assert row["letters"] == letter_ids  # no dead letter but the bad records
    assert row["alerts"] == sorted(alert_ids)
    if remedied:  # everything above held, after an operator's abort
        pytest.xfail(f"{HUNG_OFFSETS}; aborted by the test:\n" + "\n".join(remedied)[:6000])
