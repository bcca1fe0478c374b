"""Throughput, memory and latency of the streaming worker, against a bare-consumer reference.

Measured in one run, on the same broker and machine:

(a) reference: a bare confluent-kafka consume + orjson decode loop over the N backlog events
    (best of a few passes): this machine's physical limit for reading the input, events/s;
(b) the worker end to end (``python -m refusal_audit.cli worker`` in a subprocess; local
    engine; embedded chDB warehouse in a fresh temporary data dir; fresh topic prefix and
    consumer group) over the same N events, produced as a backlog before it starts:
    - events/s from the first committed progress of its consumer group to fully drained
      (committed offsets == high watermarks), and the ratio (b)/(a);
    - peak RSS of the worker process tree (sampled every 0.5 s) and its RSS at 25/50/75/100%
      of the drain, to show whether memory stays flat;
    - CPU use of the worker and its own ``/metrics`` (time spent inside windows);
    - p50/p99 latency from event time to stored assessment (``audited_at``), read with
      ``refusal-audit sql`` after the worker is stopped (SIGTERM; the embedded chDB store
      allows one process at a time). A backlog's latency is mostly queueing, so
(c) a live phase: with the worker running and the backlog drained, events stamped with the
    current time are produced at a steady rate (``--live-rate`` events/s for
    ``--live-seconds``); their p50/p99 latency is reported separately (selected by log_id
    prefix).

Events are the synthetic log ``examples/refusal_log.jsonl`` cycled, each with a fresh unique
``log_id`` and ``event_time`` = its produce time (RFC 3339 UTC), keyed by ``log_id``. Only
refusals get an assessment (the pre-filter drops the others), so latency counts refusals.

Target (a figure, not a test): the worker should reach at least half the reference rate.

Run (broker up: ``make kafka-up``)::

    python benchmarks/worker_throughput.py [--events N] [--bootstrap HOST:PORT]
        [--live-rate R] [--live-seconds S] [--json]

Exit status: 0 measured (whatever the target verdict), 1 the worker failed or did not drain,
2 usage error or no broker. The topics and consumer groups it made are deleted at the end
(``--keep-topics`` keeps them), and so is the temporary data dir.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import psutil  # type: ignore[import-untyped]  # no stubs in the dev extras
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streams.producer import DeliveryError, TopicWriter, make_producer
from streams.topics import TopicError, Topics, admin_client, create_topics, topic_specs

REPO = Path(__file__).resolve().parents[1]
SYNTHETIC_LOG = REPO / "examples" / "refusal_log.jsonl"
TARGET_SHARE = 0.5  # the worker should reach at least this share of the reference rate
MILESTONES = (0.25, 0.5, 0.75, 1.0)
RSS_INTERVAL = 0.5
PROBE_INTERVAL = 0.25
MB = 1024 * 1024


class BenchError(RuntimeError):
    """The measurement could not be completed (the message says why)."""


def log(message: str) -> None:
    """Progress on stderr (the report goes to stdout)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rfc3339_now() -> str:
    """The current time, RFC 3339 in UTC with milliseconds (``...T12:00:00.123Z``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ---------------------------------------------------------------------------- events


class EventFactory:
    """Events cycled from the synthetic log, with fresh log_ids and event_time = now."""

    def __init__(self, path: Path) -> None:
        self.templates: list[dict[str, Any]] = [
            orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()
        ]
        if not self.templates:
            raise BenchError(f"no events in {path}")

    def make(self, log_id: str, i: int) -> tuple[bytes, bytes]:
        """(key, value) of event ``i`` with ``log_id``, stamped with the current time."""
        event = dict(self.templates[i % len(self.templates)])
        event["log_id"] = log_id
        event["event_time"] = rfc3339_now()
        return log_id.encode(), orjson.dumps(event)


def produce_backlog(
    writer: TopicWriter, topic: str, factory: EventFactory, prefix: str, n: int
) -> float:
    """Produce ``n`` events and wait for every ack; return the seconds it took."""
    started = time.perf_counter()
    for i in range(n):
        key, value = factory.make(f"{prefix}{i:08d}", i)
        writer.send(topic, value, key=key)
    writer.confirm(timeout=120)
    return time.perf_counter() - started


# ---------------------------------------------------------------------------- reference


def reference_pass(bootstrap: str, topic: str, partitions: list[int], n: int) -> float:
    """One bare consume + orjson decode pass over the ``n`` records; return its seconds.

    Partitions are assigned (no group join); the connection is made before the clock starts.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-reference-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        consumer.list_topics(topic, timeout=10)
        seen = 0
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = started + 120
        while seen < n:
            if time.perf_counter() > deadline:
                raise BenchError(f"reference consumer read only {seen}/{n} records in 120 s")
            for msg in consumer.consume(num_messages=1000, timeout=1.0):
                value = msg.value()
                if msg.error() is not None or value is None:
                    raise BenchError(f"reference consumer error: {msg.error()}")
                orjson.loads(value)
                seen += 1
        return time.perf_counter() - started
    finally:
        consumer.close()


