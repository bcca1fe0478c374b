"""Scale-out figures (issue 14): transactional workers, the warehouse sink, RSS and latency.

Measures on one broker and one machine, in one run, and prints a table of the targets
(measured value, target, met / not met) followed by the details of each part:

(a) reference: a bare confluent-kafka consume + orjson decode loop over the N backlog
    events (best of ``--reference-passes``), events/s. Helpers from
    ``benchmarks/worker_throughput.py`` (the older faust worker's benchmark).
(b) one transactional worker (``refusal-audit worker --outputs topics``, local engine, a
    fresh consumer group) over the same N-event backlog into the result topics. events/s =
    backlog events committed after the group's first committed progress / seconds from it
    to drained (committed offsets == high watermarks). Target: at least 0.05 x (a). Also its
    CPU seconds per event (``/proc/<pid>/stat`` utime + stime, read as its log lines
    arrive: between its first and its last "window committed" line, over the records of
    the windows committed after the first, so start-up and the first window's lazy
    initialisation are left out; the figure including them is shown too), where its time
    goes as far as its log says (windows in hand from read to commit, above 1 when windows
    are pipelined; share of time its polling thread spent waiting for the oldest window's
    audit and committing it, ``commit_seconds``), and its RSS along the drain.
    py-spy is only looked for (a profile needs a run of its own).
(c) the sink (``refusal-audit sink``, embedded chDB in a fresh data dir, a fresh group)
    loading the result topics of (b): rows/s = rows (messages of stored-events,
    assessments, audit-batches, dead-letters, counted beforehand with a read_committed
    consumer) / seconds from the start of its first block's store to its last block's
    commit (its "block stored" log lines; the read of the first block and start-up are
    excluded, shown apart). Target: at least 0.25 x (a). Row counts are checked through
    the sink's owner channel.
(d) 1, 2 and 3 workers, each set in a fresh group on a fresh input topic: the workers are
    started, and once the group is stable with every worker holding partitions (so the
    first one up does not drain the lot alone), N events of the same content as the (a)/(b)
    backlog are produced (far faster than the workers read, so a backlog within seconds).
    Per-worker events/s and CPU seconds per event (steady, between its first and its last
    commit, as in (b)), and the group's rate. Target: every worker's CPU seconds per event
    within 15% of every other one's (max / min - 1 <= 0.15). On a 2-core machine the
    wall-time speed-up is bounded by the cores; read the per-worker rates and CPU.
(e) one worker with the openai engine against ``benchmarks/fake_openai_fixed_latency.py``
    (an OpenAI-compatible fake answering every call after ``--openai-latency`` s, 2),
    ``batch_max_events`` ``--openai-batch`` (50, with a token budget large enough for it),
    ``openai_max_concurrency`` ``--openai-concurrency`` (8), over a backlog of
    ``--openai-events`` (5000). Counted: refusals audited per second = the ``refusals`` of
    the worker's windows committed after its first (its "window committed" log lines) /
    seconds from its first to its last commit; with fewer than 5 windows, the assessment
    messages on its assessments topic (read_committed) / seconds from its first window's
    read to its last commit. The topic's total is checked against the log's. Target: at
    least 0.8 x concurrency x batch / latency (160/s). The fake's largest number of calls
    in flight and its batch sizes are shown.
(f) the worker's RSS along a drain of ``--rss-events`` (1,000,000) events, at 25/50/75/100%
    of the drain: target peak under 250 MB (issue 27; issue 14 asked 300 MB) and flat (RSS
    at 100% at most 10% above RSS at 25%); and the sink's RSS along its load of that
    drain's results (flat, same rule). When ``--rss-events`` equals ``--events`` and
    (b)/(c) ran, their samples are used.
(g) a live phase: a fresh worker and sink running, events stamped with the current time
    (``event_time``) produced at ``--live-rate`` (100/s) for ``--live-seconds`` (20 s);
    latency from event time to the assessment being queryable in the warehouse, polled
    every ``--live-poll`` s through the sink's owner channel (``warehouse.remote``, as
    ``refusal-audit query`` reaches a store another process owns). Target: p99 <=
    worker_take_within_seconds + the sink's ``--max-wait`` + 2 s. Also shown: event time to
    the assessment's produce time on the assessments topic (the worker's share).

Events are ``examples/refusal_log.jsonl`` cycled with fresh log ids (62% refusals; only
refusals get an assessment). Workers and sinks are the real CLI in subprocesses, each with
its own ``REFUSAL_AUDIT_DATA_DIR``, ``REFUSAL_AUDIT_WAREHOUSE_DSN`` and
``REFUSAL_AUDIT_KAFKA_GROUP_INSTANCE_ID``; every other ``REFUSAL_AUDIT_*`` variable of the
caller is dropped (``--setting NAME=VALUE`` adds one to all of them). Per-worker figures
come from their JSON log lines "joined group" and "window committed" (fields ``records``,
``refusals``, ``seconds``, ``commit_seconds``), stamped as they arrive (so late by whatever
a worker does between a commit and its log line); if those lines change, the per-worker
figures read n/a and the group figures (committed offsets) stay.

Figures vary with the machine's load: the load average is printed at the start and the end.
Verdicts are figures, not tests: the exit status is 0 when every selected part was
measured, 1 when one failed (the others are still measured and printed), 2 for a usage
error or no broker. Topics and groups made are deleted at the end (``--keep-topics``).

Run (broker up: ``make kafka-up``)::

    python benchmarks/scaleout.py [--parts a,b,c,d,e,f,g] [--events N] [--rss-events N]
        [--bootstrap HOST:PORT] [--json PATH] [--keep-logs]

(c) loads (b)'s results, so ``--parts c`` runs (b) too; (b) and (c) run (a) (their targets
are shares of it). A quick check: ``--events 5000 --rss-events 20000 --live-seconds 10
--openai-events 2000`` (about 2.5 minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupState,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from worker_throughput import (
    MB,
    REPO,
    SYNTHETIC_LOG,
    BenchError,
    EventFactory,
    LagProbe,
    RssSampler,
    broker_reachable,
    cli,
    delete_run_topics,
    free_port,
    log,
    measure_reference,
    produce_backlog,
    stop_worker,
    tree_rss,
    worker_env,
    worker_settings_env,
)

from streams.producer import DeliveryError, TopicWriter, make_producer
from streams.topics import TopicError, Topics, admin_client, create_topics, topic_specs
from warehouse.client import WarehouseError
from warehouse.remote.client import RemoteClient
from warehouse.remote.discovery import find_owner

HERE = Path(__file__).resolve().parent
FAKE_SERVER = HERE / "fake_openai_fixed_latency.py"
PARTS = ("a", "b", "c", "d", "e", "f", "g")
B_SHARE = 0.05  # (b) >= this share of (a)
C_SHARE = 0.25  # (c) >= this share of (a)
CPU_SPREAD = 0.15  # (d) max/min - 1 of CPU seconds per event
E_SHARE = 0.8  # (e) >= this share of concurrency x batch / latency
RSS_LIMIT_MB = 250.0  # (f) worker peak RSS: issue 27 (issue 14 asked 300)
FLAT_GROWTH = 0.10  # (f) RSS at 100% <= (1 + this) x RSS at 25%
LIVE_SLACK = 2.0  # (g) p99 <= take_within + max_wait + this
FRACTIONS = (0.25, 0.5, 0.75, 1.0)
PROBE_INTERVAL = 0.25
CLK_TCK = os.sysconf("SC_CLK_TCK")
MIN_STEADY_WINDOWS = 5  # fewer committed windows: per-worker figures over the whole span
LOG_MARKS = ("joined group", "window committed", "aborted", "block stored")


# ---------------------------------------------------------------------------- processes


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of process ``pid`` from ``/proc/<pid>/stat``, seconds (None: gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # fields from 3 (state) on
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass(frozen=True)
class LogLine:
    """A log record of interest: when it arrived (monotonic), the process's CPU seconds
    then, and the parsed JSON record."""

    at: float
    cpu: float | None
    record: dict[str, Any]

    def num(self, name: str) -> float:
        """A numeric field of the record (0 when absent or not a number)."""
        value = self.record.get(name)
        return float(value) if isinstance(value, int | float) else 0.0


class LogTail(threading.Thread):
    """Reads a subprocess's merged stdout/stderr line by line into a file, keeping the JSON
    records whose message contains one of ``LOG_MARKS``, stamped on arrival."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], path: Path) -> None:
        super().__init__(name=f"log-{name}", daemon=True)
        self.popen = popen
        self.path = path
        self.lines: list[LogLine] = []
        self._lock = threading.Lock()

    def run(self) -> None:
        """Read the output line by line until the process closes it."""
        stream = self.popen.stdout
        assert stream is not None
        with self.path.open("wb") as out:
            for raw in iter(stream.readline, b""):
                out.write(raw)
                out.flush()
                try:
                    record = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if not isinstance(record, dict):
                    continue
                message = str(record.get("message", ""))
                if any(mark in message for mark in LOG_MARKS):
                    line = LogLine(time.monotonic(), proc_cpu_seconds(self.popen.pid), record)
                    with self._lock:
                        self.lines.append(line)

    def matching(self, text: str) -> list[LogLine]:
        """The kept records whose message contains ``text``, in arrival order."""
        with self._lock:
            return [ln for ln in self.lines if text in str(ln.record.get("message", ""))]

    def tail_text(self, chars: int = 3000) -> str:
        """The end of the process's output."""
        try:
            return self.path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class Proc:
    """A CLI subprocess with its log reader and RSS sampler."""

    name: str
    popen: subprocess.Popen[bytes]
    tail: LogTail
    sampler: RssSampler
    spawned: float

    @property
    def pid(self) -> int:
        """The process id."""
        return self.popen.pid

    def check_alive(self) -> None:
        """Raise ``BenchError`` (with its output's end) when the process has exited."""
        if self.popen.poll() is not None:
            raise BenchError(
                f"{self.name} exited with status {self.popen.returncode}; its output ends:\n"
                + self.tail.tail_text()
            )

    def stop(self) -> float:
        """SIGTERM (SIGKILL after 60 s); return the seconds it took."""
        took = stop_worker(self.popen)
        self.sampler.stop()
        self.tail.join(timeout=5)
        return took


