"""Helpers for the scale-out tests (issue 14) against the real broker: transactional workers
(``refusal-audit worker --outputs topics``) and warehouse sinks (``refusal-audit sink``) as
named subprocesses of one :class:`streaming.Deployment`, restarted after exit status 70 the
way their supervisor would (docs/streaming.md), and readers that take topics to their end
with ``read_committed`` (what the sink and any downstream reader see).

Waits poll for progress (input records committed by the workers' group, offsets committed by
the sink's group) and give up only when nothing moved for ``idle_limit`` seconds: a stuck
deployment fails with the tail of every process's log, a slow machine does not.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from streaming import Deployment, json_records

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"
EXIT_CRASH = 70  # refusal_audit.streaming.cli: cannot go on, nothing in hand committed
# what the sink reads (refusal_audit.streaming.warehouse_sink.WarehouseSink.start)
SINK_TOPICS = ("stored-events", "assessments", "audit-batches", "dead-letters")

Headers = list[tuple[str, str | bytes | None]]
Record = tuple[bytes | None, bytes | None, Headers | None]


def example_events(copies: int) -> list[dict[str, Any]]:
    """The example log ``copies`` times, copy ``c`` of event ``x`` with log id ``x-c``."""
    lines = [orjson.loads(x) for x in EXAMPLE_LOG.read_bytes().splitlines() if x.strip()]
    return [{**e, "log_id": f"{e['log_id']}-{c}"} for c in range(copies) for e in lines]


def produce(bootstrap: str, topic: str, records: Iterable[Record]) -> int:
    """Send ``(key, value, headers)`` records in order (idempotent producer); return how
    many. Fails unless the broker acknowledged every one."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20})  # fmt: skip
    sent, failed = 0, []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failed.append(str(err))

    for key, value, headers in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=headers,
                                 on_delivery=delivered)  # fmt: skip
                break
            except BufferError:
                producer.poll(0.1)
        sent += 1
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, f"not acknowledged: {failed[:3]}"
    return sent


class Feeder:
    """Produces ``records`` to ``topic`` in order while the workers run, a little at a time
    (:meth:`top_up`, called as they make progress): at most ``backlog`` records produced but
    not yet committed by the workers, and at most ``rate`` records a second (None: no
    limit). So work is pending whenever a failure strikes, and the input does not run out
    while a test waits for a process to start."""

    def __init__(
        self, bootstrap: str, topic: str, records: list[Record], backlog: int, rate: float | None
    ) -> None:
        self.topic = topic
        self.records = records
        self.backlog = backlog
        self.rate = rate
        self.sent = 0
        self.failed: list[str] = []
        self._tokens = float(backlog)
        self._last = time.monotonic()
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "linger.ms": 20})  # fmt: skip

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.failed.append(str(err))

    def top_up(self, committed: int) -> None:
        """Produce what the limits allow (``committed`` < 0: unknown, nothing produced)."""
        now = time.monotonic()
        if self.rate is not None:  # refilled at ``rate`` up to one second's records
            refilled = min(max(self.rate, 1.0), self._tokens + self.rate * (now - self._last))
            self._tokens = max(self._tokens, refilled)
        self._last = now
        target = min(len(self.records), committed + self.backlog)
        while self.sent < target and (self.rate is None or self._tokens >= 1):
            key, value, headers = self.records[self.sent]
            try:
                self.producer.produce(self.topic, value=value, key=key, headers=headers,
                                      on_delivery=self._delivered)  # fmt: skip
            except BufferError:
                break
            self.sent += 1
            self._tokens -= 1
        self.producer.poll(0)

    def finish(self) -> None:
        """Wait until the broker acknowledged every record; fail otherwise."""
        assert self.sent == len(self.records), f"{self.sent} of {len(self.records)} produced"
        assert self.producer.flush(120) == 0 and not self.failed, self.failed[:3]