def measure_reference(
    bootstrap: str, topic: str, partitions: list[int], n: int, passes: int
) -> dict[str, Any]:
    """``passes`` reference passes; the best one is the reference rate."""
    seconds = [reference_pass(bootstrap, topic, partitions, n) for _ in range(passes)]
    rates = [n / s for s in seconds]
    return {
        "events": n,
        "passes": passes,
        "seconds": [round(s, 4) for s in seconds],
        "events_per_s": max(rates),
        "median_events_per_s": statistics.median(rates),
    }


# ---------------------------------------------------------------------------- probes


def process_tree(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and its descendants (empty when it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_rss(pid: int) -> int:
    """Resident set size of ``pid`` and its descendants, bytes."""
    total = 0
    for proc in process_tree(pid):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += int(proc.memory_info().rss)
    return total


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants so far."""
    total = 0.0
    for proc in process_tree(pid):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = proc.cpu_times()
            total += float(times.user + times.system)
    return total


class RssSampler(threading.Thread):
    """Samples the RSS of a process tree every ``interval`` seconds until stopped."""

    def __init__(self, pid: int, interval: float = RSS_INTERVAL) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.pid = pid
        self.interval = interval
        self.samples: list[tuple[float, int]] = []
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self._stop_event.is_set():
            rss = tree_rss(self.pid)
            if rss:
                with self._lock:
                    self.samples.append((time.monotonic(), rss))
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=5)

    def peak(self, since: float = 0.0, until: float = float("inf")) -> int:
        """Peak sampled RSS between two monotonic times."""
        with self._lock:
            return max((rss for t, rss in self.samples if since <= t <= until), default=0)


class LagProbe:
    """Committed offsets of the worker's group against the high watermarks of the input topic.

    A plain Consumer with the worker's ``group.id`` that never subscribes (so it does not join
    the group) reads the group's committed offsets; coordinator errors (NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS, ...) are retried.
    """

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: list[int]) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.partitions = partitions
        self._consumer: Any = None

    def _client(self) -> Any:
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": self.group,
                    "enable.auto.commit": False,
                }
            )
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def read(self, attempts: int = 20) -> tuple[int, int]:
        """(sum of committed offsets, sum of high watermarks) over the input partitions."""
        for attempt in range(attempts):
            try:
                return self._read()
            except KafkaException as exc:
                if attempt == attempts - 1:
                    raise BenchError(f"cannot read the group's committed offsets: {exc}") from exc
                if not _retriable(exc):
                    self.close()  # start over with a fresh client
                time.sleep(0.5)
        raise AssertionError("unreachable")

    def _read(self) -> tuple[int, int]:
        consumer = self._client()
        parts = [TopicPartition(self.topic, p) for p in self.partitions]
        committed_total = high_total = 0
        for tp in consumer.committed(parts, timeout=10):
            if tp.error is not None:
                raise KafkaException(tp.error)
            committed_total += max(tp.offset, 0)  # OFFSET_INVALID (-1001): nothing committed
        for p in self.partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)
            high_total += high
        return committed_total, high_total


def _retriable(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args else None
    code = error.code() if isinstance(error, KafkaError) else None
    return code in {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }


@dataclass
class Drain:
    """How the worker's group worked through ``target`` committed records."""

    target: int
    start_committed: int
    started: float  # monotonic time the wait started
    drained_at: float | None = None
    milestones: dict[str, dict[str, float]] = field(default_factory=dict)


def wait_drained(
    worker: subprocess.Popen[bytes],
    probe: LagProbe,
    target: int,
    timeout: float,
    base: int = 0,
    on_milestone: Callable[[float], int] | None = None,
) -> Drain:
    """Poll until the group committed ``target`` records in total and nothing is left.

    ``on_milestone(fraction)`` runs (returning an RSS) when the committed records beyond
    ``base`` first reach each fraction of ``MILESTONES`` of ``target - base``.
    """
    start_committed, _ = probe.read()
    drain = Drain(target, start_committed, time.monotonic())
    todo = target - base
    pending = list(MILESTONES)
    deadline = drain.started + timeout
    while True:
        if worker.poll() is not None:
            raise BenchError(f"the worker exited with status {worker.returncode}")
        committed, high = probe.read()
        now = time.monotonic()
        while pending and todo > 0 and committed - base >= pending[0] * todo:
            fraction = pending.pop(0)
            rss = on_milestone(fraction) if on_milestone else 0
            drain.milestones[f"{round(fraction * 100)}%"] = {
                "seconds": round(now - drain.started, 3),
                "committed": committed,
                "rss_mb": round(rss / MB, 1),
            }
        if committed >= target and committed == high:
            drain.drained_at = now
            return drain
        if now > deadline:
            raise BenchError(
                f"not drained after {timeout:.0f} s: committed {committed} of {target} "
                f"(high watermarks {high})"
            )
        time.sleep(PROBE_INTERVAL)


# ---------------------------------------------------------------------------- worker


def worker_env(
    bootstrap: str, prefix: str, group: str, data_dir: Path, port: int, extra: dict[str, str]
) -> dict[str, str]:
    """The worker's environment: ours, with every other REFUSAL_AUDIT_* variable removed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFUSAL_AUDIT_")}
    env.update(
        {
            "REFUSAL_AUDIT_ENGINE": "local",
            "REFUSAL_AUDIT_DATA_DIR": str(data_dir),
            "REFUSAL_AUDIT_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "REFUSAL_AUDIT_KAFKA_TOPIC_PREFIX": prefix,
            "REFUSAL_AUDIT_KAFKA_CONSUMER_GROUP": group,
            "REFUSAL_AUDIT_WORKER_WEB_PORT": str(port),
        }
    )
    env.update(extra)
    return env


def cli(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    """Run ``refusal-audit ARGS`` (cwd: the repository) and return its stdout."""
    result = subprocess.run(
        [sys.executable, "-m", "refusal_audit.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise BenchError(
            f"refusal-audit {args[0]} exited {result.returncode}: {result.stderr[-2000:]}"
        )
    return result.stdout


def sql_rows(env: dict[str, str], statement: str) -> list[dict[str, Any]]:
    """Rows of a read-only query on the benchmark's warehouse (the worker must be stopped)."""
    out = cli(env, "sql", statement, "-o", "json")
    return [orjson.loads(line) for line in out.splitlines() if line.strip()]


def stop_worker(worker: subprocess.Popen[bytes], timeout: float = 60) -> float:
    """SIGTERM the worker and wait (SIGKILL after ``timeout``); return the seconds it took."""
    started = time.monotonic()
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout)
        except subprocess.TimeoutExpired:
            log(f"worker did not stop {timeout:.0f} s after SIGTERM; killing it")
            worker.kill()
            worker.wait()
    return time.monotonic() - started