# ---------------------------------------------------------------------------- kafka helpers


class GroupProbe(LagProbe):
    """``LagProbe`` reading with ``read_uncommitted``: librdkafka asks for stable offsets
    (KIP-447) under ``read_committed`` and would wait out the workers' open transactions."""

    def _client(self) -> Any:
        """A consumer in the group that never subscribes (it does not join the group)."""
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": self.group,
                    "enable.auto.commit": False,
                    "isolation.level": "read_uncommitted",
                }
            )
        return self._consumer


def count_committed(bootstrap: str, topics: list[str], timeout: float = 600.0) -> dict[str, int]:
    """Messages visible to a ``read_committed`` reader in ``topics``, per topic (read to the
    end of every partition)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-count-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        meta = consumer.list_topics(timeout=10)
        parts = [
            TopicPartition(t, p, OFFSET_BEGINNING)
            for t in topics
            for p in meta.topics[t].partitions
        ]
        remaining = {(tp.topic, tp.partition) for tp in parts}
        counts = dict.fromkeys(topics, 0)
        consumer.assign(parts)
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                raise BenchError(f"counting {topics}: partitions not at their end: {remaining}")
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        remaining.discard((msg.topic() or "", msg.partition() or 0))
                        continue
                    raise BenchError(f"counting {topics}: {err}")
                counts[msg.topic() or ""] += 1
        return counts
    finally:
        consumer.close()


def produce_timestamps(bootstrap: str, topic: str, ids: dict[str, float]) -> dict[str, float]:
    """Produce time (the message timestamp, epoch seconds) of each message of ``topic``
    whose key is one of ``ids``, read_committed."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-ts-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    out: dict[str, float] = {}
    try:
        meta = consumer.list_topics(topic, timeout=10)
        parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.topics[topic].partitions]
        remaining = {tp.partition for tp in parts}
        consumer.assign(parts)
        deadline = time.monotonic() + 120
        while remaining and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        remaining.discard(msg.partition() or 0)
                    continue
                key = (msg.key() or b"").decode(errors="replace")
                if key in ids:
                    out[key] = msg.timestamp()[1] / 1000
    finally:
        consumer.close()
    return out


# ---------------------------------------------------------------------------- small helpers