def read_to_end(
    bootstrap: str, topics: Iterable[str], isolation: str = "read_committed", limit: float = 120
) -> list[Message]:
    """Every message of ``topics`` from the beginning to the end of each partition (the last
    stable offset with ``read_committed``: what committed transactions wrote), in partition
    order. Assigns the partitions directly (no group rebalance to wait for)."""
    names = list(topics)
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic_ns()}",
        "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": isolation,
    })  # fmt: skip
    try:
        meta = consumer.list_topics(timeout=30)
        parts = [TopicPartition(t, p, OFFSET_BEGINNING)
                 for t in names for p in sorted(meta.topics[t].partitions)]  # fmt: skip
        consumer.assign(parts)
        pending = {(tp.topic, tp.partition) for tp in parts}
        out: list[Message] = []
        deadline = time.monotonic() + limit
        while pending:
            if time.monotonic() > deadline:
                raise AssertionError(f"not at the end of {sorted(pending)} after {limit} s")
            for msg in consumer.consume(10_000, 0.5):
                err = msg.error()
                if err is None:
                    out.append(msg)
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard((msg.topic() or "", msg.partition() or 0))
                else:
                    raise AssertionError(f"consumer error reading {names}: {err}")
        return out
    finally:
        consumer.close()


def end_offsets(messages: Iterable[Message]) -> dict[tuple[str, int], int]:
    """Per (topic, partition): the offset after its last message among ``messages``."""
    ends: dict[tuple[str, int], int] = {}
    for m in messages:
        key = (m.topic() or "", m.partition() or 0)
        ends[key] = max(ends.get(key, 0), (m.offset() or 0) + 1)
    return ends


