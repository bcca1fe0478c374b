"""An OpenAI-compatible fake chat-completions server answering every call after a fixed delay.

For ``benchmarks/scaleout.py`` part (e): it wraps the test suite's ``FakeOpenAIServer``
(``tests/fake_openai_server.py``), whose fallback behaviour becomes ``slow(latency,
valid())``: every request gets a correct audit answer for its batch after ``--latency``
seconds, however many requests are in flight (one thread per connection).

Run in its own process (so its CPU is not the benchmark's)::

    python benchmarks/fake_openai_fixed_latency.py --latency 2 --stats /tmp/fake-stats.json

It writes ``--stats`` (JSON, replaced atomically) once it listens, then every second and
on SIGTERM/SIGINT: ``base_url``, ``pid``, ``latency_s``, ``requests``, ``events`` (log ids
over all requests' batches), ``max_in_flight``, ``first_request_at``/``last_request_at``
(``time.time()``), and ``batch_sizes`` (events per request -> requests). Exit status 0.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

TESTS = Path(__file__).resolve().parents[1] / "tests"


class StatsWriter:
    """Summarises the server's recorded requests into the stats file."""

    def __init__(self, server: Any, path: Path, latency: float) -> None:
        self.server = server
        self.path = path
        self.latency = latency
        self.seen = 0
        self.events = 0
        self.sizes: Counter[int] = Counter()
        self.first: float | None = None
        self.last: float | None = None
        self.offset = time.time() - time.monotonic()  # request times are monotonic

    def write(self) -> None:
        """Count the requests recorded since the last call and replace the stats file."""
        requests = list(self.server.requests)
        for request in requests[self.seen :]:
            try:
                size = len(request.log_ids())
            except (ValueError, KeyError, TypeError):
                size = 0  # not an audit batch
            self.sizes[size] += 1
            self.events += size
            at = float(request.received_at) + self.offset
            self.first = at if self.first is None else min(self.first, at)
            self.last = at if self.last is None else max(self.last, at)
        self.seen = len(requests)
        stats = {
            "base_url": self.server.base_url,
            "pid": os.getpid(),
            "latency_s": self.latency,
            "requests": self.seen,
            "events": self.events,
            "max_in_flight": int(self.server.max_in_flight),
            "first_request_at": self.first,
            "last_request_at": self.last,
            "batch_sizes": {str(k): v for k, v in sorted(self.sizes.items())},
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(stats))
        tmp.replace(self.path)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT, keeping the stats file current."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per call (2)")
    parser.add_argument("--stats", type=Path, required=True, help="stats JSON file to write")
    args = parser.parse_args(argv)
    if args.latency < 0:
        parser.error("--latency must be >= 0")

    sys.path.insert(0, str(TESTS))
    fake = importlib.import_module("fake_openai_server")
    server = fake.FakeOpenAIServer()
    server.fallback = fake.slow(args.latency, fake.valid())
    server.start()
    stats = StatsWriter(server, args.stats, args.latency)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        """Stop serving (the stats are written once more on the way out)."""
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        stats.write()
        while not stop.wait(1.0):
            stats.write()
    finally:
        server.stop()
        stats.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
