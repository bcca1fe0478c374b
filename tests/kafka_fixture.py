"""Pytest plugin: a real single-node Apache Kafka broker (KRaft) for the tests that need one.

Register it in ``tests/conftest.py`` with ``pytest_plugins = ["kafka_fixture"]`` (or pass
``-p kafka_fixture``). Fixtures:

``kafka_bootstrap`` (session)
    ``"127.0.0.1:PORT"``. When ``REFUSAL_AUDIT_KAFKA_BOOTSTRAP_SERVERS`` (or, failing that,
    ``KAFKA_PORT``, meaning ``127.0.0.1:$KAFKA_PORT``) names a broker that answers, that
    broker is used. Otherwise the session starts its own with ``deploy/kafka/kafka-up.sh``
    on free ports and a temporary state dir, and stops and wipes it
    (``kafka-down.sh --wipe``) at the end. A broker that cannot be started fails the tests
    that need it; they are never skipped.
``kafka_admin`` (session)
    A ``confluent_kafka.admin.AdminClient`` on that broker.
``unique_topic_prefix`` (function)
    A topic-name prefix of its own for each test, so tests never share topics.
``broker_control`` (function)
    :class:`BrokerControl`: ``stop()``, ``start()`` and ``restart()`` of the broker on the
    same ports and state dir (the data is kept). It works on the broker the session started,
    and on an external one that ``kafka-up.sh`` started for a state dir this process can see
    (``KAFKA_STATE_DIR``, default ``deploy/kafka/data``, serving the same port), as in CI.
    On any other external broker its methods raise :class:`BrokerControlError`. A broker
    that a test left stopped is started again after that test.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

REPO_ROOT = Path(__file__).resolve().parents[1]
KAFKA_DIR = REPO_ROOT / "deploy" / "kafka"
KAFKA_UP = KAFKA_DIR / "kafka-up.sh"
KAFKA_DOWN = KAFKA_DIR / "kafka-down.sh"
KAFKA_TOOL = KAFKA_DIR / "kafka-tool.sh"
DEFAULT_STATE_DIR = KAFKA_DIR / "data"

BOOTSTRAP_ENV = "REFUSAL_AUDIT_KAFKA_BOOTSTRAP_SERVERS"
# The first start may resolve the broker jars with Maven before the 60 s readiness wait.
SCRIPT_TIMEOUT_S = 900.0
_LISTENER_PORT = re.compile(r"^listeners=PLAINTEXT://127\.0\.0\.1:(\d+),", re.MULTILINE)
_CONTROLLER_PORT = re.compile(r"CONTROLLER://127\.0\.0\.1:(\d+)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kafka: runs against the real Kafka broker (started by the tests if none is up)"
    )


class BrokerControlError(RuntimeError):
    """The broker cannot be stopped or started from here, or a script failed."""


class BrokerControl:
    """Stop / start / restart one broker through ``deploy/kafka/kafka-{up,down}.sh``.

    ``unmanageable`` is the reason this process cannot control the broker (an external
    broker it knows no state dir of); every method then raises :class:`BrokerControlError`.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        state_dir: Path | None = None,
        owned: bool = False,
        unmanageable: str | None = None,
    ) -> None:
        if unmanageable is None and (port is None or controller_port is None or state_dir is None):
            raise ValueError("a manageable broker needs its port, controller port and state dir")
        self.bootstrap = bootstrap
        self.port = port
        self.controller_port = controller_port
        self.state_dir = state_dir
        self.owned = owned
        self.unmanageable = unmanageable
        self.running = True

    @property
    def manageable(self) -> bool:
        return self.unmanageable is None

    def _env(self) -> dict[str, str]:
        assert self.state_dir is not None
        env = dict(os.environ)
        env.update(
            KAFKA_PORT=str(self.port),
            KAFKA_CONTROLLER_PORT=str(self.controller_port),
            KAFKA_STATE_DIR=str(self.state_dir),
            KAFKA_PYTHON=sys.executable,
        )
        return env

    def _run(self, script: Path, *args: str) -> str:
        if self.unmanageable is not None:
            raise BrokerControlError(
                f"cannot stop or start the Kafka broker at {self.bootstrap}: {self.unmanageable}"
            )
        try:
            done = subprocess.run(
                [str(script), *args],
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=SCRIPT_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BrokerControlError(f"{script.name} timed out after {exc.timeout:.0f}s") from exc
        if done.returncode != 0:
            raise BrokerControlError(
                f"{' '.join([script.name, *args])} exited {done.returncode} "
                f"(state dir {self.state_dir}):\n{done.stdout}"
            )
        return done.stdout

    def start(self) -> None:
        """Start the broker (a no-op when it already runs) and wait until it serves."""
        self._run(KAFKA_UP)
        self.running = True

    def stop(self) -> None:
        """Stop the broker (controlled shutdown); its data stays in the state dir."""
        self._run(KAFKA_DOWN)
        self.running = False

    def alive(self) -> bool:
        """Whether the broker process of the state dir runs (its pid file names a live pid)."""
        if self.state_dir is None:
            return True  # an external broker: nothing to look at
        try:
            pid = int((self.state_dir / "kafka.pid").read_text().strip() or "0")
            os.kill(pid, 0)
        except (OSError, ValueError):
            return False
        return pid > 0

    def log_tail(self, lines: int = 80) -> str:
        """The last ``lines`` of the broker's log (kafka.log in the state dir), for a failure
        message; "" when there is none."""
        if self.state_dir is None:
            return ""
        try:
            text = (self.state_dir / "kafka.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def transactions_report(self, group: str, ids_like: str, offsets_partitions: int = 10) -> str:
        """What the broker says of open transactions, for a failure message: hanging ones
        (``find-hanging``), the producers of ``group``'s ``__consumer_offsets`` partition
        (an open transaction shows its first offset there), and the state and partitions of
        every transactional id containing ``ids_like`` (at most 8), through
        ``deploy/kafka/kafka-tool.sh transactions``. Never raises: a tool that fails leaves
        its error in the text."""
        partition = group_offsets_partition(group, offsets_partitions)
        parts = [f"--- the broker's transactions ({group}: __consumer_offsets-{partition})"]
        listed = self._tool("list")
        ids = [line.split()[0] for line in listed.splitlines()[1:] if ids_like in line][:8]
        parts.append(self._tool("find-hanging", "--broker-id", "1"))
        parts.append(self._tool("describe-producers", "--topic", "__consumer_offsets",
                                "--partition", str(partition)))  # fmt: skip
        parts.extend(self._tool("describe", "--transactional-id", tid) for tid in ids)
        return "\n".join(parts)

    def open_offset_transactions(self, group: str, offsets_partitions: int = 10) -> list[int]:
        """First offsets of the transactions open on ``group``'s ``__consumer_offsets``
        partition (``describe-producers``' CurrentTransactionStartOffset; [] when none, or
        when the tool failed)."""
        partition = group_offsets_partition(group, offsets_partitions)
        out = self._tool("describe-producers", "--topic", "__consumer_offsets",
                         "--partition", str(partition))  # fmt: skip
        starts = []
        for line in out.splitlines()[2:]:  # the command, the header
            cells = [c.strip() for c in line.split("\t")]
            if len(cells) >= 6 and cells[5].isdigit():
                starts.append(int(cells[5]))
        return starts

    def abort_offset_transactions(self, group: str, offsets_partitions: int = 10) -> str:
        """The operator's remedy for a hanging transaction on ``group``'s offsets (KIP-664,
        docs/streaming.md): ``kafka-tool.sh transactions abort`` of every transaction open on
        its ``__consumer_offsets`` partition; returns what the tool said ("" when none was
        open)."""
        partition = group_offsets_partition(group, offsets_partitions)
        where = ["--topic", "__consumer_offsets", "--partition", str(partition)]
        starts = self.open_offset_transactions(group, offsets_partitions)
        return "\n".join(self._tool("abort", *where, "--start-offset", str(n)) for n in starts)

    def _tool(self, *args: str) -> str:
        """``kafka-tool.sh transactions ARGS`` against this broker: the command and what it
        printed (its JVM warnings left out), or why it did not run."""
        try:
            done = subprocess.run(
                [str(KAFKA_TOOL), "transactions", "--bootstrap-server", self.bootstrap, *args],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                check=False,
            )  # fmt: skip
            out = done.stdout + "\n".join(
                line for line in done.stderr.splitlines() if " WARN " not in line
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            out = f"not run: {exc}"
        return f"$ kafka-tool.sh transactions {' '.join(args)}\n{out.strip()}"

    def restart(self) -> None:
        """Stop, then start again on the same ports and state dir."""
        self.stop()
        self.start()

    def wipe(self) -> None:
        """Stop the broker and delete its state dir (only for a broker this session owns)."""
        if not self.owned:
            raise BrokerControlError(
                f"refusing to wipe a broker this session did not start: {self}"
            )
        self._run(KAFKA_DOWN, "--wipe")
        self.running = False

    def __repr__(self) -> str:
        where = f"state dir {self.state_dir}" if self.manageable else "external"
        return f"BrokerControl({self.bootstrap}, {where}, owned={self.owned})"


def group_offsets_partition(group: str, partitions: int = 10) -> int:
    """The ``__consumer_offsets`` partition holding ``group``'s offsets: Kafka's
    ``Utils.abs(group.hashCode()) % offsets.topic.num.partitions`` (Java's ``String.hashCode``
    over UTF-16 code units, a signed 32-bit int; ``Utils.abs`` is ``Math.abs`` with
    ``Integer.MIN_VALUE`` mapped to 0, kafka-clients 4.4.0's bytecode). ``partitions``: the
    broker's ``offsets.topic.num.partitions`` (10 in deploy/kafka/server.properties.template)."""
    h = 0
    units = group.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    signed = h - 2**32 if h >= 2**31 else h
    return (0 if signed == -(2**31) else abs(signed)) % partitions


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _split_host_port(server: str) -> tuple[str, int] | None:
    server = server.strip()
    if "://" in server:
        server = server.split("://", 1)[1]
    host, sep, port = server.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def _broker_answers(bootstrap: str, timeout_s: float = 10.0) -> bool:
    """True when a broker at ``bootstrap`` answers a metadata request naming a broker."""
    first = _split_host_port(bootstrap.split(",")[0])
    if first is None:
        return False
    try:
        with socket.create_connection(first, timeout=2.0):
            pass
    except OSError:
        return False
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        return bool(admin.list_topics(timeout=timeout_s).brokers)
    except Exception:
        return False


def _external_bootstrap() -> str | None:
    configured = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if configured:
        return configured
    port = os.environ.get("KAFKA_PORT", "").strip()
    return f"127.0.0.1:{port}" if port.isdigit() else None


def _control_for_external(bootstrap: str) -> BrokerControl:
    """Control of an external broker if kafka-up.sh started it for a visible state dir."""
    state_dir = Path(os.environ.get("KAFKA_STATE_DIR") or DEFAULT_STATE_DIR).resolve()
    props, pid_file = state_dir / "server.properties", state_dir / "kafka.pid"
    reason = (
        f"it is an external broker ({BOOTSTRAP_ENV} / KAFKA_PORT) and {state_dir} holds no "
        f"running kafka-up.sh broker serving it; set KAFKA_STATE_DIR to the state dir it was "
        f"started with, or unset {BOOTSTRAP_ENV} and KAFKA_PORT so the tests start their own"
    )
    servers = [_split_host_port(s) for s in bootstrap.split(",")]
    if len(servers) != 1 or servers[0] is None:
        return BrokerControl(bootstrap, unmanageable=reason)
    host, port = servers[0]
    try:
        text = props.read_text(encoding="utf-8")
        pid = int(pid_file.read_text(encoding="utf-8").strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return BrokerControl(bootstrap, unmanageable=reason)
    listener = _LISTENER_PORT.search(text)
    controller = _CONTROLLER_PORT.search(text)
    local = host in {"127.0.0.1", "localhost", "::1"}
    if not (local and listener and controller and int(listener.group(1)) == port):
        return BrokerControl(bootstrap, unmanageable=reason)
    return BrokerControl(
        bootstrap, port=port, controller_port=int(controller.group(1)), state_dir=state_dir
    )


@pytest.fixture(scope="session")
def _kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerControl]:
    external = _external_bootstrap()
    if external is not None:
        if _broker_answers(external):
            yield _control_for_external(external)
            return
        warnings.warn(
            f"no Kafka broker answers at {external} ({BOOTSTRAP_ENV} / KAFKA_PORT); "
            "starting a broker for this test session",
            stacklevel=1,
        )
    port, controller_port = _free_ports(2)
    control = BrokerControl(
        f"127.0.0.1:{port}",
        port=port,
        controller_port=controller_port,
        state_dir=tmp_path_factory.mktemp("kafka-state"),
        owned=True,
    )
    failure: str | None = None
    try:
        control.start()
    except BrokerControlError as exc:
        failure = str(exc)
        with contextlib.suppress(BrokerControlError):
            control.wipe()
    if failure is not None:
        pytest.fail(f"could not start the test Kafka broker: {failure}", pytrace=False)
    try:
        yield control
    finally:
        control.wipe()


@pytest.fixture(scope="session")
def kafka_bootstrap(_kafka_broker: BrokerControl) -> str:
    """Bootstrap servers of the test broker, ``"127.0.0.1:PORT"``."""
    return _kafka_broker.bootstrap


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    """An AdminClient on the test broker."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def unique_topic_prefix(request: pytest.FixtureRequest) -> str:
    """A prefix no other test uses, e.g. ``"t-test-roundtrip-1a2b3c4d-"``."""
    name = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:60]
    return f"t-{name}-{uuid.uuid4().hex[:8]}-"


@pytest.fixture
def broker_control(_kafka_broker: BrokerControl) -> Iterator[BrokerControl]:
    """Stop / start / restart the test broker; it is running again after the test."""
    yield _kafka_broker
    if _kafka_broker.manageable and not _kafka_broker.running:
        _kafka_broker.start()