def committed_offsets(
    bootstrap: str, group: str, partitions: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """The offsets consumer group ``group`` committed (-1: none yet)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})  # fmt: skip
    try:
        tps = [TopicPartition(t, p) for t, p in partitions]
        return {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(tps, timeout=10)}
    finally:
        consumer.close()


def open_offset_commit(
    bootstrap: str, group: str, topic: str, partition: int, offset: int, transactional_id: str
) -> Producer:
    """A transactional producer left with an offset commit for ``group`` open (sent, neither
    committed nor aborted; 120 s transaction timeout): what a producer abandoned mid-call
    leaves, which keeps the group's committed offsets unreadable (UNSTABLE_OFFSET_COMMIT)
    until ``abort_transaction`` is called on the returned producer."""
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    zombie = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                       "transaction.timeout.ms": 120_000})  # fmt: skip
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.send_offsets_to_transaction(
        [TopicPartition(topic, partition, offset)], member.consumer_group_metadata(), 30
    )
    member.close()
    return zombie


class DrainStuck(AssertionError):
    """:meth:`Fleet.wait_for` saw no progress for its idle limit: ``progress`` is the last
    value seen (-1: the group's committed offsets unreadable), ``broker`` what the broker
    said of its transactions ("" without ``Fleet.diagnose``)."""

    def __init__(self, message: str, progress: object, broker: str) -> None:
        super().__init__(message)
        self.progress = progress
        self.broker = broker


#: The known defect a drain can stall on after a broker restart (docs/streaming.md, "Known
#: defect"): seen in fresh-clone CI runs on 2026-12-05 and 2026-12-06, not reproduced here.
HUNG_OFFSETS = (
    "known defect: after a broker restart during a drain, a transactional offset commit can "
    "stay open on the group's __consumer_offsets partition of the restarted broker (Kafka "
    "4.4, librdkafka 2.16), so the group's committed offsets are unreadable "
    "(UNSTABLE_OFFSET_COMMIT) until an operator aborts it (KIP-664)"
)


def abort_hung_offsets(broker_control: Any, group: str, remedied: list[str]) -> bool:
    """Apply the runbook of :data:`HUNG_OFFSETS` once per test: when a transaction is open
    on ``group``'s offsets partition, abort it (``BrokerControl.abort_offset_transactions``),
    append what the tool said to ``remedied`` and return True; otherwise (none open, or
    already applied once) return False and the caller fails."""
    if remedied or not broker_control.open_offset_transactions(group):
        return False
    remedied.append(broker_control.abort_offset_transactions(group))
    return True


@dataclass
class Member:
    """One named process of the fleet (its current incarnation): the CLI arguments, the
    process and the log file of this start (each start writes a file of its own)."""

    name: str
    args: tuple[str, ...]
    proc: subprocess.Popen[bytes]
    log: Path
    starts: int = 1
    stopped: bool = False  # by :meth:`Fleet.stop`: no longer supervised

    def done_work(self) -> int:
        """Windows this incarnation committed (a worker's "window committed" log records) or
        blocks it stored (a sink's "block stored")."""
        done = {"window committed", "block stored"}
        return sum(1 for r in json_records(self.log) if r.get("message") in done)


@dataclass
class Fleet:
    """Workers and sinks of one deployment, each a subprocess with a name (its
    ``REFUSAL_AUDIT_KAFKA_GROUP_INSTANCE_ID``, hence its transactional id), any free port
    for its web server, ``worker_take_max`` = ``take_max``. :meth:`supervise` restarts a
    member that exited 70 (the documented crash status: run it under a supervisor) and
    fails the test on any other exit."""

    dep: Deployment
    take_max: int = 250
    sink_args: tuple[str, ...] = ("--max-wait", "0.5")
    members: dict[str, Member] = field(default_factory=dict)
    crash_restarts: list[str] = field(default_factory=list)
    #: what the broker says of open transactions, added to a "stuck" failure
    #: (``BrokerControl.transactions_report``; None: nothing to add)
    diagnose: Callable[[], str] | None = None
    _seq: int = 0
    _input_partitions: list[tuple[str, int]] = field(default_factory=list)

    def _spawn(self, name: str, args: tuple[str, ...], starts: int = 1) -> Member:
        env = {**self.dep.env(), "REFUSAL_AUDIT_KAFKA_GROUP_INSTANCE_ID": name,
               "REFUSAL_AUDIT_WORKER_TAKE_MAX": str(self.take_max),
               "REFUSAL_AUDIT_WORKER_WEB_PORT": "0"}  # fmt: skip
        self._seq += 1
        log = self.dep.data_dir / f"{name}-{self._seq:02d}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "refusal_audit.cli", *args],
                                    cwd=REPO, env=env, stdout=out,
                                    stderr=subprocess.STDOUT)  # fmt: skip
        member = Member(name, args, proc, log, starts)
        self.members[name] = member
        return member

    def worker(self, name: str) -> Member:
        """Start transactional worker ``name``."""
        return self._spawn(name, ("worker", "--outputs", "topics"))

    def sink(self, name: str = "sink") -> Member:
        """Start a warehouse sink (it owns the deployment's embedded store)."""
        return self._spawn(name, ("sink", *self.sink_args))

    def restart(self, name: str) -> Member:
        """Start ``name`` again (same arguments and instance id) after it ended."""
        old = self.members[name]
        assert old.proc.poll() is not None, f"{name} is still running"
        return self._spawn(name, old.args, old.starts + 1)

    def kill(self, name: str) -> Member:
        """SIGKILL ``name`` (it must be running) and start it again at once."""
        member = self.members[name]
        assert member.proc.poll() is None, (
            f"{name} exited {member.proc.returncode} before its kill:\n{self.logs()}"
        )
        member.proc.kill()
        member.proc.wait()
        return self.restart(name)

    def supervise(self) -> None:
        """Restart members that exited 70; fail on any other exit."""
        for name, member in list(self.members.items()):
            code = member.proc.poll()
            if code is None or member.stopped:
                continue
            if code != EXIT_CRASH:
                raise AssertionError(f"{name} exited {code} (only 0 on SIGTERM and 70 are "
                                     f"documented):\n{self.logs()}")  # fmt: skip
            self.crash_restarts.append(name)
            self.restart(name)

    def stop(self, *names: str, timeout: float = 90) -> dict[str, int]:
        """SIGTERM the named members (all when none named), wait; their exit statuses."""
        chosen = [self.members[n] for n in (names or tuple(self.members))]
        for m in chosen:
            m.stopped = True
            if m.proc.poll() is None:
                m.proc.send_signal(signal.SIGTERM)
        codes = {}
        for m in chosen:
            try:
                codes[m.name] = m.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait()
                codes[m.name] = -9
        return codes

    def kill_all(self) -> None:
        """SIGKILL whatever still runs (test clean-up)."""
        for m in self.members.values():
            if m.proc.poll() is None:
                m.proc.kill()
                m.proc.wait()

    def logs(self, chars: int = 2500) -> str:
        """The tail of every log file written so far, oldest first."""
        paths = sorted(self.dep.data_dir.glob("*-[0-9][0-9].log"), key=lambda p: p.name[-6:])
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}"
                         for p in paths)  # fmt: skip

    # -- progress --------------------------------------------------------------------------
    def committed_input(self) -> int:
        """Input records the workers' group committed (the sum of its committed offsets);
        -1 while the broker does not answer."""
        try:
            if not self._input_partitions:
                admin = AdminClient({"bootstrap.servers": self.dep.bootstrap})
                meta = admin.list_topics(self.dep.input_topic, timeout=10)
                self._input_partitions = [
                    (self.dep.input_topic, p) for p in meta.topics[self.dep.input_topic].partitions
                ]
            offsets = committed_offsets(self.dep.bootstrap, self.dep.group,
                                        self._input_partitions)  # fmt: skip
        except KafkaException:
            return -1
        return sum(max(o, 0) for o in offsets.values())

    def sink_committed(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The sink group's committed offsets of ``partitions`` ({} while unreadable)."""
        try:
            return committed_offsets(self.dep.bootstrap, f"{self.dep.group}-sink", partitions)
        except KafkaException:
            return {}

    def wait_for(
        self,
        what: str,
        done: Callable[[], bool],
        progress: Callable[[], object],
        idle_limit: float = 150.0,
        every: float = 0.5,
    ) -> None:
        """Supervise until ``done()``; fail when ``progress()`` stayed the same for
        ``idle_limit`` seconds (the deployment is stuck)."""
        last, since = progress(), time.monotonic()
        while True:
            self.supervise()
            if done():
                return
            now = progress()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > idle_limit:
                silent = {n: f"{time.time() - m.log.stat().st_mtime:.0f} s"
                          for n, m in self.members.items() if m.proc.poll() is None}  # fmt: skip
                broker = self.diagnose() if self.diagnose is not None else ""
                raise DrainStuck(
                    f"stuck: no progress for {idle_limit:.0f} s while waiting for {what} "
                    f"(progress {now!r}; running, silent for: {silent}; restarted after "
                    f"exit 70: {self.crash_restarts}):\n{broker}\n{self.logs()}",
                    now,
                    broker,
                )
            time.sleep(every)

    # -- whole phases ------------------------------------------------------------------------
    def wait_drained(self) -> None:
        """Supervise until the workers' group committed every input record produced."""
        self.wait_for(
            "the workers to commit every input record",
            lambda: self.dep.committed_lag(attempts=2) == 0,
            self.committed_input,
        )

    def wait_loaded(self) -> list[Message]:
        """Read what the sink reads (its topics, to their end, ``read_committed``) and
        supervise until the sink's group committed all of it (it is stored then); return
        the messages read. Call it once the workers have committed everything."""
        results = read_to_end(self.dep.bootstrap, [self.dep.topic(t) for t in SINK_TOPICS])
        ends = end_offsets(results)

        def loaded() -> dict[tuple[str, int], int]:
            return self.sink_committed(ends)

        self.wait_for(
            "the sink to load every committed result",
            lambda: all(loaded().get(tp, -1) >= end for tp, end in ends.items()),
            lambda: sorted(loaded().items()),
        )
        return results


def one_current_assessment_per_refusal(dep: Deployment) -> set[str]:
    """Check the warehouse (one query, through the running sink or on the store): every
    refusal has exactly one current assessment and one assessment row (``FINAL``), nothing
    else is assessed; return the refusals' log ids."""
    (row,) = dep.sql(
        "SELECT (SELECT arraySort(groupArray(log_id)) FROM refusal_events FINAL "
        "WHERE is_refusal) AS refusals, "
        "(SELECT arraySort(groupArray(log_id)) FROM current_assessments) AS current, "
        "(SELECT arraySort(groupArray(log_id)) FROM assessments FINAL) AS assessed"
    )
    assert row["current"] == row["refusals"], "not one current assessment per refusal"
    assert row["assessed"] == row["refusals"], "assessments besides one per refusal"
    return set(row["refusals"])