def scrape_metrics(port: int) -> dict[str, float]:
    """The worker's unlabelled /metrics samples plus batch counts ({} when unreachable)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("refusal_audit_"):
            continue
        name, _, value = line.rpartition(" ")
        if "{" in name and not name.startswith("refusal_audit_batches_total"):
            continue
        with contextlib.suppress(ValueError):
            samples[name] = float(value)
    return samples


def metrics_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def window_figures(delta: dict[str, float], drain_seconds: float) -> dict[str, Any]:
    """What the worker's own metrics say about a drain: windows, time inside them, engine."""
    windows = delta.get("refusal_audit_window_seconds_count", 0.0)
    in_windows = delta.get("refusal_audit_window_seconds_sum", 0.0)
    batches = delta.get("refusal_audit_engine_latency_seconds_count", 0.0)
    return {
        "events_consumed": int(delta.get("refusal_audit_events_consumed_total", 0)),
        "refusals_audited": int(delta.get("refusal_audit_refusals_audited_total", 0)),
        "windows": int(windows),
        "mean_window_events": (
            delta.get("refusal_audit_events_consumed_total", 0.0) / windows if windows else None
        ),
        "mean_window_seconds": in_windows / windows if windows else None,
        "seconds_in_windows": in_windows,
        "share_of_drain_in_windows": in_windows / drain_seconds if drain_seconds else None,
        "audit_batches": int(batches),
        "engine_seconds": delta.get("refusal_audit_engine_latency_seconds_sum", 0.0),
    }


