"""The audit engine on a local model: throughput, tokens/s, time to first token, validity.

For audit batch sizes ``--sizes`` (1, 5, 10, 25), ``--batches`` batches each (distinct real
XSTest refusals, GPT-4 then Llama-2 completions, read by path from ../shared/data), the
openai audit engine (built by ``refusal_audit.audit.engine_setup.make_engine`` from the settings, as
``audit``/``eval`` build it) audits each batch against

- the local model: ``--base-url`` (key in ``$REFUSAL_AUDIT_OPENAI_API_KEY``), else
  SmolLM2-135M-Instruct on llama.cpp started here (``tests/llm_fixture.py``'s server: 16,384
  tokens of context, one slot, ``--threads``; ``refusal-audit llm serve`` starts the same
  server), and
- the test suite's fake server (``tests/fake_openai_server.py``: a valid answer at once),

with the same settings: ``openai_context_window`` = the server's context,
``openai_max_output_tokens`` = 512 + 256 per event (at most 4,096), one call in flight,
one SDK retry, and a deadline of ``--deadline`` s per batch (a batch still running then is
cancelled and counted as timed out, its events unresolved).

Per batch size it prints: assessed events/s (events assessed / the batches' wall time), prompt and
generated tokens/s (llama.cpp's own ``timings`` in each response: ``prompt_n / prompt_ms``,
``predicted_n / predicted_ms``; the fake: usage tokens / call time), the time to first token
of each batch's first call (llama.cpp: ``prompt_ms`` + one token, the prompt processing a
streaming client waits for; the fake: the call's latency) for the run's first batch (cold
prompt cache) and the later ones (the static system message cached), the share of first
answers that are schema-valid (``schemas.wire``) and that pass every harness check, with
Wilson 95% intervals, and calls per batch (first call, retry, re-audits, splits). Run::

    .venv/bin/python benchmarks/local_llm.py --threads 1 --batches 1
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
from constrained_decoding import TESTS, Server, add_server_options, local_server, refusals, share
from pydantic import ValidationError

from inference.audit_engine import OpenAIEngine
from processors.engines.base import EngineError
from processors.engines.llm_call import ChatAnswer
from refusal_audit.audit.engine_setup import close_engine, make_engine
from refusal_audit.bundles import load_bundles
from refusal_audit.config import Settings
from schemas.events import RefusalEvent
from schemas.wire import to_audit_result

T0 = datetime(2026, 1, 5, tzinfo=UTC)
MAX_OUTPUT_TOKENS = 4096


def output_cap(size: int) -> int:
    """The output cap of a batch of ``size`` events: 512 + 256 per event, at most 4,096."""
    return min(512 + 256 * size, MAX_OUTPUT_TOKENS)


def refusal_events() -> list[RefusalEvent]:
    """Every XSTest refusal (full or partial): GPT-4's, then Llama-2's (569 events)."""
    return [
        RefusalEvent(
            log_id=f"xstest-{source}-{row['id']}",
            event_time=T0,
            request=row["prompt"],
            response=row["completion"],
            model=source,
        )
        for source in ("gpt4", "llama2orig")
        for row in refusals().xstest_refusals(1000, source=source)
    ]


@dataclass
class CallRecord:
    """One chat-completions call seen on the wire."""

    started: float
    seconds: float = 0.0
    body: dict[str, Any] = field(default_factory=dict)


class Wire:
    """httpx hooks recording every chat-completions call: start, latency, JSON body."""

    def __init__(self) -> None:
        self.calls: list[CallRecord] = []

    async def on_request(self, request: httpx.Request) -> None:
        """Note a call's start."""
        if request.url.path.endswith("/chat/completions"):
            request.extensions["bench_started"] = time.perf_counter()

    async def on_response(self, response: httpx.Response) -> None:
        """Record a finished call (its body is read here; the SDK reads it again)."""
        started = response.request.extensions.get("bench_started")
        if started is None:
            return
        await response.aread()
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            body = {}
        rec = CallRecord(started, time.perf_counter() - started, body)
        self.calls.append(rec)

    def attach(self, client: Any) -> None:
        """Hook into an ``openai.AsyncOpenAI`` client's httpx client."""
        client._client.event_hooks["request"].append(self.on_request)
        client._client.event_hooks["response"].append(self.on_response)