def stamp(epoch: float) -> str:
    """RFC 3339 UTC with milliseconds for ``epoch`` (truncated, as ``isoformat`` does)."""
    return (
        datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def quantile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` (nearest rank; None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q * len(ordered) + 0.5)))
    return ordered[rank - 1]


def rss_at(sampler: RssSampler, at: float) -> float:
    """The sampled RSS (MB) nearest to monotonic time ``at`` (0 when none)."""
    samples = list(sampler.samples)
    if not samples:
        return 0.0
    return min(samples, key=lambda s: abs(s[0] - at))[1] / MB


def flat(milestones: dict[str, float]) -> tuple[bool, float | None]:
    """(flat?, growth) of RSS from the 25% to the 100% milestone."""
    first, last = milestones.get("25%"), milestones.get("100%")
    if not first or last is None:
        return False, None
    growth = last / first - 1
    return growth <= FLAT_GROWTH, growth


def fmt(value: float | None, spec: str = ",.0f", unit: str = "") -> str:
    """``value`` formatted, or n/a."""
    return "n/a" if value is None else f"{value:{spec}}{unit}"


# ---------------------------------------------------------------------------- the bench


@dataclass
class Bench:
    """One run: arguments, work dir, what to clean up, the parts' figures."""

    args: argparse.Namespace
    workdir: Path
    settings_env: dict[str, str]
    run_id: str = field(default_factory=lambda: time.strftime("%Y%m%d%H%M%S"))
    topics: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    factory: EventFactory = field(default_factory=lambda: EventFactory(SYNTHETIC_LOG))
    _writer: TopicWriter | None = None

    @property
    def bootstrap(self) -> str:
        """Kafka bootstrap servers."""
        return str(self.args.bootstrap)

    @property
    def partitions(self) -> list[int]:
        """Partition numbers of every topic made."""
        return list(range(self.args.partitions))

    @property
    def writer(self) -> TopicWriter:
        """A producer, made on first use."""
        if self._writer is None:
            self._writer = TopicWriter(make_producer(self.bootstrap))
        return self._writer

    def new_prefix(self, tag: str) -> str:
        """A fresh topic prefix with every topic created."""
        prefix = f"bench-scale-{self.run_id}-{uuid.uuid4().hex[:6]}-{tag}."
        specs = topic_specs(prefix, self.args.partitions, 1)
        self.topics += [s.name for s in specs]
        create_topics(admin_client(self.bootstrap), specs)
        return prefix

    def new_group(self, tag: str) -> str:
        """A fresh consumer group name (and its sink group), deleted at the end."""
        group = f"bench-scale-{self.run_id}-{uuid.uuid4().hex[:6]}-{tag}"
        self.groups += [group, f"{group}-sink"]
        return group

    def env(
        self, prefix: str, group: str, name: str, extra: dict[str, str] | None = None
    ) -> dict[str, str]:
        """A subprocess's environment: its own data dir, warehouse and instance id."""
        data_dir = self.workdir / name
        data_dir.mkdir(parents=True, exist_ok=True)
        settings = {
            **self.settings_env,
            "REFUSAL_AUDIT_WAREHOUSE_DSN": f"chdb://{(data_dir / 'chdb').resolve()}",
            "REFUSAL_AUDIT_KAFKA_GROUP_INSTANCE_ID": name,
            **(extra or {}),
        }
        return worker_env(self.bootstrap, prefix, group, data_dir, free_port(), settings)

    def spawn(self, name: str, args: list[str], env: dict[str, str]) -> Proc:
        """Start ``refusal-audit ARGS`` (cwd: the repository)."""
        popen = subprocess.Popen(
            [sys.executable, "-m", "refusal_audit.cli", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        tail = LogTail(name, popen, self.workdir / f"{name}.log")
        tail.start()
        sampler = RssSampler(popen.pid)
        sampler.start()
        proc = Proc(name, popen, tail, sampler, time.monotonic())
        self.procs.append(proc)
        return proc

    def stop(self, procs: list[Proc]) -> None:
        """Stop ``procs`` (SIGTERM, at once for all)."""
        for p in procs:
            if p.popen.poll() is None:
                p.popen.send_signal(signal.SIGTERM)
        for p in procs:
            p.stop()
            with contextlib.suppress(ValueError):
                self.procs.remove(p)

    def drain_timeout(self, events: int) -> float:
        """Seconds a drain of ``events`` may take (``--drain-timeout``, else scaled)."""
        if self.args.drain_timeout is not None:
            return float(self.args.drain_timeout)
        return 180.0 + events / 150.0

    def backlog(self, tag: str, events: int) -> str:
        """A fresh prefix whose input topic holds ``events`` backlog events."""
        prefix = self.new_prefix(tag)
        log(f"producing {events:,} backlog events to {Topics.from_prefix(prefix).input}")
        seconds = produce_backlog(
            self.writer, Topics.from_prefix(prefix).input, self.factory, f"{tag}-{self.run_id}-",
            events,
        )  # fmt: skip
        log(f"backlog of {events:,} produced in {seconds:.1f} s")
        return prefix


# ---------------------------------------------------------------------------- workers


def worker_figures(proc: Proc) -> dict[str, Any]:
    """What one worker did, from its log lines "joined group" and "window committed"
    (fields ``records``, ``seconds`` = window read to commit, ``commit_seconds`` when the
    worker logs it).

    Steady figures run from its first committed window to its last, so start-up and the
    first window (which initialises the pipeline lazily) are left out: events/s = records of
    the later windows / seconds between the two commits; CPU seconds per event = CPU used
    between the two commits / those records. With fewer than ``MIN_STEADY_WINDOWS`` windows
    (too few to see past the pipelining of windows), the whole span is used instead (from
    the first window's read for the rate, from "joined group" for the CPU)."""
    joined = proc.tail.matching("joined group")
    windows = proc.tail.matching("window committed")
    out: dict[str, Any] = {
        "name": proc.name,
        "pid": proc.pid,
        "windows": len(windows),
        "aborted_windows": len(proc.tail.matching("aborted")),
    }
    if not windows:
        out["note"] = (
            "joined but committed no window" if joined
            else "no 'joined group' or 'window committed' log lines (log format changed?)"
        )  # fmt: skip
        return out
    records = int(sum(w.num("records") for w in windows))
    first, last = windows[0], windows[-1]
    start = min(w.at - w.num("seconds") for w in windows)
    active = last.at - start
    joined_cpu = joined[0].cpu if joined else None
    if len(windows) >= MIN_STEADY_WINDOWS and last.at > first.at:
        events, seconds, cpu0 = records - int(first.num("records")), last.at - first.at, first.cpu
        basis = "first to last commit"
    else:
        events, seconds, cpu0 = records, active, joined_cpu
        basis = f"whole: < {MIN_STEADY_WINDOWS} windows"
    cpu = last.cpu - cpu0 if last.cpu is not None and cpu0 is not None else None
    cpu_all = last.cpu - joined_cpu if last.cpu is not None and joined_cpu is not None else None
    commits = [w.num("commit_seconds") for w in windows if "commit_seconds" in w.record]
    out.update(
        records=records,
        refusals=int(sum(w.num("refusals") for w in windows)),
        steady_refusals=int(
            sum(w.num("refusals") for w in windows)
            - (first.num("refusals") if basis == "first to last commit" else 0)
        ),
        messages=int(sum(w.num("messages") for w in windows)),
        mean_window_records=records / len(windows),
        active_seconds=active,
        steady_basis=basis,
        steady_events=events,
        steady_seconds=seconds,
        events_per_s=events / seconds if events and seconds > 0 else None,
        cpu_seconds=cpu,
        cpu_ms_per_event=1000 * cpu / events if cpu is not None and events else None,
        cpu_ms_per_event_incl_first_window=(
            1000 * cpu_all / records if cpu_all is not None and records else None
        ),
        mean_windows_in_hand=sum(w.num("seconds") for w in windows) / active if active else None,
        commit_wait_share=sum(commits) / active if commits and active else None,
    )
    return out


def wait_group_stable(bench: Bench, group: str, procs: list[Proc], timeout: float = 180) -> None:
    """Wait until ``group`` is stable with every one of ``procs`` a member holding
    partitions (as many as there are partitions when there are more workers)."""
    admin = admin_client(bench.bootstrap)
    holding = min(len(procs), len(bench.partitions))
    deadline = time.monotonic() + timeout
    state = "not described yet"
    while time.monotonic() < deadline:
        for p in procs:
            p.check_alive()
        try:
            desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
            held = [m for m in desc.members if m.assignment and m.assignment.topic_partitions]
            state = f"{desc.state.name}, {len(desc.members)} members, {len(held)} holding"
            if (
                desc.state == ConsumerGroupState.STABLE
                and len(desc.members) == len(procs)
                and len(held) == holding
            ):
                return
        except KafkaException as exc:
            state = str(exc)
        time.sleep(PROBE_INTERVAL)
    raise BenchError(f"group {group} not stable with {len(procs)} members in time: {state}")


def feed_events(bench: Bench, prefix: str, tag: str, events: int) -> None:
    """Produce ``events`` events (the backlog's content) to ``prefix``'s input topic."""
    topic = Topics.from_prefix(prefix).input
    seconds = produce_backlog(bench.writer, topic, bench.factory, f"{tag}-{bench.run_id}-", events)
    log(f"{events:,} events produced to {topic} in {seconds:.1f} s (workers running)")


def run_workers(
    bench: Bench,
    tag: str,
    prefix: str,
    count: int,
    target: int,
    extra: dict[str, str] | None = None,
    feed: bool = False,
) -> dict[str, Any]:
    """Start ``count`` transactional workers in a fresh group on ``prefix``'s input and wait
    until they drained ``target`` events; figures of the group and of each worker. With
    ``feed``, the ``target`` events are produced once the group is stable with every worker
    holding partitions (else they are there before)."""
    topics = Topics.from_prefix(prefix)
    group = bench.new_group(tag)
    procs = [
        bench.spawn(f"{tag}-w{i}", ["worker", "--outputs", "topics"],
                    bench.env(prefix, group, f"{tag}-w{i}", extra))
        for i in range(1, count + 1)
    ]  # fmt: skip
    probe = GroupProbe(bench.bootstrap, group, topics.input, bench.partitions)
    try:
        spawned = min(p.spawned for p in procs)
        origin, origin_label = spawned, "the workers' start"
        if feed:
            wait_group_stable(bench, group, procs)
            origin, origin_label = time.monotonic(), "the first event produced"
            feed_events(bench, prefix, tag, target)
        log(f"{count} worker(s) in group {group}; waiting for the drain of {target:,}")
        deadline = time.monotonic() + bench.drain_timeout(target)
        start_committed, _ = probe.read()
        first_at: float | None = None
        first_committed = 0
        first_cpu: dict[str, float | None] = {}
        milestones: dict[str, dict[str, float]] = {}
        pending = list(FRACTIONS)
        last_report = time.monotonic()
        while True:
            for p in procs:
                p.check_alive()
            committed, high = probe.read()
            now = time.monotonic()
            if first_at is None and committed > start_committed:
                first_at, first_committed = now, committed
                first_cpu = {p.name: proc_cpu_seconds(p.pid) for p in procs}
            while pending and committed >= pending[0] * target:
                fraction = pending.pop(0)
                milestones[f"{round(fraction * 100)}%"] = {
                    "seconds": round(now - origin, 2),
                    "committed": committed,
                    "rss_mb": sum(tree_rss(p.pid) for p in procs) / MB,
                }
            if committed >= target and committed == high:
                drained_at = now
                break
            if now > deadline:
                raise BenchError(
                    f"{tag}: not drained after {now - origin:.0f} s: committed "
                    f"{committed:,} of {target:,}"
                )
            if now - last_report > 30:
                log(f"{tag}: committed {committed:,} of {target:,}")
                last_report = now
            time.sleep(PROBE_INTERVAL)
        cpu_end = {p.name: proc_cpu_seconds(p.pid) for p in procs}
    finally:
        probe.close()
        bench.stop(procs)
    if first_at is None:
        first_at = drained_at
    drain_events = target - first_committed
    drain_seconds = drained_at - first_at
    workers = [worker_figures(p) for p in procs]
    rss = [
        {"name": p.name, "peak_rss_mb_drain": p.sampler.peak(first_at, drained_at) / MB,
         "peak_rss_mb": p.sampler.peak() / MB, "rss_mb_at_first_progress":
         rss_at(p.sampler, first_at)}
        for p in procs
    ]  # fmt: skip
    for w, r in zip(workers, rss, strict=True):
        w.update(r)
    group_cpu = [(cpu_end[p.name] or 0.0) - (first_cpu.get(p.name) or 0.0) for p in procs]
    return {
        "workers": count,
        "group": group,
        "events": target,
        "origin": origin_label,
        "startup_seconds": first_at - origin,
        "drain_events": drain_events,
        "drain_seconds": drain_seconds,
        "events_per_s": (
            drain_events / drain_seconds if drain_events > 0 and drain_seconds else None
        ),
        "events_per_s_incl_startup": target / (drained_at - origin),
        "group_cpu_ms_per_event": (
            1000 * sum(group_cpu) / drain_events if drain_events > 0 else None
        ),
        "milestones": milestones,
        "per_worker": workers,
    }


# ---------------------------------------------------------------------------- the sink


def wait_owner(proc: Proc, dsn: str, timeout: float = 120.0) -> RemoteClient:
    """A client on the owner channel of the embedded store ``dsn`` served by ``proc``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.check_alive()
        owner = find_owner(dsn)
        if owner is not None:
            client = RemoteClient(owner.url, owner.token, database="refusal_audit", timeout=60)
            if client.ping():
                return client
            client.close()
        time.sleep(0.2)
    raise BenchError(f"{proc.name} did not announce its owner channel within {timeout:.0f} s")


def table_counts(client: RemoteClient, where: str = "") -> dict[str, int]:
    """Row counts of the four tables the sink loads (plain count(), no FINAL)."""
    out = {}
    for table in ("refusal_events", "assessments", "audit_batches", "dead_letters"):
        out[table] = int(client.query(f"SELECT count() FROM {table} {where}").result_rows[0][0])
    return out


def run_sink(bench: Bench, tag: str, prefix: str) -> dict[str, Any]:
    """Count ``prefix``'s result topics, load them with a fresh sink and wait until every
    row is stored; rows/s, RSS along the load, row counts read back."""
    topics = Topics.from_prefix(prefix)
    names = [topics.stored_events, topics.assessments, topics.audit_batches, topics.dead_letters]
    expected_by_topic = count_committed(bench.bootstrap, names)
    expected = sum(expected_by_topic.values())
    if not expected:
        raise BenchError(f"{tag}: the result topics of {prefix!r} are empty")
    log(f"{tag}: {expected:,} result messages to load; starting the sink")
    group = bench.new_group(tag)
    env = bench.env(prefix, group, f"{tag}-sink")
    dsn = env["REFUSAL_AUDIT_WAREHOUSE_DSN"]
    proc = bench.spawn(f"{tag}-sink", [
        "sink", "--max-rows", str(bench.args.sink_max_rows), "--max-wait",
        str(bench.args.sink_max_wait), "--owner-port", "0",
    ], env)  # fmt: skip
    client: RemoteClient | None = None
    try:
        deadline = proc.spawned + bench.drain_timeout(expected)
        milestones: dict[str, dict[str, float]] = {}
        pending = list(FRACTIONS)
        while True:
            proc.check_alive()
            blocks = proc.tail.matching("block stored")
            rows = int(sum(b.num("rows") for b in blocks))
            now = time.monotonic()
            while pending and rows >= pending[0] * expected:
                fraction = pending.pop(0)
                milestones[f"{round(fraction * 100)}%"] = {
                    "seconds": round(now - proc.spawned, 2), "rows": rows,
                    "rss_mb": tree_rss(proc.pid) / MB,
                }  # fmt: skip
            if rows >= expected:
                break
            if now > deadline:
                raise BenchError(f"{tag}: sink stored {rows:,} of {expected:,} rows in time")
            time.sleep(PROBE_INTERVAL)
        cpu = proc_cpu_seconds(proc.pid)
        client = wait_owner(proc, dsn)
        stored = table_counts(client)
    finally:
        if client is not None:
            client.close()
        bench.stop([proc])
    first, last = blocks[0], blocks[-1]
    start = first.at - first.num("seconds")
    span = last.at - start
    in_blocks = sum(b.num("seconds") for b in blocks)
    return {
        "group": f"{group}-sink",
        "expected_rows": expected,
        "expected_by_topic": expected_by_topic,
        "rows": rows,
        "blocks": len(blocks),
        "startup_to_first_store_seconds": start - proc.spawned,
        "load_seconds": span,
        "rows_per_s": rows / span if span > 0 else None,
        "rows_per_s_in_blocks": rows / in_blocks if in_blocks else None,
        "rows_per_s_incl_startup": rows / (last.at - proc.spawned),
        "cpu_seconds_total": cpu,
        "stored": stored,
        "stored_matches": sum(stored.values()) == expected,
        "milestones": milestones,
        "peak_rss_mb": proc.sampler.peak() / MB,
        "peak_rss_mb_load": proc.sampler.peak(start, last.at) / MB,
    }


# ---------------------------------------------------------------------------- (e) openai


def start_fake(bench: Bench) -> tuple[subprocess.Popen[bytes], Path, dict[str, Any]]:
    """Start the fixed-latency fake OpenAI server; (process, stats file, first stats)."""
    stats = bench.workdir / "fake-openai-stats.json"
    with (bench.workdir / "fake-openai.log").open("wb") as err:
        popen = subprocess.Popen(
            [sys.executable, str(FAKE_SERVER), "--latency", str(bench.args.openai_latency),
             "--stats", str(stats)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise BenchError(f"the fake OpenAI server exited with status {popen.returncode}")
        if stats.exists():
            return popen, stats, orjson.loads(stats.read_bytes())
        time.sleep(0.1)
    popen.kill()
    raise BenchError("the fake OpenAI server did not start within 60 s")


def part_e(bench: Bench) -> dict[str, Any]:
    """(e): one worker, openai engine, against the fixed-latency fake."""
    a = bench.args
    prefix = bench.backlog("e", a.openai_events)
    fake, stats_path, first = start_fake(bench)
    try:
        extra = {
            "REFUSAL_AUDIT_ENGINE": "openai",
            "REFUSAL_AUDIT_OPENAI_BASE_URL": str(first["base_url"]),
            "REFUSAL_AUDIT_OPENAI_API_KEY": "sk-bench-fake",
            "REFUSAL_AUDIT_OPENAI_MAX_CONCURRENCY": str(a.openai_concurrency),
            "REFUSAL_AUDIT_BATCH_MAX_EVENTS": str(a.openai_batch),
            # large enough that batches close on batch_max_events (the engine caps it to the
            # model's context window)
            "REFUSAL_AUDIT_BATCH_TOKEN_BUDGET": "100000",
        }
        result = run_workers(bench, "e", prefix, 1, a.openai_events, extra)
        fake_cpu = proc_cpu_seconds(fake.pid)
    finally:
        stop_worker(fake, timeout=10)
    stats = orjson.loads(stats_path.read_bytes())
    assessments = count_committed(bench.bootstrap, [Topics.from_prefix(prefix).assessments])
    audited = sum(assessments.values())
    worker = result["per_worker"][0]
    if worker.get("steady_basis") == "first to last commit":
        count, span = worker["steady_refusals"], worker["steady_seconds"]
        basis = (
            "refusals of the windows committed after the worker's first (log field "
            "`refusals`) / seconds from its first to its last commit"
        )
    else:
        count, span = audited, worker.get("active_seconds") or result["drain_seconds"]
        basis = (
            f"fewer than {MIN_STEADY_WINDOWS} windows: assessment messages on the assessments "
            "topic / seconds from the worker's first window read to its last commit"
        )
    needed = E_SHARE * a.openai_concurrency * a.openai_batch / a.openai_latency
    rate = count / span if span else None
    return {
        **result,
        "latency_s": a.openai_latency,
        "batch_max_events": a.openai_batch,
        "openai_max_concurrency": a.openai_concurrency,
        "assessments_on_topic": audited,
        "refusals_in_log": worker.get("refusals"),
        "refusals_counted": count,
        "span_seconds": span,
        "refusals_per_s": rate,
        "fake": {**stats, "cpu_seconds": fake_cpu},
        "target": {
            "needed_refusals_per_s": needed,
            "met": rate is not None and rate >= needed,
            "count": basis,
        },
    }


# ---------------------------------------------------------------------------- (g) live


class Poller(threading.Thread):
    """Polls the warehouse for the live phase's log ids: first time (epoch) each
    assessment was seen, and how many of its events are stored."""

    def __init__(self, client: RemoteClient, prefix: str, interval: float) -> None:
        super().__init__(name="live-poller", daemon=True)
        self.client = client
        self.prefix = prefix
        self.interval = interval
        self.seen: dict[str, float] = {}
        self.events = 0
        self.polls = 0
        self.errors: list[str] = []
        self.query_seconds: list[float] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        """Poll until stopped."""
        where = f"WHERE startsWith(log_id, '{self.prefix}')"
        while not self._stop_event.is_set():
            started = time.monotonic()
            try:
                rows = self.client.query(f"SELECT log_id FROM assessments {where}").result_rows
                now = time.time()
                for (log_id,) in rows:
                    self.seen.setdefault(str(log_id), now)
                self.events = int(
                    self.client.query(f"SELECT count() FROM refusal_events {where}").result_rows[0][
                        0
                    ]
                )
                self.polls += 1
            except Exception as exc:  # recorded, the phase goes on
                self.errors.append(repr(exc))
            took = time.monotonic() - started
            self.query_seconds.append(took)
            self._stop_event.wait(max(0.0, self.interval - took))

    def stop(self) -> None:
        """Stop polling and wait for the thread."""
        self._stop_event.set()
        self.join(timeout=30)


def produce_live(
    bench: Bench, topic: str, prefix: str, rate: float, seconds: float
) -> tuple[dict[str, float], dict[str, Any]]:
    """Produce ``rate`` events/s for ``seconds``, each stamped (``event_time``) as it is
    produced; (log id -> event time epoch, figures)."""
    total = round(rate * seconds)
    times: dict[str, float] = {}
    templates = bench.factory.templates
    started = time.perf_counter()
    late = 0
    for i in range(total):
        wait = started + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        elif wait < -0.05:
            late += 1
        log_id = f"{prefix}{i:08d}"
        now = time.time()
        event = dict(templates[i % len(templates)])
        event["log_id"] = log_id
        event["event_time"] = stamp(now)
        times[log_id] = int(now * 1000) / 1000
        bench.writer.send(topic, orjson.dumps(event), key=log_id.encode())
    elapsed = time.perf_counter() - started
    bench.writer.confirm(timeout=120)
    return times, {"events": total, "seconds": elapsed, "late_sends": late,
                   "achieved_rate": total / elapsed if elapsed else None}  # fmt: skip


def part_g(bench: Bench, take_within: float) -> dict[str, Any]:
    """(g): live phase with a worker and the sink running."""
    a = bench.args
    prefix = bench.new_prefix("g")
    topics = Topics.from_prefix(prefix)
    group = bench.new_group("g")
    worker = bench.spawn(
        "g-w1", ["worker", "--outputs", "topics"], bench.env(prefix, group, "g-w1")
    )
    env = bench.env(prefix, group, "g-sink")
    sink = bench.spawn("g-sink", ["sink", "--max-rows", str(a.sink_max_rows), "--max-wait",
                                  str(a.sink_max_wait), "--owner-port", "0"], env)  # fmt: skip
    client: RemoteClient | None = None
    poller: Poller | None = None
    try:
        client = wait_owner(sink, env["REFUSAL_AUDIT_WAREHOUSE_DSN"])
        warm = f"gw-{bench.run_id}-"
        warm_n = 20
        for i in range(warm_n):
            key, value = bench.factory.make(f"{warm}{i:04d}", i)
            bench.writer.send(topics.input, value, key=key)
        bench.writer.confirm(timeout=60)
        log("live: warming up (worker and sink end to end)")
        deadline = time.monotonic() + 180
        while True:
            worker.check_alive()
            sink.check_alive()
            stored = client.query(
                f"SELECT count() FROM refusal_events WHERE startsWith(log_id, '{warm}')"
            ).result_rows[0][0]
            if int(stored) >= warm_n:
                break
            if time.monotonic() > deadline:
                raise BenchError("live: the warm-up events were not stored within 180 s")
            time.sleep(0.5)
        live = f"gl-{bench.run_id}-"
        poller = Poller(client, live, a.live_poll)
        poller.start()
        log(f"live: {a.live_rate:g} events/s for {a.live_seconds:g} s")
        times, sent = produce_live(bench, topics.input, live, a.live_rate, a.live_seconds)
        last_send = time.monotonic()
        stable, last_seen = 0, -1
        deadline = last_send + 180
        while True:
            worker.check_alive()
            sink.check_alive()
            if poller.events >= sent["events"]:
                stable = stable + 1 if len(poller.seen) == last_seen else 0
                last_seen = len(poller.seen)
                if stable >= 3:
                    break
            if time.monotonic() > deadline:
                raise BenchError(
                    f"live: {poller.events} of {sent['events']} events stored 180 s after the "
                    "last send"
                )
            time.sleep(max(a.live_poll, 0.2))
        complete_after = time.monotonic() - last_send
    finally:
        if poller is not None:
            poller.stop()
        if client is not None:
            client.close()
        bench.stop([worker, sink])
    latencies = [poller.seen[i] - times[i] for i in poller.seen if i in times]
    produced = produce_timestamps(bench.bootstrap, topics.assessments, times)
    worker_side = [produced[i] - times[i] for i in produced]
    needed = take_within + a.sink_max_wait + LIVE_SLACK
    p99 = quantile(latencies, 0.99)
    return {
        **sent,
        "rate": a.live_rate,
        "assessments": len(latencies),
        "events_stored": poller.events,
        "complete_after_last_send_seconds": complete_after,
        "poll_interval_s": a.live_poll,
        "polls": poller.polls,
        "poll_errors": poller.errors[:5],
        "mean_poll_query_s": (
            sum(poller.query_seconds) / len(poller.query_seconds) if poller.query_seconds else None
        ),
        "latency_s": {
            "p50": quantile(latencies, 0.5),
            "p99": p99,
            "max": max(latencies) if latencies else None,
        },
        "worker_latency_s": {
            "p50": quantile(worker_side, 0.5),
            "p99": quantile(worker_side, 0.99),
            "n": len(worker_side),
        },
        "worker_peak_rss_mb": worker.sampler.peak() / MB,
        "sink_peak_rss_mb": sink.sampler.peak() / MB,
        "target": {
            "take_within_s": take_within,
            "sink_max_wait_s": a.sink_max_wait,
            "needed_p99_s": needed,
            "met": p99 is not None and p99 <= needed,
        },
    }


# ---------------------------------------------------------------------------- the parts


def run_parts(bench: Bench, parts: list[str], failed: dict[str, str]) -> None:
    """Measure the selected parts into ``bench.figures`` (a failed part is recorded in
    ``failed`` and the others go on)."""
    a = bench.args
    fig = bench.figures
    settings = orjson.loads(
        cli(worker_env(bench.bootstrap, "x.", "x", bench.workdir / "cfg", 0, bench.settings_env),
            "config", "show")
    )  # fmt: skip
    take_within = float(settings.get("worker_take_within_seconds") or 2.0)
    fig["run"]["settings"] = {
        k: settings.get(k)
        for k in ("worker_take_max", "worker_take_within_seconds", "worker_windows_in_flight",
                  "batch_max_events",
                  "batch_token_budget", "redaction_enabled", "prefilter_enabled",
                  "alerts_interval_seconds")
    }  # fmt: skip

    def attempt(part: str, fn: Callable[[], Any]) -> None:
        """Measure one part into ``fig``; record a failure and stop its processes."""
        log(f"--- part ({part})")
        try:
            fig[part] = fn()
        except (BenchError, TopicError, DeliveryError, KafkaException, WarehouseError) as exc:
            failed[part] = str(exc)
            log(f"part ({part}) failed: {exc}")
        finally:
            bench.stop(list(bench.procs))

    prefix = ""
    if {"a", "b", "c", "d"} & set(parts):
        prefix = bench.backlog("main", a.events)
    if "a" in parts:
        attempt("a", lambda: measure_reference(
            bench.bootstrap, Topics.from_prefix(prefix).input, bench.partitions, a.events,
            a.reference_passes,
        ))  # fmt: skip
    if "b" in parts:
        attempt("b", lambda: run_workers(bench, "b", prefix, 1, a.events))
    if "c" in parts:
        if "b" in fig:
            attempt("c", lambda: run_sink(bench, "c", prefix))
        else:
            failed["c"] = "(b) did not run, so there are no result topics to load"
    if "d" in parts:

        def scale() -> dict[str, Any]:
            """(d): 1, 2 and 3 workers, each on a fresh topic fed once the group is stable."""
            rows = {}
            for n in (1, 2, 3):
                dprefix = bench.new_prefix(f"d{n}")
                rows[str(n)] = run_workers(bench, f"d{n}", dprefix, n, a.events, feed=True)
            return {"runs": rows}

        attempt("d", scale)
    if "e" in parts:
        attempt("e", lambda: part_e(bench))
    if "f" in parts:

        def memory() -> dict[str, Any]:
            """(f): RSS along a drain (reusing (b)/(c) when they drained as many events)."""
            if a.rss_events == a.events and "b" in fig and "c" in fig:
                return {"events": a.rss_events, "worker": fig["b"], "sink": fig["c"],
                        "reused": "(b) and (c)"}  # fmt: skip
            fprefix = bench.backlog("f", a.rss_events)
            worker = run_workers(bench, "f", fprefix, 1, a.rss_events)
            return {"events": a.rss_events, "worker": worker,
                    "sink": run_sink(bench, "f", fprefix)}  # fmt: skip

        attempt("f", memory)
    if "g" in parts:
        attempt("g", lambda: part_g(bench, take_within))


# ---------------------------------------------------------------------------- report


def targets(fig: dict[str, Any], failed: dict[str, str]) -> list[tuple[str, str, str, str, str]]:
    """Rows (part, figure, measured, target, verdict) of the summary table."""
    rows: list[tuple[str, str, str, str, str]] = []

    def verdict(ok: bool | None) -> str:
        """met / NOT MET / n/a."""
        return "n/a" if ok is None else ("met" if ok else "NOT MET")

    ref = (fig.get("a") or {}).get("events_per_s")
    if "a" in fig:
        rows.append(("a", "bare consume + orjson decode", fmt(ref, unit=" ev/s"),
                     "reference", "-"))  # fmt: skip
    if "b" in fig:
        b = fig["b"]
        rate = b["events_per_s"]
        need = B_SHARE * ref if ref else None
        w = b["per_worker"][0]
        ratio = f" ({rate / ref:.4f} x a)" if rate and ref else ""
        rows.append(("b", "1 transactional worker, local engine", fmt(rate, unit=" ev/s") + ratio,
                     f">= {fmt(need)} ev/s (0.05 x a)",
                     verdict(rate >= need if rate and need else None)))  # fmt: skip
        rows.append(("b", "  CPU per event", fmt(w.get("cpu_ms_per_event"), ".2f", " ms"), "-",
                     "-"))  # fmt: skip
    if "c" in fig:
        c = fig["c"]
        rate = c["rows_per_s"]
        need = C_SHARE * ref if ref else None
        rows.append(("c", "sink into embedded chDB", fmt(rate, unit=" rows/s"),
                     f">= {fmt(need)} rows/s (0.25 x a)",
                     verdict(rate >= need if rate and need else None)))  # fmt: skip
    if "d" in fig:
        workers = [w for run in fig["d"]["runs"].values() for w in run["per_worker"]]
        steady = all(w.get("steady_basis") == "first to last commit" for w in workers)
        key = "cpu_ms_per_event" if steady else "cpu_ms_per_event_incl_first_window"
        per = [w.get(key) for w in workers]
        vals = [v for v in per if v]
        spread = max(vals) / min(vals) - 1 if len(vals) == len(per) and vals else None
        basis = "" if steady else " *"
        rows.append(("d", f"CPU/event spread, 1+2+3 workers{basis}",
                     fmt(spread * 100 if spread is not None else None, ".1f", "%")
                     + (f" ({min(vals):.2f}-{max(vals):.2f} ms)" if vals else ""),
                     f"<= {CPU_SPREAD:.0%}",
                     verdict(spread <= CPU_SPREAD if spread is not None else None)))  # fmt: skip
    if "e" in fig:
        e = fig["e"]
        rows.append(("e", f"openai engine, fake {e['latency_s']:g} s/call, batch "
                     f"{e['batch_max_events']}, conc. {e['openai_max_concurrency']}",
                     fmt(e["refusals_per_s"], ".1f", " refusals/s"),
                     f">= {e['target']['needed_refusals_per_s']:.0f} refusals/s",
                     verdict(e["target"]["met"])))  # fmt: skip
    if "f" in fig:
        f = fig["f"]
        wk = f["worker"]
        peak = max((w.get("peak_rss_mb_drain") or 0.0) for w in wk["per_worker"])
        wflat, wgrowth = flat({k: v["rss_mb"] for k, v in wk["milestones"].items()})
        rows.append(("f", f"worker RSS peak over a {f['events']:,}-event drain",
                     fmt(peak, ".0f", " MB"), f"< {RSS_LIMIT_MB:.0f} MB",
                     verdict(peak < RSS_LIMIT_MB)))  # fmt: skip
        rows.append(("f", "  worker RSS 25% -> 100% of the drain",
                     fmt(wgrowth * 100 if wgrowth is not None else None, "+.1f", "%"),
                     f"flat (<= +{FLAT_GROWTH:.0%})", verdict(wflat)))  # fmt: skip
        sflat, sgrowth = flat({k: v["rss_mb"] for k, v in f["sink"]["milestones"].items()})
        rows.append(("f", "  sink RSS 25% -> 100% of its load",
                     fmt(sgrowth * 100 if sgrowth is not None else None, "+.1f", "%")
                     + f" (peak {f['sink']['peak_rss_mb']:.0f} MB)",
                     f"flat (<= +{FLAT_GROWTH:.0%})", verdict(sflat)))  # fmt: skip
    if "g" in fig:
        g = fig["g"]
        lat = g["latency_s"]
        rows.append(("g", f"live {g['rate']:g} ev/s: event time -> queryable, p50 / p99",
                     f"{fmt(lat['p50'], '.2f')} / {fmt(lat['p99'], '.2f')} s",
                     f"p99 <= {g['target']['needed_p99_s']:g} s",
                     verdict(g["target"]["met"])))  # fmt: skip
    for part, why in failed.items():
        rows.append((part, "FAILED", why.splitlines()[0][:60], "-", "n/a"))
    return sorted(rows, key=lambda r: r[0])


def render_table(rows: list[tuple[str, str, str, str, str]]) -> list[str]:
    """Rows as fixed-width text columns under a header."""
    head = ("part", "figure", "measured", "target", "verdict")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return out


def worker_lines(run: dict[str, Any]) -> list[str]:
    """The detail lines of one workers' run (the group, then each worker)."""
    out = [
        f"    group: {run['drain_events']:,} events in {run['drain_seconds']:.1f} s after the "
        f"first progress = {fmt(run['events_per_s'], unit=' ev/s')} (from {run['origin']}: "
        f"{run['startup_seconds']:.1f} s to the first progress, "
        f"{fmt(run['events_per_s_incl_startup'], unit=' ev/s')} overall);"
        f" CPU {fmt(run['group_cpu_ms_per_event'], '.2f', ' ms')}/event over the drain"
    ]
    for w in run["per_worker"]:
        if "records" not in w:
            out.append(f"    {w['name']}: {w.get('note', 'n/a')}")
            continue
        commit = w["commit_wait_share"]
        out.append(
            f"    {w['name']}: {w['records']:,} events in {w['windows']} windows "
            f"({w['aborted_windows']} aborted) over {w['active_seconds']:.1f} s; steady "
            f"({w['steady_basis']}): {w['steady_events']:,} events in "
            f"{w['steady_seconds']:.1f} s = {fmt(w['events_per_s'], unit=' ev/s')}, CPU "
            f"{fmt(w['cpu_seconds'], '.1f', ' s')} = {fmt(w['cpu_ms_per_event'], '.2f', ' ms')}"
            f"/event ({fmt(w['cpu_ms_per_event_incl_first_window'], '.2f', ' ms')} incl. the "
            f"first window)"
        )
        out.append(
            f"      windows in hand (read to commit) {fmt(w['mean_windows_in_hand'], '.2f')} on "
            "average; its polling thread waited for the oldest window's audit and committed "
            + (f"{commit * 100:.0f}%" if commit is not None else "n/a")
            + f" of the time; peak RSS {w['peak_rss_mb_drain']:.0f} MB"
        )
    return out


def text_report(fig: dict[str, Any], failed: dict[str, str]) -> str:
    """The printed report: header, the table of targets, then each part in detail."""
    run = fig["run"]
    lines = [
        "refusal-audit scale-out benchmark (issue 14)",
        f"  broker {run['bootstrap']}, {run['partitions']} partitions, {run['cpus']} CPUs; "
        f"events from {run['source']}: --events {run['events']:,} (a-d), --rss-events "
        f"{run['rss_events']:,} (f)",
        f"  load average at start {run['loadavg_start']}, at end {run.get('loadavg_end')}",
        f"  settings: {run.get('settings')}",
        "",
        *render_table(targets(fig, failed)),
    ]
    if "d" in fig and not all(
        w.get("steady_basis") == "first to last commit"
        for run_d in fig["d"]["runs"].values()
        for w in run_d["per_worker"]
    ):
        lines.append(
            f"* a worker committed fewer than {MIN_STEADY_WINDOWS} windows: CPU per event "
            "including the first window (lazy initialisation) for all; use more --events"
        )
    if "a" in fig:
        ref = fig["a"]
        lines += ["", f"(a) best of {ref['passes']}: {fmt(ref['events_per_s'])} ev/s; median "
                  f"{fmt(ref['median_events_per_s'])}; seconds {ref['seconds']}"]  # fmt: skip
    if "b" in fig:
        b = fig["b"]
        lines += ["", "(b) one transactional worker (local engine)", *worker_lines(b)]
        lines.append(
            "    RSS along the drain: "
            + ", ".join(f"{k} {v['rss_mb']:.0f} MB" for k, v in b["milestones"].items())
        )
        lines.append(f"    py-spy: {run['py_spy']}")
    if "c" in fig:
        c = fig["c"]
        lines += [
            "",
            "(c) sink into embedded chDB",
            f"    {c['rows']:,} rows ({c['expected_by_topic']}) in {c['blocks']} block(s), "
            f"{c['load_seconds']:.1f} s from the first store to the last commit",
            f"    inside blocks (decode + insert + commit): "
            f"{fmt(c['rows_per_s_in_blocks'], unit=' rows/s')}; incl. start-up "
            f"({c['startup_to_first_store_seconds']:.1f} s to the first store): "
            f"{fmt(c['rows_per_s_incl_startup'], unit=' rows/s')}",
            f"    read back through the owner channel: {c['stored']} "
            f"({'matches' if c['stored_matches'] else 'DOES NOT MATCH'} the topics)",
            "    RSS along the load: "
            + ", ".join(f"{k} {v['rss_mb']:.0f} MB" for k, v in c["milestones"].items())
            + f"; peak {c['peak_rss_mb']:.0f} MB",
        ]
    if "d" in fig:
        lines += ["", "(d) 1, 2 and 3 workers (fresh group each, started together)"]
        for n, run_d in fig["d"]["runs"].items():
            reused = f" [{run_d['reused']}]" if "reused" in run_d else ""
            lines.append(f"  {n} worker(s){reused}")
            lines += worker_lines(run_d)
    if "e" in fig:
        e = fig["e"]
        fake = e["fake"]
        lines += [
            "",
            "(e) openai engine against the fixed-latency fake",
            f"    {e['refusals_counted']:,} refusals in {e['span_seconds']:.1f} s = "
            f"{fmt(e['refusals_per_s'], '.1f')} refusals/s (counted: {e['target']['count']})",
            f"    all {e['events']:,} events: {e['assessments_on_topic']:,} assessments on the "
            f"topic, {e['refusals_in_log']} refusals in the worker's log"
            + ("" if e["assessments_on_topic"] == e["refusals_in_log"] else " (MISMATCH)"),
            *worker_lines(e),
            f"    fake server: {fake['requests']} calls, {fake['events']:,} events, at most "
            f"{fake['max_in_flight']} in flight, batch sizes {fake['batch_sizes']}, CPU "
            f"{fmt(fake.get('cpu_seconds'), '.1f', ' s')}",
        ]
    if "f" in fig:
        f = fig["f"]
        wk = f["worker"]
        lines += [
            "",
            f"(f) RSS along a {f['events']:,}-event drain"
            + (f" [{f['reused']}]" if "reused" in f else ""),
            "    worker: " + ", ".join(f"{k} {v['rss_mb']:.0f} MB"
                                       for k, v in wk["milestones"].items())
            + f"; peak during the drain "
            f"{max(w.get('peak_rss_mb_drain') or 0 for w in wk['per_worker']):.0f} MB, "
            f"whole run {max(w.get('peak_rss_mb') or 0 for w in wk['per_worker']):.0f} MB",
            "    sink:   " + ", ".join(f"{k} {v['rss_mb']:.0f} MB"
                                       for k, v in f["sink"]["milestones"].items())
            + f"; peak {f['sink']['peak_rss_mb']:.0f} MB",
        ]  # fmt: skip
    if "g" in fig:
        g = fig["g"]
        wl = g["worker_latency_s"]
        lines += [
            "",
            f"(g) live: {g['events']:,} events at {fmt(g['achieved_rate'], '.0f')}/s (asked "
            f"{g['rate']:g}) for {g['seconds']:.1f} s, a worker and the sink running",
            f"    event time -> assessment queryable: p50 {fmt(g['latency_s']['p50'], '.2f')} s,"
            f" p99 {fmt(g['latency_s']['p99'], '.2f')} s, max {fmt(g['latency_s']['max'], '.2f')}"
            f" s over {g['assessments']:,} assessments (polled every {g['poll_interval_s']:g} s,"
            f" mean query {fmt(g['mean_poll_query_s'], '.3f')} s)",
            f"    event time -> assessment produced by the worker: p50 {fmt(wl['p50'], '.2f')} s,"
            f" p99 {fmt(wl['p99'], '.2f')} s (n {wl['n']})",
            f"    target p99 <= take_within {g['target']['take_within_s']:g} + sink max-wait "
            f"{g['target']['sink_max_wait_s']:g} + {LIVE_SLACK:g} s; all stored "
            f"{g['complete_after_last_send_seconds']:.1f} s after the last send; peak RSS "
            f"worker {g['worker_peak_rss_mb']:.0f} MB, sink {g['sink_peak_rss_mb']:.0f} MB",
        ]
    if failed:
        lines += ["", "failed parts:"]
        lines += [f"  ({p}) {why}" for p, why in failed.items()]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Arguments; adds the parts a selected part needs ((c) needs (b); (b), (c) need (a))."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_bootstrap = os.environ.get("REFUSAL_AUDIT_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    parser.add_argument("--parts", default=",".join(PARTS), help="parts to run (a,b,c,d,e,f,g)")
    parser.add_argument("--events", type=int, default=20_000, help="backlog events (20000)")
    parser.add_argument(
        "--rss-events", type=int, default=1_000_000, help="(f) drain events (1000000)"
    )
    parser.add_argument("--bootstrap", default=default_bootstrap, help="Kafka bootstrap servers")
    parser.add_argument("--partitions", type=int, default=3, help="partitions per topic (3)")
    parser.add_argument("--reference-passes", type=int, default=3, help="(a) best of (3)")
    parser.add_argument("--sink-max-rows", type=int, default=50_000, help="sink --max-rows")
    parser.add_argument("--sink-max-wait", type=float, default=2.0, help="sink --max-wait (2)")
    parser.add_argument("--openai-events", type=int, default=5000, help="(e) backlog (5000)")
    parser.add_argument("--openai-latency", type=float, default=2.0, help="(e) s per call (2)")
    parser.add_argument("--openai-batch", type=int, default=50, help="(e) batch_max_events")
    parser.add_argument("--openai-concurrency", type=int, default=8, help="(e) max in flight")
    parser.add_argument("--live-rate", type=float, default=100.0, help="(g) events/s (100)")
    parser.add_argument("--live-seconds", type=float, default=20.0, help="(g) seconds (20)")
    parser.add_argument("--live-poll", type=float, default=0.2, help="(g) poll every s (0.2)")
    parser.add_argument(
        "--drain-timeout", type=float, default=None,
        help="max seconds per drain (default 180 + events/150)",
    )  # fmt: skip
    parser.add_argument(
        "--setting", action="append", default=[], metavar="NAME=VALUE",
        help="extra setting for every worker and sink, e.g. worker_take_max=500 (repeatable)",
    )  # fmt: skip
    parser.add_argument("--keep-topics", action="store_true", help="keep topics and groups")
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the work dir (process logs) at the end"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    args = parser.parse_args(argv)
    parts = [p.strip().lower() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        parser.error(f"--parts takes letters of {','.join(PARTS)}; got {args.parts!r}")
    if "c" in parts and "b" not in parts:
        parts.append("b")  # the sink loads (b)'s result topics
    if ({"b", "c"} & set(parts)) and "a" not in parts:
        parts.append("a")  # their targets are shares of the reference
    args.parts = [p for p in PARTS if p in parts]
    for name in ("events", "rss_events", "partitions", "reference_passes", "openai_events",
                 "openai_batch", "openai_concurrency", "sink_max_rows"):  # fmt: skip
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("openai_latency", "live_rate", "live_seconds", "live_poll", "sink_max_wait"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    return args


def py_spy_note() -> str:
    """Whether py-spy is installed (this script does not run it)."""
    found = shutil.which("py-spy") or (
        str(REPO / ".venv/bin/py-spy") if (REPO / ".venv/bin/py-spy").exists() else None
    )
    return f"installed ({found}), not run by this script" if found else "not installed (skipped)"


def main(argv: list[str] | None = None) -> int:
    """Run the selected parts, print the report; exit status as in the module docstring."""
    args = parse_args(argv)
    try:
        settings_env = worker_settings_env(args.setting)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not broker_reachable(args.bootstrap):
        print(
            f"error: no Kafka broker answers on {args.bootstrap}; start one (`make kafka-up`) "
            "or pass --bootstrap HOST:PORT",
            file=sys.stderr,
        )
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="refusal-audit-scaleout-"))
    bench = Bench(args, workdir, settings_env)
    bench.figures["run"] = {
        "run_id": bench.run_id,
        "bootstrap": args.bootstrap,
        "parts": args.parts,
        "partitions": args.partitions,
        "events": args.events,
        "rss_events": args.rss_events,
        "source": str(SYNTHETIC_LOG.relative_to(REPO)),
        "cpus": os.cpu_count(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "py_spy": py_spy_note(),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(f"load average at start: {bench.figures['run']['loadavg_start']}", flush=True)
    failed: dict[str, str] = {}
    started = time.monotonic()
    try:
        run_parts(bench, args.parts, failed)
    except (BenchError, TopicError, DeliveryError, KafkaException) as exc:
        failed["setup"] = str(exc)
    finally:
        bench.stop(list(bench.procs))
        if bench.topics and not args.keep_topics:
            delete_run_topics(args.bootstrap, bench.topics, bench.groups)
        if not failed and not args.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"logs kept in {workdir}")
    bench.figures["run"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    bench.figures["run"]["seconds"] = round(time.monotonic() - started, 1)
    bench.figures["failed"] = failed
    print(text_report(bench.figures, failed))
    print(f"load average at end: {bench.figures['run']['loadavg_end']}; "
          f"run took {bench.figures['run']['seconds']:.0f} s")  # fmt: skip
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(bench.figures, option=orjson.OPT_INDENT_2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