# ---------------------------------------------------------------------------- live phase


def produce_live(
    writer: TopicWriter, topic: str, factory: EventFactory, prefix: str, rate: float, seconds: float
) -> dict[str, Any]:
    """Produce ``rate`` events/s for ``seconds``, each stamped when it is produced."""
    total = round(rate * seconds)
    started = time.perf_counter()
    late = 0
    for i in range(total):
        due = started + i / rate
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        elif wait < -0.05:
            late += 1
        key, value = factory.make(f"{prefix}{i:08d}", i)
        writer.send(topic, value, key=key)
    elapsed = time.perf_counter() - started
    writer.confirm(timeout=120)
    return {
        "events": total,
        "seconds": elapsed,
        "achieved_rate": total / elapsed if elapsed else 0.0,
        "late_sends": late,
    }


# ---------------------------------------------------------------------------- report


def fmt_rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} events/s"


def fmt_ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} ms"


def text_report(fig: dict[str, Any]) -> str:
    run, ref, wk, live = fig["run"], fig["reference"], fig["worker"], fig.get("live")
    lines = [
        "refusal-audit worker throughput benchmark",
        f"  broker {run['bootstrap']}, topic {run['input_topic']} ({run['partitions']} "
        f"partitions), {run['events']} backlog events from {run['source']}",
        f"  machine: {run['cpus']} CPUs, load average {run['loadavg_before']} before the run",
        f"  worker settings: engine {run['worker_settings'].get('engine')}, take_max "
        f"{run['worker_settings'].get('worker_take_max')}, take_within "
        f"{run['worker_settings'].get('worker_take_within_seconds')} s, batch_max_events "
        f"{run['worker_settings'].get('batch_max_events')}",
        "",
        "(a) reference: bare confluent-kafka consume + orjson decode",
        f"    {fmt_rate(ref['events_per_s'])} (best of {ref['passes']}; median "
        f"{fmt_rate(ref['median_events_per_s'])}; seconds {ref['seconds']})",
        "",
        "(b) worker end to end (backlog)",
        f"    start to first committed progress  {wk['startup_seconds']:.1f} s",
        f"    drain from first progress           {wk['drain_seconds']:.1f} s for "
        f"{wk['drain_events']} events",
        f"    throughput                          {fmt_rate(wk['events_per_s'])}"
        f"  (start to drained: {fmt_rate(wk['events_per_s_incl_startup'])})",
        f"    ratio worker / reference            {wk['ratio_to_reference']:.4f}"
        f"  ({wk['ratio_to_reference'] * 100:.2f}%)",
        f"    CPU while draining                  {wk['cpu_seconds']:.1f} s = "
        f"{wk['cpu_utilisation']:.2f} cores; {wk['cpu_ms_per_event']:.2f} ms CPU per event",
    ]
    wf = wk.get("window_metrics") or {}
    if wf.get("windows"):
        lines.append(
            f"    worker /metrics                     {wf['windows']} windows, mean "
            f"{wf['mean_window_events']:.0f} events in {wf['mean_window_seconds']:.2f} s; "
            f"{wf['share_of_drain_in_windows'] * 100:.0f}% of the drain inside windows; "
            f"engine {wf['engine_seconds']:.1f} s over {wf['audit_batches']} batches"
        )
    lines += [
        f"    RSS at first progress {wk['rss_mb_at_start']:.0f} MB; peak (backlog) "
        f"{wk['peak_rss_mb_backlog']:.0f} MB; peak (whole run) {wk['peak_rss_mb']:.0f} MB",
        "    RSS through the drain: "
        + ", ".join(f"{k} {v['rss_mb']:.0f} MB" for k, v in wk["milestones"].items()),
        f"    latency event -> stored assessment  p50 {fmt_ms(wk['latency_ms']['p50'])}, "
        f"p99 {fmt_ms(wk['latency_ms']['p99'])} over {wk['latency_ms']['n']} assessments "
        "(queueing-dominated: the backlog waited for the worker)",
        f"    stored: {wk['stored']['events']} events, {wk['stored']['assessments']} "
        f"assessments, {wk['stored']['dead_letters']} dead letters",
    ]
    if live:
        lines += [
            "",
            f"(c) live: {live['events']} events at {live['achieved_rate']:.0f} events/s "
            f"(asked {live['rate']:.0f}) for {live['seconds']:.1f} s, worker running",
            f"    latency event -> stored assessment  p50 {fmt_ms(live['latency_ms']['p50'])}, "
            f"p99 {fmt_ms(live['latency_ms']['p99'])} over {live['latency_ms']['n']} "
            "assessments",
            f"    drained {live['drain_after_last_send_seconds']:.1f} s after the last send; "
            f"peak RSS during the live phase {live['peak_rss_mb']:.0f} MB",
        ]
    target = fig["target"]
    lines += [
        "",
        f"target: worker >= {target['share']:.0%} of the reference = "
        f"{fmt_rate(target['needed_events_per_s'])}; measured {fmt_rate(wk['events_per_s'])} "
        f"-> {target['verdict']}",
        f"  ({target['note']})",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--events", type=int, default=20000, help="backlog events (20000)")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument("--live-rate", type=float, default=100.0, help="live events/s (100)")
    parser.add_argument("--live-seconds", type=float, default=30.0, help="live phase s (30)")
    parser.add_argument("--partitions", type=int, default=3, help="input partitions (3)")
    parser.add_argument("--reference-passes", type=int, default=3, help="best of (3)")
    parser.add_argument(
        "--drain-timeout", type=float, default=1800.0, help="max seconds to drain (1800)"
    )
    parser.add_argument(
        "--worker-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra worker setting, e.g. worker_take_max=500 (repeatable)",
    )
    parser.add_argument("--keep-topics", action="store_true", help="keep the topics and groups")
    parser.add_argument(
        "--json", action="store_true", help="print the figures as JSON on stdout (text on stderr)"
    )
    args = parser.parse_args(argv)
    if args.events < 1 or args.partitions < 1 or args.reference_passes < 1:
        parser.error("--events, --partitions and --reference-passes must be >= 1")
    if args.live_rate < 0 or args.live_seconds < 0:
        parser.error("--live-rate and --live-seconds must be >= 0 (0 skips the live phase)")
    return args


def worker_settings_env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise BenchError(f"--worker-setting expects NAME=VALUE, got {pair!r}")
        env["REFUSAL_AUDIT_" + name.strip().upper()] = value
    return env


def broker_reachable(bootstrap: str) -> bool:
    try:
        admin_client(bootstrap, log_level=0).list_topics(timeout=5)
    except KafkaException:
        return False
    return True


def delete_run_topics(bootstrap: str, topics: list[str], groups: list[str]) -> None:
    """Best effort: delete the topics and consumer groups this run made."""
    admin = admin_client(bootstrap)
    for future in admin.delete_topics(topics, operation_timeout=30).values():
        with contextlib.suppress(Exception):
            future.result()
    with contextlib.suppress(Exception):
        for future in admin.delete_consumer_groups(groups, request_timeout=30).values():
            with contextlib.suppress(Exception):
                future.result()


def run(
    args: argparse.Namespace, extra: dict[str, str], workdir: Path, state: dict[str, Any]
) -> dict[str, Any]:
    """The measurement; ``state`` collects what the caller must clean up."""
    run_id = f"{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}"
    prefix = f"bench-{run_id}."
    group = f"bench-{run_id}-worker"
    topics = Topics.from_prefix(prefix)
    backlog_prefix, live_prefix = f"bl-{run_id}-", f"lv-{run_id}-"
    port = free_port()
    data_dir = workdir / "data"
    env = worker_env(args.bootstrap, prefix, group, data_dir, port, extra)
    settings = orjson.loads(cli(env, "config", "show"))
    factory = EventFactory(SYNTHETIC_LOG)

    specs = topic_specs(prefix, args.partitions, 1)
    state["topics"], state["groups"] = [s.name for s in specs], [group]
    create_topics(admin_client(args.bootstrap), specs)
    partitions = list(range(args.partitions))
    log(f"topics created with prefix {prefix!r}; producing {args.events} backlog events")

    writer = TopicWriter(make_producer(args.bootstrap))
    produce_seconds = produce_backlog(writer, topics.input, factory, backlog_prefix, args.events)
    log(f"backlog produced in {produce_seconds:.2f} s; reference passes")
    reference = measure_reference(
        args.bootstrap, topics.input, partitions, args.events, args.reference_passes
    )
    log(f"reference: {reference['events_per_s']:,.0f} events/s; starting the worker")

    loadavg = [round(x, 2) for x in os.getloadavg()]
    worker_log = workdir / "worker.log"
    state["worker_log"] = worker_log
    with worker_log.open("wb") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "refusal_audit.cli", "worker"],
            cwd=REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    state["worker"] = worker
    spawned = time.monotonic()
    sampler = RssSampler(worker.pid)
    sampler.start()
    state["sampler"] = sampler
    probe = LagProbe(args.bootstrap, group, topics.input, partitions)
    state["probe"] = probe

    cpu_marks: dict[str, float] = {}
    metrics_marks: dict[str, dict[str, float]] = {}

    def milestone(fraction: float) -> int:
        if fraction == MILESTONES[-1]:
            cpu_marks["drained"] = tree_cpu_seconds(worker.pid)
            metrics_marks["drained"] = scrape_metrics(port)
        return tree_rss(worker.pid)

    # the clock starts at the first committed progress (start-up is reported apart)
    start_committed, _ = probe.read()
    while True:
        if worker.poll() is not None:
            raise BenchError(f"the worker exited with status {worker.returncode} at start-up")
        first_committed, _ = probe.read()
        if first_committed > start_committed:
            break
        if time.monotonic() - spawned > 300:
            raise BenchError("no committed progress 300 s after the worker started")
        time.sleep(PROBE_INTERVAL)
    first_at = time.monotonic()
    cpu_marks["first"] = tree_cpu_seconds(worker.pid)
    metrics_marks["first"] = scrape_metrics(port)
    rss_at_start = tree_rss(worker.pid)
    log(f"first committed progress ({first_committed} records); waiting for the drain")
    drain = wait_drained(
        worker, probe, args.events, args.drain_timeout, base=0, on_milestone=milestone
    )
    assert drain.drained_at is not None
    drain_seconds = drain.drained_at - first_at
    drain_events = args.events - first_committed
    if drain_events <= 0:
        raise BenchError("the backlog drained at the first reading; use more --events")
    backlog_end = drain.drained_at
    cpu_seconds = cpu_marks["drained"] - cpu_marks["first"]
    log(f"drained {drain_events} events in {drain_seconds:.1f} s after the first progress")

    live: dict[str, Any] | None = None
    if args.live_rate > 0 and args.live_seconds > 0:
        log(f"live phase: {args.live_rate:g} events/s for {args.live_seconds:g} s")
        live_started = time.monotonic()
        live = produce_live(
            writer, topics.input, factory, live_prefix, args.live_rate, args.live_seconds
        )
        last_send = time.monotonic()
        live_drain = wait_drained(worker, probe, args.events + live["events"], args.drain_timeout)
        assert live_drain.drained_at is not None
        live.update(
            rate=args.live_rate,
            drain_after_last_send_seconds=live_drain.drained_at - last_send,
            peak_rss_mb=sampler.peak(live_started) / MB,
        )

    peak_rss = sampler.peak()
    log("stopping the worker (SIGTERM)")
    stop_seconds = stop_worker(worker)
    sampler.stop()
    exit_status = worker.returncode

    log("reading latencies from the warehouse")
    latency = sql_rows(
        env,
        f"SELECT if(startsWith(log_id, '{live_prefix}'), 'live', 'backlog') AS phase, "
        "count() AS n, "
        "quantiles(0.5, 0.99)(dateDiff('millisecond', event_time, audited_at)) AS q "
        "FROM assessments FINAL "
        f"WHERE startsWith(log_id, '{backlog_prefix}') OR startsWith(log_id, '{live_prefix}') "
        "GROUP BY phase",
    )
    counts = sql_rows(
        env,
        "SELECT (SELECT count() FROM refusal_events FINAL) AS events, "
        "(SELECT count() FROM assessments FINAL) AS assessments, "
        "(SELECT count() FROM dead_letters FINAL) AS dead_letters",
    )[0]
    by_phase = {
        row["phase"]: {"n": int(row["n"]), "p50": row["q"][0], "p99": row["q"][1]}
        for row in latency
    }
    empty = {"n": 0, "p50": None, "p99": None}
    if live is not None:
        live["latency_ms"] = by_phase.get("live", empty)

    worker_rate = drain_events / drain_seconds
    ratio = worker_rate / reference["events_per_s"]
    needed = TARGET_SHARE * reference["events_per_s"]
    milestones = dict(drain.milestones)
    return {
        "run": {
            "run_id": run_id,
            "bootstrap": args.bootstrap,
            "input_topic": topics.input,
            "partitions": args.partitions,
            "events": args.events,
            "source": str(SYNTHETIC_LOG.relative_to(REPO)),
            "cpus": os.cpu_count(),
            "loadavg_before": loadavg,
            "backlog_produce_seconds": produce_seconds,
            "worker_settings": {
                k: settings.get(k)
                for k in (
                    "engine",
                    "worker_take_max",
                    "worker_take_within_seconds",
                    "batch_max_events",
                    "batch_token_budget",
                    "redaction_enabled",
                    "prefilter_enabled",
                )
            },
        },
        "reference": reference,
        "worker": {
            "startup_seconds": first_at - spawned,
            "drain_seconds": drain_seconds,
            "drain_events": drain_events,
            "events_per_s": worker_rate,
            "events_per_s_incl_startup": args.events / (backlog_end - spawned),
            "ratio_to_reference": ratio,
            "cpu_seconds": cpu_seconds,
            "cpu_utilisation": cpu_seconds / drain_seconds,
            "cpu_ms_per_event": 1000 * cpu_seconds / drain_events,
            "window_metrics": window_figures(
                metrics_delta(metrics_marks.get("first", {}), metrics_marks.get("drained", {})),
                drain_seconds,
            ),
            "rss_mb_at_start": rss_at_start / MB,
            "peak_rss_mb_backlog": sampler.peak(spawned, backlog_end) / MB,
            "peak_rss_mb": peak_rss / MB,
            "milestones": milestones,
            "latency_ms": by_phase.get("backlog", empty),
            "stored": counts,
            "stop_seconds": stop_seconds,  # SIGTERM to exit
            "exit_status": exit_status,
        },
        "live": live,
        "target": {
            "share": TARGET_SHARE,
            "needed_events_per_s": needed,
            "verdict": "PASS" if worker_rate >= needed else "FAIL",
            "note": (
                "a figure, not a test; the reference only reads and decodes, the worker also "
                "redacts, pre-filters, audits, stores in chDB and publishes its outputs"
            ),
        },
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        extra = worker_settings_env(args.worker_setting)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not broker_reachable(args.bootstrap):
        print(
            f"error: no Kafka broker answers on {args.bootstrap}; start the dev broker with "
            "`make kafka-up` (or pass --bootstrap HOST:PORT)",
            file=sys.stderr,
        )
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="refusal-audit-bench-"))
    state: dict[str, Any] = {}
    status = 0
    try:
        figures = run(args, extra, workdir, state)
    except (BenchError, TopicError, DeliveryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        worker_log = state.get("worker_log")
        if isinstance(worker_log, Path) and worker_log.exists():
            tail = worker_log.read_text(errors="replace")[-4000:]
            print(f"--- worker log (tail) ---\n{tail}", file=sys.stderr)
        status = 1
    finally:
        worker = state.get("worker")
        if isinstance(worker, subprocess.Popen):
            stop_worker(worker)
        sampler = state.get("sampler")
        if isinstance(sampler, RssSampler):
            sampler.stop()
        probe = state.get("probe")
        if isinstance(probe, LagProbe):
            with contextlib.suppress(Exception):
                probe.close()
        if state.get("topics") and not args.keep_topics:
            delete_run_topics(args.bootstrap, state["topics"], state.get("groups", []))
        shutil.rmtree(workdir, ignore_errors=True)
    if status:
        return status
    report = text_report(figures)
    if args.json:
        print(report, file=sys.stderr)
        print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
    else:
        print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