@dataclass
class BatchResult:
    """One audited batch."""

    size: int
    ids: list[str]
    seconds: float
    assessed: int
    unresolved: int
    failed: bool
    timed_out: bool
    calls: list[CallRecord]


def answer_of(body: dict[str, Any]) -> ChatAnswer:
    """The first choice of a chat-completions body."""
    choices = body.get("choices") or [{}]
    message = choices[0].get("message") or {}
    return ChatAnswer(
        message.get("content"), message.get("refusal"), choices[0].get("finish_reason")
    )


def schema_valid(answer: ChatAnswer) -> bool:
    """True when the answer is a JSON object that ``schemas.wire`` accepts."""
    try:
        to_audit_result(orjson.loads(answer.content or ""))
    except (orjson.JSONDecodeError, ValidationError, TypeError, ValueError, AttributeError):
        return False
    return True


async def audit_batches(
    server: Server, sizes: list[int], batches: int, deadline: float
) -> list[BatchResult]:
    """Audit ``batches`` batches of each size (module docstring) and return their results."""
    events = refusal_events()
    bundle = load_bundles(Settings().policy_bundles)["default"]
    results: list[BatchResult] = []
    cursor = 0
    for size in sizes:
        cfg = Settings(
            engine="openai",
            openai_base_url=server.base_url,
            openai_api_key=server.api_key,
            openai_model=server.model,
            openai_context_window=server.context_size,
            openai_max_output_tokens=output_cap(size),
            openai_max_concurrency=1,
            openai_max_retries=1,
            openai_timeout_seconds=deadline,
        )
        engine = make_engine(cfg, "openai")
        assert isinstance(engine, OpenAIEngine)
        wire = Wire()
        wire.attach(engine.client)
        try:
            for _ in range(batches):
                batch = events[cursor : cursor + size]
                cursor += size
                first_call = len(wire.calls)
                started = time.perf_counter()
                assessed = unresolved = 0
                failed = timed_out = False
                try:
                    out = await asyncio.wait_for(engine.audit(batch, bundle), deadline)
                    assessed = len(out.result.individual_assessments)
                    unresolved = len(out.unresolved)
                except TimeoutError:
                    timed_out, unresolved = True, size
                except EngineError:
                    failed, unresolved = True, size
                seconds = time.perf_counter() - started
                ids = [e.log_id for e in batch]
                calls = wire.calls[first_call:]
                results.append(
                    BatchResult(size, ids, seconds, assessed, unresolved, failed, timed_out, calls)
                )
                print(
                    f"  size {size}: {seconds:.1f} s, {assessed} assessed, {unresolved} "
                    f"unresolved, {len(wire.calls) - first_call} calls"
                    + (" (timed out)" if timed_out else ""),
                    flush=True,
                )
        finally:
            await close_engine(engine)
    return results


def ttft(call: CallRecord) -> float:
    """Seconds to the first token of a call: llama.cpp's ``prompt_ms`` plus one token's
    ``predicted_per_token_ms`` when the body has ``timings``, else the call's latency."""
    t = call.body.get("timings")
    if isinstance(t, dict) and "prompt_ms" in t:
        return (float(t["prompt_ms"]) + float(t.get("predicted_per_token_ms") or 0.0)) / 1000
    return call.seconds


def token_rates(calls: list[CallRecord]) -> tuple[float, float]:
    """(prompt tokens/s, generated tokens/s) over ``calls`` (module docstring)."""
    pn = pms = gn = gms = 0.0
    for c in calls:
        t = c.body.get("timings")
        if isinstance(t, dict) and "prompt_ms" in t:
            pn += t.get("prompt_n", 0)
            pms += t.get("prompt_ms", 0.0)
            gn += t.get("predicted_n", 0)
            gms += t.get("predicted_ms", 0.0)
        else:
            usage = c.body.get("usage") or {}
            pn += usage.get("prompt_tokens", 0)
            gn += usage.get("completion_tokens", 0)
            pms += 1000 * c.seconds
            gms += 1000 * c.seconds
    return (pn / pms * 1000 if pms else 0.0), (gn / gms * 1000 if gms else 0.0)


