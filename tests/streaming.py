"""Helpers for tests that run the real worker against the real broker (subprocesses)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "tests" / "worker_harness.py"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Deployment:
    """One isolated deployment: its own topics (prefix), consumer group and warehouse."""

    bootstrap: str
    prefix: str
    data_dir: Path
    web_port: int = field(default_factory=free_port)
    extra: dict[str, str] = field(default_factory=dict)
    log_paths: dict[int, Path] = field(default_factory=dict)  # worker pid -> its log file

    @property
    def input_topic(self) -> str:
        return f"{self.prefix}refusal-events"

    def topic(self, suffix: str) -> str:
        return f"{self.prefix}{suffix}"

    @property
    def group(self) -> str:
        return f"{self.prefix}worker"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REFUSAL_AUDIT_")}
        env.update(
            {
                "REFUSAL_AUDIT_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
                "REFUSAL_AUDIT_KAFKA_TOPIC_PREFIX": self.prefix,
                "REFUSAL_AUDIT_KAFKA_CONSUMER_GROUP": self.group,
                "REFUSAL_AUDIT_DATA_DIR": str(self.data_dir),
                "REFUSAL_AUDIT_WORKER_WEB_PORT": str(self.web_port),
                "REFUSAL_AUDIT_WORKER_TAKE_WITHIN_SECONDS": "0.5",
                "REFUSAL_AUDIT_WAREHOUSE_INSERT_RETRIES": "4",
                "REFUSAL_AUDIT_ALERTS_INTERVAL_SECONDS": "2",
            }
        )
        env.update(self.extra)
        return env

    def cli(
        self, *args: str, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """Run ``refusal-audit ARGS`` in a subprocess (cwd: the repository)."""
        result = subprocess.run(
            [sys.executable, "-m", "refusal_audit.cli", *args],
            cwd=REPO,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"refusal-audit {' '.join(args)} exited {result.returncode}\n"
                f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
            )
        return result

    def sql(self, statement: str) -> list[dict[str, Any]]:
        """Rows of a read-only query on this deployment's warehouse (through a running worker
        too: it serves its embedded store to the CLI)."""
        out = self.cli("sql", statement, "-o", "json").stdout
        return [orjson.loads(line) for line in out.splitlines() if line.strip()]

    def start_worker(self, fault: str | None = None) -> subprocess.Popen[bytes]:
        """Start the worker (through the fault-injecting harness) in a subprocess."""
        env = self.env()
        if fault:
            env["HARNESS_FAULT"] = fault
        path = self.data_dir / f"worker-{time.monotonic_ns()}.log"
        with path.open("wb") as log:
            worker = subprocess.Popen(
                [sys.executable, str(HARNESS)],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.log_paths[worker.pid] = path
        return worker

    def log_records(self, worker: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
        """The JSON log records ``worker`` wrote so far (stdout and stderr; other lines skipped)."""
        return json_records(self.log_paths[worker.pid])

    def wait_for_log(
        self, worker: subprocess.Popen[bytes], message: str, timeout: float = 120
    ) -> dict[str, Any]:
        """Wait until ``worker`` logs a JSON record with this ``message``; return it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for record in self.log_records(worker):
                if record.get("message") == message:
                    return record
            if worker.poll() is not None:
                raise AssertionError(f"worker exited {worker.returncode}:\n{self.worker_logs()}")
            time.sleep(0.2)
        raise AssertionError(f"no log record {message!r} after {timeout}s:\n{self.worker_logs()}")

    def worker_logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-4000:]
            for p in sorted(self.data_dir.glob("worker-*.log"))
        )

    def committed_lag(self, attempts: int = 20, within_s: float | None = None) -> int:
        """Records of the input topic not yet committed by the worker's consumer group.

        Retries while the group coordinator is not ready (NOT_COORDINATOR and the like), at
        most ``attempts`` times and, when ``within_s`` is given, for at most that many seconds
        (each attempt may wait up to 10 s per request). Raises the last KafkaException.
        """
        deadline = None if within_s is None else time.monotonic() + within_s
        for attempt in range(attempts):
            try:
                return self._committed_lag()
            except KafkaException:
                last = attempt == attempts - 1
                if last or (deadline is not None and time.monotonic() >= deadline):
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")

    def _committed_lag(self) -> int:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "enable.auto.commit": False,
            }
        )
        try:
            meta = consumer.list_topics(self.input_topic, timeout=10)
            parts = [
                TopicPartition(self.input_topic, p)
                for p in meta.topics[self.input_topic].partitions
            ]
            committed = consumer.committed(parts, timeout=10)
            lag = 0
            for tp in committed:
                _, high = consumer.get_watermark_offsets(tp, timeout=10)
                lag += high - max(tp.offset, 0)
            return lag
        finally:
            consumer.close()

    def wait_drained(self, worker: subprocess.Popen[bytes], timeout: float = 300) -> None:
        """Wait until the group committed every input record; fail if the worker dies."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                raise AssertionError(f"worker exited {worker.returncode}:\n{self.worker_logs()}")
            if self.committed_lag() == 0:
                return
            time.sleep(1.0)
        raise AssertionError(f"not drained after {timeout}s:\n{self.worker_logs()}")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def detector_passes(self) -> int:
        """Successful detector passes so far (from the worker's /metrics)."""
        for line in self.metrics().splitlines():
            if line.startswith('refusal_audit_detector_runs_total{outcome="ok"}'):
                return int(float(line.split()[-1]))
        return 0

    def wait_detector_passes(
        self, worker: subprocess.Popen[bytes], passes: int = 2, timeout: float = 120
    ) -> None:
        """Wait until ``passes`` more detector passes have completed."""
        target = self.detector_passes() + passes
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                raise AssertionError(f"worker exited {worker.returncode}:\n{self.worker_logs()}")
            if self.detector_passes() >= target:
                return
            time.sleep(0.5)
        raise AssertionError(f"no {passes} detector passes in {timeout}s:\n{self.worker_logs()}")

    def health(self) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.web_port}/health", timeout=10
            ) as r:
                return r.status, orjson.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, orjson.loads(exc.read())


def stop(worker: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM the worker and wait (SIGKILL after ``timeout``)."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def wait_for_web(dep: Deployment, worker: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Wait until the worker's web server answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise AssertionError(f"worker exited {worker.returncode}:\n{dep.worker_logs()}")
        try:
            dep.metrics()
            return
        except OSError:
            time.sleep(0.5)
    raise AssertionError("worker web server did not start")


def read_topic(
    bootstrap: str, topic: str, idle: float = 3.0, limit: float = 60.0
) -> Iterator[Message]:
    """Every message of ``topic`` from the beginning, until ``idle`` seconds pass without one."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"t-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    assigned: list[bool] = []
    consumer.subscribe([topic], on_assign=lambda c, parts: assigned.append(True))
    try:
        last = start = time.monotonic()
        while time.monotonic() - last < idle and time.monotonic() - start < limit:
            msg = consumer.poll(0.5)
            if not assigned:  # the idle clock starts once the group gave us the partitions
                last = time.monotonic()
            if msg is None:
                continue
            error = msg.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise AssertionError(f"consumer error: {error}")
            if error is None:
                last = time.monotonic()
                yield msg
    finally:
        consumer.close()


def json_records(path: Path) -> list[dict[str, Any]]:
    """The JSON log records of a log file (other lines skipped; faust's console may prefix
    terminal escapes, so a record starts at its first ``{``)."""
    out = []
    for line in path.read_bytes().splitlines():
        start = line.find(b"{")
        if start < 0:
            continue
        try:
            record = orjson.loads(line[start:])
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out
