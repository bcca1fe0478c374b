"""Latency of the clarification HTTP route with the ``local`` engines (issue 12 target:
p99 <= 50 ms on one core).

Starts the real app (``refusal_audit.clarification.app.create_app`` over the ``local`` classifier,
the ``local`` question engine, the example bundle, a state store and the configured
redaction, on by default, as in ``clarify serve``) under uvicorn on a free
127.0.0.1 port in this process, pinned to one CPU (``os.sched_setaffinity``, where the OS
has it), and sends ``--requests`` sequential requests over loopback with ``httpx``: each a
``POST /v1/clarify`` of a new conversation, cycling over a small set of refusals (gray zone,
genuine safety, over-refusal, capability), then a ``POST .../answer`` for each conversation
that asked. Prints p50/p90/p99/max latency per route in milliseconds (wall time of the HTTP
exchange as the client sees it). The first ``--warmup`` requests are not counted.

``--trail``: with the audit trail on, as ``clarify serve`` with ``clarify_audit_trail``
runs it: a ``StepTrail`` over an embedded chDB store in a temporary directory, opened (and
owned) by this process, so every answer waits for its ``clarification_steps`` row.
``--concurrency N``: N clients at once (N threads, each with its own connection), to see
concurrent steps share the trail's inserts (group commit); the default is sequential.

Run: ``python benchmarks/clarification_latency.py [--requests 1000] [--store memory|sqlite]
[--trail] [--concurrency 1]``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx
import uvicorn

from processors.clarification.flow import Clarifier
from processors.clarification.local_questions import LocalQuestionEngine
from processors.engines.local import LocalEngine
from refusal_audit.audit.engine_setup import configured_redactor
from refusal_audit.bundles import load_bundles
from refusal_audit.clarification.app import create_app
from refusal_audit.clarification.service import ClarifyService
from refusal_audit.clarification.store import MemoryStore, SqliteStore, StateStore
from refusal_audit.clarification.trail import StepTrail
from refusal_audit.config import load_settings
from warehouse.store import Warehouse

TOKEN = "bench-token-0123456789abcdef"
REFUSALS = [
    ("Write a poem", "Could you tell me more about what kind of poem you'd like?"),
    ("Summarise the document", "Could you share which document you mean?"),
    ("How do I make a bomb?", "I can't help with that."),
    ("How can I kill a Python process?", "Sorry, I can't help with killing."),
    ("What's the weather today in Paris?", "I don't have access to real-time data."),
    ("Give me my neighbour's phone number", "I can't help with finding personal data."),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _report(name: str, values: list[float]) -> None:
    if not values:
        print(f"{name}: no requests")
        return
    print(
        f"{name}: n={len(values)} p50={statistics.median(values):.2f} ms "
        f"p90={_percentile(values, 0.90):.2f} ms p99={_percentile(values, 0.99):.2f} ms "
        f"max={max(values):.2f} ms"
    )


def main() -> None:
    """Run the benchmark (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--store", choices=["memory", "sqlite"], default="sqlite")
    parser.add_argument("--trail", action="store_true", help="audit trail on (embedded chDB)")
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    cfg = load_settings()
    bundles = load_bundles(cfg.policy_bundles)
    tmp = tempfile.TemporaryDirectory()
    store: StateStore = (
        SqliteStore(Path(tmp.name) / "clarify.sqlite3") if args.store == "sqlite" else MemoryStore()
    )
    service = ClarifyService(
        Clarifier(LocalEngine(), LocalQuestionEngine(), bundles), store,
        redactor=configured_redactor(cfg),
    )  # fmt: skip
    warehouse = trail = None
    if args.trail:
        dsn = f"chdb://{Path(tmp.name) / 'chdb'}"
        warehouse = Warehouse.open(cfg.model_copy(update={"warehouse_dsn": dsn}), via_owner=False)
        trail = StepTrail(warehouse, cfg.clarify_review_sample_rate,
                          cfg.clarify_review_accepted_weight)  # fmt: skip
        service.trail = trail
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(service, TOKEN), host="127.0.0.1", port=port, log_level="error")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    opened: list[float] = []
    answered: list[float] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    local = threading.local()

    def client() -> httpx.Client:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers)
        made: httpx.Client = local.client
        return made

    def conversation(i: int) -> None:
        request, refusal = REFUSALS[i % len(REFUSALS)]
        body = {"conversation_id": f"bench-{i}", "log_id": f"bench-{i}",
                "request": request, "refusal": refusal,
                "event_time": "2026-01-01T00:00:00Z"}  # fmt: skip
        started = time.perf_counter()
        r = client().post("/v1/clarify", json=body)
        elapsed = (time.perf_counter() - started) * 1000
        r.raise_for_status()
        if i >= args.warmup:
            opened.append(elapsed)
        questions = r.json()["questions"]
        if not questions:
            return
        answer = {"conversation_id": f"bench-{i}", "round": 1,
                  "answered_at": datetime.now(UTC).isoformat(),  # not before asked
                  "answers": [{"question_index": k, "text": "for my class"}
                              for k in range(len(questions))]}  # fmt: skip
        started = time.perf_counter()
        client().post(f"/v1/clarify/bench-{i}/answer", json=answer).raise_for_status()
        if i >= args.warmup:
            answered.append((time.perf_counter() - started) * 1000)

    try:
        for i in range(args.warmup):
            conversation(i)
        total = range(args.warmup, args.requests + args.warmup)
        if args.concurrency <= 1:
            for i in total:
                conversation(i)
        else:
            with ThreadPoolExecutor(args.concurrency) as pool:
                list(pool.map(conversation, total))
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        if trail is not None:
            trail.close()
        if warehouse is not None:
            warehouse.close()
        store.close()
        tmp.cleanup()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    mode = "sequential" if args.concurrency <= 1 else f"{args.concurrency} concurrent clients"
    trail_note = "off"
    if trail is not None:
        trail_note = f"on, embedded chDB: {trail.written} rows in {trail.inserts} inserts"
    print(f"store {args.store}, local engines, {cpus} CPU(s), {mode} over loopback; "
          f"trail {trail_note}")  # fmt: skip
    _report("POST /v1/clarify", opened)
    _report("POST /v1/clarify/{id}/answer", answered)


if __name__ == "__main__":
    main()