def rows(name: str, results: list[BatchResult], passes: Any) -> list[str]:
    """The table rows of one server (``passes(answer, result)``: the harness verdict)."""
    lines = []
    first_batch = results[0] if results else None
    for size in dict.fromkeys(r.size for r in results):
        group = [r for r in results if r.size == size]
        events = sum(r.size for r in group)
        prompt_rate, gen_rate = token_rates([c for r in group for c in r.calls])
        cold = [ttft(r.calls[0]) for r in group if r is first_batch and r.calls]
        warm = [ttft(r.calls[0]) for r in group if r is not first_batch and r.calls]
        answered = [(answer_of(r.calls[0].body), r) for r in group if r.calls]
        valid = sum(schema_valid(a) for a, _ in answered)
        passed = sum(passes(a, r) for a, r in answered)
        n_calls = [len(r.calls) for r in group]
        cells = [
            name,
            str(size),
            str(len(group)),
            f"{sum(r.assessed for r in group)}/{events}",
            str(sum(r.timed_out for r in group)),
            f"{sum(r.assessed for r in group) / sum(r.seconds for r in group):.3f}",
            f"{prompt_rate:.0f}",
            f"{gen_rate:.1f}",
            ", ".join(f"{x:.2f}" for x in cold) or "-",
            f"{sum(warm) / len(warm):.2f}" if warm else "-",
            share(valid, len(answered)),
            share(passed, len(answered)),
            f"{sum(n_calls) / len(n_calls):.1f} (max {max(n_calls)})",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


HEADER = (
    "| server | batch size | batches | events assessed | batches timed out | assessed events/s "
    "| prompt tokens/s | generated tokens/s | TTFT first batch, s | TTFT later batches "
    "(mean), s | first answers schema-valid | first answers passing the harness "
    "| answered calls per batch |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"
)


def main(argv: list[str] | None = None) -> int:
    """Measure both servers and print the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default="1,5,10,25", help="batch sizes (1,5,10,25)")
    parser.add_argument("--batches", type=int, default=1, help="batches per size (1)")
    parser.add_argument("--deadline", type=float, default=240.0, help="s per batch (240)")
    parser.add_argument("--skip-real", action="store_true", help="the fake server only")
    add_server_options(parser)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    started = time.perf_counter()
    bundle = load_bundles(Settings().policy_bundles)["default"]
    probe = OpenAIEngine(httpx_client_stub(), "bench", context_window=10**6)

    def passes(answer: ChatAnswer, result: BatchResult) -> bool:
        return probe._check(answer, result.ids, bundle, "first").ok

    sys.path.insert(0, str(TESTS))
    fake_module = importlib.import_module("fake_openai_server")
    fake = fake_module.FakeOpenAIServer()
    fake.start()
    try:
        print(f"fake server {fake.base_url}")
        fake_server = Server(f"{fake.base_url}", "fake-model", "sk-bench-fake", 16384)
        fake_results = asyncio.run(audit_batches(fake_server, sizes, args.batches, args.deadline))
    finally:
        fake.stop()
    table = [HEADER, *rows("fake", fake_results, passes)]
    if not args.skip_real:
        with local_server(args) as server:
            print(
                f"local server {server.base_url} model {server.model} context {server.context_size}"
            )
            real = asyncio.run(audit_batches(server, sizes, args.batches, args.deadline))
        table += rows(server.model, real, passes)
    print()
    print("\n".join(table))
    print(f"\n{args.batches} batch(es) per size; {time.perf_counter() - started:.0f} s in all.")
    return 0


def httpx_client_stub() -> Any:
    """An ``openai.AsyncOpenAI`` that is never called (the engine used only to check)."""
    import openai

    return openai.AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")


if __name__ == "__main__":
    sys.exit(main())
