"""A worker or sink started before its broker answers waits for it (up to
``worker_recovery_seconds``) instead of exiting as a usage error, against the real broker
behind a loopback port that only starts forwarding to it later (a broker still starting, or
compose starting everything at once)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
from scaleout_harness import Fleet, example_events, produce, read_to_end
from streaming import Deployment, free_port

from streams.topics import BrokerUnreachable, TopicError, await_broker

pytestmark = pytest.mark.kafka


class LateForwarder:
    """A loopback port that refuses connections until :meth:`open`, then forwards each one
    to ``upstream`` (host:port) byte for byte, a thread per direction."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.port = free_port()
        self._server: socket.socket | None = None

    def open(self) -> None:
        server = socket.create_server(("127.0.0.1", self.port))
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


def test_a_worker_and_a_sink_started_before_their_broker_wait_for_it(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path
) -> None:
    dep = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path)
    dep.cli("topics", "create")
    late = LateForwarder(kafka_bootstrap)
    dep.extra["REFUSAL_AUDIT_KAFKA_BOOTSTRAP_SERVERS"] = f"127.0.0.1:{late.port}"
    fleet = Fleet(dep, take_max=50)
    try:
        members = [fleet.worker("w1"), fleet.sink()]
        deadline = time.monotonic() + 60
        for member in members:
            while "waiting for the Kafka broker" not in member.log.read_text(errors="replace"):
                assert member.proc.poll() is None, f"{member.name} exited: {fleet.logs()}"
                assert time.monotonic() < deadline, fleet.logs()
                time.sleep(0.5)
        late.open()  # the broker answers now (its metadata names the real port)
        events = example_events(1)[:60]
        produce(kafka_bootstrap, dep.input_topic,
                [(e["log_id"].encode(), orjson.dumps(e), None) for e in events])  # fmt: skip
        fleet.wait_drained()
        assert fleet.stop("w1") == {"w1": 0}, fleet.logs()
        fleet.wait_loaded()  # the sink stored and committed what the worker wrote
        assert fleet.stop("sink") == {"sink": 0}, fleet.logs()
    finally:
        fleet.kill_all()
        late.close()
    messages = read_to_end(kafka_bootstrap, [dep.topic("stored-events")])
    stored = Counter((m.key() or b"").decode() for m in messages)
    assert set(stored) == {e["log_id"] for e in events} and set(stored.values()) == {1}


def test_await_broker_retries_only_an_unreachable_broker_and_only_so_long() -> None:
    calls: list[float] = []

    def flaky() -> str:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise BrokerUnreachable("cannot reach the Kafka broker: timed out")
        return "answered"

    assert await_broker(flaky, within=60) == "answered" and len(calls) == 3
    assert calls[1] - calls[0] >= 0.9 and calls[2] - calls[1] >= 1.9  # 1 s, then 2 s

    missing: list[int] = []

    def no_topic() -> None:
        missing.append(1)
        raise TopicError("topic 'x' does not exist")

    with pytest.raises(TopicError, match="does not exist"):
        await_broker(no_topic, within=60)
    assert missing == [1]  # a missing topic is not waited for

    started, away = time.monotonic(), []

    def never() -> None:
        away.append(1)
        raise BrokerUnreachable("cannot reach the Kafka broker")

    with pytest.raises(BrokerUnreachable):
        await_broker(never, within=2.5)
    assert 2.5 <= time.monotonic() - started < 10 and len(away) == 3  # at 0, 1 and 3 s
