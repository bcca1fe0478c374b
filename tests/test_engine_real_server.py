"""What a real server needs from the LLM engines (issue 24, item 4), against the fake server:
context size discovery (llama.cpp /props, vLLM /v1/models), the split on a context-length 400
(each server's real message) and learning the server's token count, the call and time
budgets with the step that resolved each event (log, metrics, eval), output caps sized to
the batch, ``cache_prompt`` on llama.cpp only, and ``response_format = "auto"``."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import math
import time
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any, TypeVar

import fake_openai_server
import httpx
import orjson
import pytest
from fake_openai_server import (
    FakeOpenAIServer,
    RecordedRequest,
    Reply,
    context_limit,
    invalid_json,
    length,
    mutated,
    slow,
    status,
    valid,
)
from rich.console import Console

from inference import chat, discovery
from inference.audit_engine import OpenAIEngine
from processors.engines import llm_call
from processors.engines.base import EngineError, EngineOutput
from processors.engines.llm_audit import OUTPUT_TOKENS_FIXED, OUTPUT_TOKENS_PER_EVENT
from processors.engines.llm_call import CallLog
from processors.tokens import count_tokens
from prompts import load_template
from prompts.loader import count_message_tokens
from refusal_audit.audit.batch import BatchOptions, build_pipeline, file_source
from refusal_audit.audit.engine_setup import make_engine
from refusal_audit.config import ConfigError, Settings
from schemas.events import RefusalEvent
from schemas.policy import PolicyBundle

fake_openai = fake_openai_server.fake_openai  # the fixture: a fake server per test

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"
API_KEY = "sk-test-NEVER-LOG-THIS-0123456789"
T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
_T = TypeVar("_T")


def ev(log_id: str, request: str) -> RefusalEvent:
    return RefusalEvent(
        log_id=log_id,
        event_time=T0,
        request=request,
        response="I'm sorry, I can't help with that.",
        model="acme-chat-large",
        product="assistant-web",
    )


BATCH = [
    ev(f"web-{i:03d}", f"Question number {i}: how do I kill a stuck process?") for i in range(6)
]
OTHER = [ev(f"app-{i:03d}", f"Request {i}: where can I buy a replica sword?") for i in range(6)]
IDS = [e.log_id for e in BATCH]
STORY = "Please explain how to stop the runaway process {i} on my build server tonight. "
# ~450 o200k tokens each: half a batch outweighs a batch's output allowance
LONG = [ev(f"long-{i:03d}", STORY.format(i=i) * 30) for i in range(6)]
LONG_OTHER = [ev(f"tall-{i:03d}", STORY.format(i=i + 50) * 30) for i in range(6)]


def settings(server: FakeOpenAIServer, **overrides: Any) -> Settings:
    return fake_openai_server.settings_for(server, API_KEY, openai_model="fake-model", **overrides)


run = fake_openai_server.run_closing  # run a coroutine, then close the engine's client


def built(cfg: Settings) -> OpenAIEngine:
    """The audit engine ``make_engine`` builds from ``cfg`` (an openai one)."""
    engine = make_engine(cfg)
    assert isinstance(engine, OpenAIEngine)
    return engine


def engine_for(server: FakeOpenAIServer, **kw: Any) -> OpenAIEngine:
    return OpenAIEngine(server.client(api_key=API_KEY), "fake-model", **kw)


def audit(
    server: FakeOpenAIServer, events: list[RefusalEvent], bundle: PolicyBundle, **kw: Any
) -> EngineOutput:
    engine = engine_for(server, **kw)
    return run(engine.audit(events, bundle), engine)


def prompt_tokens(bundle: PolicyBundle, events: list[RefusalEvent]) -> int:
    """What the fake server counts for the first call about ``events``."""
    return count_message_tokens(load_template().messages(bundle, events))


def ids_of(output: EngineOutput) -> list[str]:
    return [a.log_id for a in output.result.individual_assessments]


# -- 1. context size discovery ---------------------------------------------------------------
def test_llama_cpp_context_is_discovered_from_props(
    fake_openai: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake_openai.as_llama_cpp(16_384, slots=2)
    engine = built(settings(fake_openai))
    assert (engine.context_window, engine.server) == (16_384, "llama.cpp")
    assert engine.context_source == discovery.SOURCE_PROPS
    assert engine.max_concurrency == 2  # at most the server's slots (4 configured)
    (props,) = fake_openai.gets  # asked once, at the root (without /v1)
    assert props.path == "/props"
    assert props.headers["authorization"] == f"Bearer {API_KEY}"
    assert fake_openai.requests == []  # no chat completion to find out
    assert (
        "llama.cpp, 2 slot(s); context window 16,384 tokens, discovered from llama.cpp /props"
        in caplog.text
    )
    assert API_KEY not in caplog.text
    asyncio.run(engine.client.close())


def test_vllm_context_is_the_configured_models_max_model_len(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.as_vllm("fake-model", 32_768)
    engine = built(settings(fake_openai))
    assert (engine.context_window, engine.server) == (32_768, "vllm")  # not the other model's
    assert engine.max_concurrency == 4  # vLLM batches requests: no slot cap
    assert engine.context_source == discovery.SOURCE_MODELS
    assert [g.path for g in fake_openai.gets] == ["/props", "/v1/models"]
    assert all(g.headers["authorization"] == f"Bearer {API_KEY}" for g in fake_openai.gets)
    asyncio.run(engine.client.close())


def test_configured_window_wins_and_a_silent_server_gets_the_default(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.as_llama_cpp(16_384)
    configured = built(settings(fake_openai, openai_context_window=9_000))
    assert configured.context_window == 9_000
    assert configured.context_source == discovery.SOURCE_CONFIGURED
    assert configured.server == "llama.cpp"  # the kind is still asked (prompt cache)
    fake_openai.props = fake_openai.models = None  # 404s: OpenAI, Ollama, ...
    silent = built(settings(fake_openai))
    assert (silent.context_window, silent.server) == (128_000, "unknown")
    assert silent.context_source == discovery.SOURCE_DEFAULT
    for engine in (configured, silent):
        asyncio.run(engine.client.close())


def test_discovery_ignores_a_huge_or_trickling_answer() -> None:
    """A /props body over the cap, or one trickled past the timeout in small chunks (each
    within the per-read timeout), is ignored: discovery returns within about the timeout."""
    props = json.dumps({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1})

    def trickle() -> Any:
        for ch in props.encode():
            time.sleep(0.05)
            yield bytes([ch])

    def huge() -> Any:
        yield b'{"pad": "' + b"x" * (discovery.MAX_DISCOVERY_BODY_BYTES + 10) + b'"}'

    for body in (trickle, huge):

        def handler(request: Any, body: Any = body) -> Any:
            return httpx.Response(200, content=body())

        started = time.monotonic()
        info = discovery.discover(
            "http://llm.invalid/v1", None, "m", timeout=1.0, transport=httpx.MockTransport(handler)
        )
        assert info.context is None, body.__name__
        assert time.monotonic() - started < 3.0
    bomb = gzip.compress(b'{"pad": "' + b"x" * 60_000_000 + b'"}')  # 58 kB on the wire
    zipped = discovery.discover(
        "http://llm.invalid/v1", None, "m",
        transport=httpx.MockTransport(
            lambda r: httpx.Response(200, content=bomb, headers={"content-encoding": "gzip"})
        ),
    )  # fmt: skip
    assert zipped.context is None
    good = discovery.discover(
        "http://llm.invalid/v1", None, "m",
        transport=httpx.MockTransport(lambda r: httpx.Response(200, content=props.encode())),
    )  # fmt: skip
    assert (good.kind, good.context, good.slots) == ("llama.cpp", 4096, 1)


def test_discovery_of_an_unreachable_server_or_none_asks_nothing() -> None:
    started = time.monotonic()
    assert discovery.discover("http://127.0.0.1:9/v1", "k", "m", timeout=1.0) == (
        discovery.ServerInfo()
    )
    assert time.monotonic() - started < 5
    assert discovery.discover(None, "k", "m") == discovery.ServerInfo()  # api.openai.com
    assert discovery.api_root("http://h:8080/v1/") == "http://h:8080"


def test_a_small_discovered_context_is_a_clear_start_up_error(
    fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    from refusal_audit.audit.evaluation import MemorySink

    fake_openai.as_llama_cpp(8_192)  # SmolLM2's trained context: the prompt alone is ~7,000
    cfg = settings(fake_openai, data_dir=tmp_path)
    engine = built(cfg)
    assert engine.max_output_tokens == 4_096  # capped below the context, not refused
    asyncio.run(engine.client.close())
    with pytest.raises(ConfigError, match="exceeds the model's context window"):
        build_pipeline(cfg, MemorySink())
    assert fake_openai.requests == []


@pytest.mark.parametrize(("n_ctx", "max_output"), [(1, 8192), (2, 8192), (1023, 8192), (600, 512)])
def test_an_absurdly_small_discovered_context_is_a_config_error(
    fake_openai: FakeOpenAIServer, n_ctx: int, max_output: int
) -> None:
    fake_openai.as_llama_cpp(n_ctx)
    with pytest.raises(ConfigError, match=f"context of {n_ctx} tokens"):
        make_engine(settings(fake_openai, openai_max_output_tokens=max_output))
    assert fake_openai.requests == []


# -- 2. context-length 400s ------------------------------------------------------------------
@pytest.mark.parametrize("style", ["llama.cpp", "openai", "vllm", "vllm-new"])
def test_a_context_length_400_splits_the_batch(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle, style: str
) -> None:
    halves = max(prompt_tokens(example_bundle, LONG[:3]), prompt_tokens(example_bundle, LONG[3:]))
    # the halves fit with their output allowance, the batch not (llama.cpp counts the prompt
    # alone, the others the prompt and max_tokens)
    n_ctx = halves + OUTPUT_TOKENS_FIXED + 3 * OUTPUT_TOKENS_PER_EVENT + 10
    assert prompt_tokens(example_bundle, LONG) >= n_ctx
    fake_openai.fallback = context_limit(n_ctx, style)
    engine = engine_for(fake_openai)  # believes the default 128,000
    output = run(engine.audit(LONG, example_bundle), engine)
    assert ids_of(output) == [e.log_id for e in LONG] and output.unresolved == {}
    assert [len(r.log_ids()) for r in fake_openai.requests] == [6, 3, 3]
    assert set(output.steps.values()) == {"split"} and output.calls == 3
    assert engine.server_context == n_ctx  # learned from the message


def test_a_single_event_that_does_not_fit_is_prompt_too_long(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    fake_openai.fallback = context_limit(1_000, "llama.cpp")
    output = audit(fake_openai, BATCH[:2], example_bundle)
    assert output.result.individual_assessments == []
    assert len(fake_openai.requests) == 3  # the pair, then each event once
    counted = prompt_tokens(example_bundle, BATCH[:1])
    reason = output.unresolved["web-000"]
    assert reason.startswith("prompt_too_long:")
    assert f"the server counted {counted} prompt tokens for a context of 1000" in reason


def test_other_400s_still_fail_the_batch(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    fake_openai.fallback = status(400, message="Invalid value for 'temperature'")
    with pytest.raises(EngineError, match="BadRequestError") as info:
        audit(fake_openai, BATCH, example_bundle)
    assert not isinstance(info.value, llm_call.PromptTooLong)
    assert len(fake_openai.requests) == 1


def test_the_servers_token_count_caps_later_batches(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    ratio = 1.3  # the server's tokenizer counts 30% more than o200k
    batches = (LONG, LONG_OTHER)
    full = max(prompt_tokens(example_bundle, b) for b in batches)
    halves = max(
        prompt_tokens(example_bundle, b[s]) for b in batches for s in (slice(3), slice(3, 6))
    )
    n_ctx = math.ceil(halves * ratio) + OUTPUT_TOKENS_FIXED + 3 * OUTPUT_TOKENS_PER_EVENT + 5
    # by our count the full batch would fit even within the server's context...
    assert full + OUTPUT_TOKENS_FIXED + 6 * OUTPUT_TOKENS_PER_EVENT <= n_ctx
    assert math.ceil(min(prompt_tokens(example_bundle, b) for b in batches) * ratio) >= n_ctx
    fake_openai.fallback = context_limit(n_ctx, "llama.cpp", ratio=ratio)
    engine = engine_for(fake_openai)

    async def two() -> tuple[EngineOutput, EngineOutput]:
        first = await engine.audit(LONG, example_bundle)
        return first, await engine.audit(LONG_OTHER, example_bundle)

    first, second = run(two(), engine)
    assert first.unresolved == second.unresolved == {}
    assert [len(r.log_ids()) for r in fake_openai.requests[:3]] == [6, 3, 3]
    assert ratio <= engine.token_ratio < ratio + 0.01 and engine.server_context == n_ctx
    # ...so only the learned ratio splits the second batch before it is sent: no second 400
    other = [e.log_id for e in LONG_OTHER]
    later = fake_openai.requests[3:]
    assert sorted(r.log_ids() for r in later) == [other[:3], other[3:]]
    assert second.calls == 2 and set(second.steps.values()) == {"split"}


def test_parse_context_overflow_reads_each_servers_numbers() -> None:
    import httpx
    import openai

    def error(body: dict[str, Any]) -> openai.BadRequestError:
        request = httpx.Request("POST", "http://x/v1/chat/completions")
        response = httpx.Response(400, request=request, json=body)
        inner = body.get("error", body)
        return openai.BadRequestError(f"Error code: 400 - {body}", response=response, body=inner)

    def parsed(body: dict[str, Any]) -> tuple[int | None, int | None, int | None] | None:
        found = chat.parse_context_overflow(error(body))
        return None if found is None else (found.prompt_tokens, found.context, found.completion)

    assert parsed(
        {"error": {"message": "the request exceeds the available context size, try increasing"
                   " it", "type": "exceed_context_size_error", "code": 400}}
    ) == (None, None, None)  # fmt: skip
    assert parsed(
        {"object": "error", "message": "The decoder prompt (length 5000) is longer than the "
         "maximum model length of 4096.", "type": "BadRequestError", "code": 400}
    ) == (5000, 4096, None)  # fmt: skip
    assert parsed(
        {"error": {"message": "'max_tokens' or 'max_completion_tokens' is too large: 2000. This "
                   "model's maximum context length is 4096 tokens and your request has 2104 "
                   "input tokens (2000 > 4096 - 2104).", "type": "BadRequestError"}}
    ) == (2104, 4096, 2000)  # fmt: skip
    assert parsed({"error": {"message": "Invalid 'temperature'", "code": "invalid_value"}}) is None
    # a crafted message: thousands of digits are no token count (int() would raise ValueError)
    digits = "9" * 5000
    assert parsed(
        {"error": {"message": f"request ({digits} tokens) exceeds the available context size "
                   f"({digits} tokens)", "type": "exceed_context_size_error"}}
    ) == (None, None, None)  # fmt: skip


def test_an_absurd_context_400_cannot_shrink_every_later_batch(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    engine = engine_for(fake_openai)
    messages = engine.prompt.messages(example_bundle, BATCH)
    engine._learn(llm_call.ContextOverflow(99_999_999, 10, None, "odd"), messages)
    assert engine.token_ratio <= 3.0  # at most MAX_TOKEN_RATIO server tokens per o200k token
    assert engine.server_context is None  # a 10-token context is not believed
    assert engine._fits(messages, engine.output_tokens_for(len(BATCH)))


# -- 3. budgets and steps --------------------------------------------------------------------
def test_steps_say_what_resolved_each_event(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="processors.engines.openai_engine")

    def drop(log_id: str) -> Any:
        def fn(answer: dict[str, Any], ids: list[str]) -> dict[str, Any]:
            answer["individual_assessments"] = [
                a for a in answer["individual_assessments"] if a["log_id"] != log_id
            ]
            return answer

        return fn

    fake_openai.script(valid())
    assert set(audit(fake_openai, BATCH, example_bundle).steps.values()) == {"first"}
    fake_openai.script(invalid_json())
    retried = audit(fake_openai, BATCH, example_bundle)
    assert set(retried.steps.values()) == {"retry"} and retried.calls == 2
    fake_openai.script(mutated(drop("web-001")), mutated(drop("web-001")))
    mixed = audit(fake_openai, BATCH, example_bundle)
    assert mixed.steps == {i: "reaudit" if i == "web-001" else "retry" for i in IDS}
    assert mixed.calls == 3 and mixed.unresolved == {}
    assert "6 events, 3 calls," in caplog.text and "reaudit 1, retry 5" in caplog.text


def test_the_default_call_budget_stops_a_model_that_fails_everything(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    def weak(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        # cut off for the pair, invalid for every single event: splits, retries, re-audits
        behaviour = length() if len(request.log_ids()) > 1 else invalid_json()
        return behaviour(request, server)

    fake_openai.fallback = weak
    output = audit(fake_openai, BATCH[:2], example_bundle)
    assert len(fake_openai.requests) == 2 * 2 + 2 == output.calls  # the ladder wanted 7
    codes = sorted(r.partition(":")[0] for r in output.unresolved.values())
    assert codes == ["budget_exhausted", "invalid_output"]
    exhausted = [r for r in output.unresolved.values() if r.startswith("budget_exhausted")]
    assert "call budget (6 calls)" in exhausted[0]


def test_a_set_call_budget_ends_the_rest_unresolved(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    fake_openai.fallback = length()
    output = audit(fake_openai, BATCH[:4], example_bundle, max_calls=3)
    assert len(fake_openai.requests) == 3 == output.calls
    assert sorted(output.unresolved) == IDS[:4]
    assert all(r.startswith("budget_exhausted: ") for r in output.unresolved.values())


def test_the_time_budget_cancels_a_slow_call(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    fake_openai.fallback = slow(3.0)
    started = time.monotonic()
    output = audit(fake_openai, BATCH, example_bundle, deadline_seconds=0.5)
    assert time.monotonic() - started < 2.0
    assert sorted(output.unresolved) == IDS and output.calls == 1
    assert set(output.unresolved.values()) == {
        "budget_exhausted: the batch's time budget (0.5 s) ran out"
    }


def test_budget_settings_reach_the_engine(fake_openai: FakeOpenAIServer) -> None:
    engine = built(
        settings(fake_openai, openai_batch_max_calls=7, openai_batch_deadline_seconds=42)
    )
    assert (engine.calls_allowed(25), engine.deadline_seconds) == (7, 42)
    default = built(settings(fake_openai))
    assert default.calls_allowed(25) == 52 and default.deadline_seconds == 300
    for e in (engine, default):
        asyncio.run(e.client.close())


def test_steps_reach_the_metrics_and_eval(fake_openai: FakeOpenAIServer, tmp_path: Path) -> None:
    from refusal_audit.audit.engine_setup import close_engine
    from refusal_audit.audit.evaluation import MemorySink, run_eval
    from refusal_audit.audit.run_report import print_eval
    from refusal_audit.streaming.worker_web import record_metrics
    from streams.metrics import WorkerMetrics

    def first_and_retried() -> tuple[int, int]:
        """(first calls, events of the retried batch) from the requests."""
        firsts = [r for r in fake_openai.requests if len(r.messages) == 2]
        (retry,) = [r for r in fake_openai.requests if len(r.messages) == 4]
        return len(firsts), len(retry.log_ids())

    fake_openai.as_llama_cpp(64_000)
    fake_openai.script(invalid_json())  # one batch is resolved by its retry
    cfg = settings(fake_openai, data_dir=tmp_path)
    options = BatchOptions.build(None, None, None, None, None)
    figures = run_eval(cfg, [EXAMPLE_LOG], options)
    batches, retried = first_and_retried()
    audited = sum(figures["engine_steps"].values())
    assert audited > 100 and figures["failed_events"] == 0
    assert figures["engine_calls"] == len(fake_openai.requests) == batches + 1
    assert figures["engine_steps"] == {"first": audited - retried, "retry": retried}
    engine = figures["engine"]
    assert (engine["server"], engine["context_window"]) == ("llama.cpp", 64_000)
    assert engine["context_source"] == discovery.SOURCE_PROPS
    assert orjson.loads(orjson.dumps(figures))["engine_steps"] == figures["engine_steps"]
    out = StringIO()
    print_eval(figures, Console(file=out, width=200))
    text = out.getvalue()
    assert (
        f"LLM calls: {batches + 1}; events by the step that resolved them: "
        f"first {audited - retried}, retry {retried}"
    ) in text
    assert "server llama.cpp, context window 64,000 tokens (discovered from llama.cpp /props)" in (
        text
    )

    # the worker's metrics count the same from a run's report
    fake_openai.requests.clear()
    fake_openai.script(invalid_json())
    pipeline = build_pipeline(cfg, MemorySink())
    assert pipeline.max_in_flight == 1  # the server's one slot, not openai_max_concurrency

    async def main() -> Any:
        try:
            return await pipeline.run([file_source(EXAMPLE_LOG, options, cfg)])
        finally:
            await close_engine(pipeline.engine)

    report = asyncio.run(main())
    batches, retried = first_and_retried()
    metrics = WorkerMetrics()
    record_metrics(metrics, report)
    sample = metrics.registry.get_sample_value
    assert sample("refusal_audit_engine_events_total", {"step": "retry"}) == retried
    assert sample("refusal_audit_engine_events_total", {"step": "first"}) == audited - retried
    assert sample("refusal_audit_engine_calls_total") == batches + 1


# -- 4. output caps sized to the batch -------------------------------------------------------
def test_max_tokens_is_sized_to_the_batch(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    def sent(events: list[RefusalEvent], **kw: Any) -> int:
        fake_openai.requests.clear()
        audit(fake_openai, events, example_bundle, **kw)
        return int(fake_openai.requests[0].body["max_completion_tokens"])

    assert sent(BATCH[:1]) == OUTPUT_TOKENS_FIXED + OUTPUT_TOKENS_PER_EVENT
    assert sent(BATCH) == OUTPUT_TOKENS_FIXED + 6 * OUTPUT_TOKENS_PER_EVENT
    assert sent(BATCH, max_output_tokens=1_000) == 1_000  # the setting caps it
    # a runaway answer cut at the allowance is split like any cut-off answer
    fake_openai.requests.clear()
    fake_openai.script(length())
    output = audit(fake_openai, BATCH, example_bundle)
    assert output.unresolved == {}
    assert [r.body["max_completion_tokens"] for r in fake_openai.requests] == [
        OUTPUT_TOKENS_FIXED + 6 * OUTPUT_TOKENS_PER_EVENT,
        OUTPUT_TOKENS_FIXED + 3 * OUTPUT_TOKENS_PER_EVENT,
        OUTPUT_TOKENS_FIXED + 3 * OUTPUT_TOKENS_PER_EVENT,
    ]


def test_the_allowance_covers_the_measured_assessments(tmp_path: Path) -> None:
    """The source of OUTPUT_TOKENS_*: the local engine's assessments of the example log, as
    wire JSON indented by 2 (json_object answers often are), in o200k tokens."""
    from refusal_audit.audit.evaluation import MemorySink

    cfg = Settings(engine="local", data_dir=tmp_path)  # type: ignore[call-arg]
    sink = MemorySink()
    pipeline = build_pipeline(cfg, sink, "local")
    options = BatchOptions.build(None, None, None, None, None)
    asyncio.run(pipeline.run([file_source(EXAMPLE_LOG, options, cfg)]))
    fields = ("log_id", "category", "is_estimated_false_positive", "policy_clause_cited",
              "assessment_rationale", "requires_human_review")  # fmt: skip
    sizes = [
        count_tokens(json.dumps({f: getattr(a, f) for f in fields}, indent=2))
        for a in sink.assessments
    ]
    assert len(sizes) > 200
    assert max(sizes) <= OUTPUT_TOKENS_PER_EVENT < 2 * max(sizes)
    for batch in sink.batches:
        s = batch.summary
        summary = {
            "total_refusals": s.total_refusals,
            "categorization": [{"category": k, "count": v} for k, v in s.categorization.items()],
            "estimated_false_positives": s.estimated_false_positives,
            "policy_gap_flags": [f.model_dump() for f in s.policy_gap_flags],
            "trends_identified": s.trends_identified,
        }
        wire = {"audit_summary": summary, "individual_assessments": []}
        assert count_tokens(json.dumps(wire, indent=2)) <= OUTPUT_TOKENS_FIXED


def test_json_caller_engines_ask_for_enough_output(fake_openai: FakeOpenAIServer) -> None:
    """The question engine, the judge and the variant engine: each call's output cap holds
    the largest answer their schemas allow (every text at its maximum length of English
    prose, as indented JSON), and not many times more."""
    from inference.judge import OpenAIJudge
    from inference.questions import OpenAIQuestionEngine
    from inference.variants import OpenAIVariantEngine
    from schemas.calibration import MAX_STYLES, MAX_TEXT_FIELD_CHARS, MAX_VARIANT_CHARS
    from schemas.clarification import (
        MAX_QUESTIONS,
        NOTE_MAX_CHARS,
        QUESTION_MAX_CHARS,
        RULE_REASONS,
    )

    prose = "The user asks about a process they want to stop, and the context is unclear. "

    def text(chars: int) -> str:
        return (prose * (chars // len(prose) + 1))[:chars]

    def tokens(answer: dict[str, Any]) -> int:
        return count_tokens(json.dumps(answer, indent=2))

    question = {
        "question_text": text(QUESTION_MAX_CHARS),
        "target_ambiguity": text(NOTE_MAX_CHARS),
        "safety_guardrail": text(NOTE_MAX_CHARS),
    }
    questions = tokens({"questions": [question] * MAX_QUESTIONS})
    assert questions <= OpenAIQuestionEngine.default_max_output_tokens < 2 * questions
    verdict = {
        "verdict": "reject",
        "reasons": list(RULE_REASONS),
        "explanation": text(2 * NOTE_MAX_CHARS),
    }
    assert tokens(verdict) <= OpenAIJudge.default_max_output_tokens <= 2 * tokens(verdict)
    engine = OpenAIVariantEngine(fake_openai.client(), "fake-model")
    variant = {
        "style": "clarification_seeking",
        "response_text": text(MAX_VARIANT_CHARS),
        "ux_impact_note": text(MAX_TEXT_FIELD_CHARS),
    }
    for styles in (1, 6, MAX_STYLES):
        largest = tokens(
            {
                "request_summary": text(MAX_TEXT_FIELD_CHARS),
                "policy_applied": text(MAX_TEXT_FIELD_CHARS),
                "variants": [variant] * styles,
            }
        )
        assert largest <= engine.output_tokens_for(styles) < 1.3 * largest + 200, styles
    asyncio.run(engine.client.close())


# -- 5. the prompt cache on llama.cpp --------------------------------------------------------
def test_cache_prompt_is_sent_to_llama_cpp_only(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    fake_openai.as_llama_cpp(128_000)
    llama = built(settings(fake_openai))
    run(llama.audit(BATCH, example_bundle), llama)
    assert fake_openai.requests[-1].body["cache_prompt"] is True
    fake_openai.props = fake_openai.models = None
    other = built(settings(fake_openai))
    run(other.audit(BATCH, example_bundle), other)
    assert "cache_prompt" not in fake_openai.requests[-1].body


def test_json_caller_engines_use_the_servers_kind(fake_openai: FakeOpenAIServer) -> None:
    from inference.judge import OpenAIJudge
    from inference.questions import OpenAIQuestionEngine
    from inference.variants import OpenAIVariantEngine
    from refusal_audit.calibration.runs import build_variant_engine
    from refusal_audit.clarification.server import build_judge, build_question_engine

    fake_openai.as_llama_cpp(8_192)
    cfg = settings(fake_openai, clarify_judge_engine="openai")
    question, judge = build_question_engine(cfg, "openai"), build_judge(cfg)
    variants = build_variant_engine(cfg, "openai")
    assert isinstance(question, OpenAIQuestionEngine) and isinstance(judge, OpenAIJudge)
    assert isinstance(variants, OpenAIVariantEngine)
    engines: list[chat.JsonCaller] = [question, judge, variants]
    assert {e.max_concurrency for e in engines} == {1}  # the server's one slot

    async def each() -> None:
        for engine in engines:
            assert engine.server == "llama.cpp"
            await engine.complete([{"role": "user", "content": "JSON please"}], CallLog())
            await engine.client.close()

    fake_openai.fallback = fake_openai_server.content("{}")
    asyncio.run(each())
    assert [r.body.get("cache_prompt") for r in fake_openai.requests] == [True] * 3
    assert variants.output_tokens_for(6) == 320 + 6 * 640  # sized to the spectrum's styles


def test_the_system_message_is_byte_identical_across_a_bundles_batches(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    fake_openai.script(length(), valid(), invalid_json())  # a split and a retry among them
    engine = engine_for(fake_openai)

    async def three() -> None:
        await engine.audit(BATCH, example_bundle)
        await engine.audit(OTHER[:2], example_bundle)
        await engine.audit(OTHER[2:], example_bundle)

    run(three(), engine)
    systems = [r.messages[0] for r in fake_openai.requests]
    assert len(systems) >= 6 and all(m["role"] == "system" for m in systems)
    assert len({json.dumps(m, ensure_ascii=False).encode() for m in systems}) == 1


# -- 6. response_format auto -----------------------------------------------------------------
def test_auto_response_format(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert Settings().openai_response_format == "auto"  # type: ignore[call-arg]
    fake_openai.as_llama_cpp(128_000)
    llama = built(settings(fake_openai))
    assert llama.response_format == llm_call.LLAMA_CPP_RESPONSE_FORMAT
    fake_openai.as_vllm("fake-model", 32_000)
    vllm = built(settings(fake_openai))
    assert vllm.response_format == "json_schema"
    # the lead flips one constant when the measurement says so
    monkeypatch.setattr(llm_call, "LLAMA_CPP_RESPONSE_FORMAT", "json_object")
    fake_openai.as_llama_cpp(128_000)
    flipped = built(settings(fake_openai))
    assert flipped.response_format == "json_object"
    assert flipped.response_format_param() == {"type": "json_object"}
    fake_openai.as_vllm("fake-model", 32_000)
    assert built(settings(fake_openai)).response_format == "json_schema"
    pinned = built(settings(fake_openai, openai_response_format="json_object"))
    assert pinned.response_format == "json_object"


def test_llama_cpp_gets_the_schema_narrowed_to_the_batch(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    from schemas.wire import WIRE_JSON_SCHEMA

    fake_openai.as_llama_cpp(128_000)
    llama = built(settings(fake_openai))
    output = run(llama.audit(BATCH, example_bundle), llama)
    assert not output.unresolved  # the fake's valid answer still validates
    sent = fake_openai.requests[-1].body["response_format"]["json_schema"]["schema"]
    items = sent["properties"]["individual_assessments"]
    ids = [e.log_id for e in BATCH]
    assert items["minItems"] == items["maxItems"] == len(ids)
    assert items["items"]["properties"]["log_id"]["enum"] == ids
    assert set(items["items"]["properties"]["category"]["enum"]) == set(
        example_bundle.category_codes()
    )
    assert items["items"]["properties"]["assessment_rationale"]["maxLength"] > 0
    fake_openai.props = fake_openai.models = None
    other = built(settings(fake_openai))
    run(other.audit(BATCH, example_bundle), other)
    assert fake_openai.requests[-1].body["response_format"]["json_schema"]["schema"] == (
        WIRE_JSON_SCHEMA
    )


def test_the_batch_schema_accepts_exactly_the_batchs_valid_answers(
    example_bundle: PolicyBundle,
) -> None:
    import jsonschema

    from schemas.wire import batch_wire_schema

    codes = sorted(example_bundle.category_codes())
    clause = example_bundle.clauses[0].clause_id
    schema = batch_wire_schema(["a", "b"], codes, [c.clause_id for c in example_bundle.clauses])

    def answer(log_ids: list[str], category: str = codes[0], rationale: str = "Why.") -> dict:
        data = fake_openai_server.answer_for(log_ids, category)
        for item in data["individual_assessments"]:
            item.update(policy_clause_cited=clause, assessment_rationale=rationale)
        return data

    jsonschema.validate(answer(["a", "b"]), schema)
    for bad in (
        answer(["a"]),  # an event left out
        answer(["a", "b", "a"]),  # one too many
        answer(["a", "zz"]),  # an id not in the batch
        answer(["a", "b"], category="NOT-A-CODE"),
        answer(["a", "b"], rationale="x" * 5000),  # runaway text
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    with pytest.raises(ValueError):
        batch_wire_schema([], codes, [])
