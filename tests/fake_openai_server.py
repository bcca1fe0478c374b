"""A small OpenAI-compatible chat-completions server on 127.0.0.1, for tests.

``FakeOpenAIServer`` serves ``POST /v1/chat/completions`` from a thread (stdlib
``http.server``) on a free loopback port. Each request takes the next behaviour of the
script (``server.script(...)``), or ``server.fallback`` (default: ``valid()``) when the
script is empty. A behaviour is a function ``(request, server) -> Reply``; the factories
below cover the cases the engine must handle:

- ``valid()``: a correct answer computed from the batch in the request (every event
  ``policy_gray_zone``, no false positive, no clause, review required);
- ``mutated(fn)``: the valid answer passed through ``fn(answer, log_ids)`` (add, drop or
  duplicate ids, break a category, ...);
- ``content(text)``, ``invalid_json()``, ``empty()``, ``refusal(text)``, ``length()``
  (``finish_reason: "length"`` with a cut-off answer);
- ``status(code, retry_after=...)``: an HTTP error (429, 500, ...) with an OpenAI error body;
- ``slow(seconds, then)``: wait, then behave like ``then`` (client timeouts);
- ``echo_authorization()``: HTTP 401 whose body repeats the Authorization header;
- ``context_limit(n_ctx, style=..., ratio=...)``: a server whose context holds ``n_ctx``
  tokens and whose tokenizer counts ``ratio`` tokens per o200k token: a request over it gets
  that server's real context-length HTTP 400 (``llama.cpp``, ``openai``, ``vllm``,
  ``vllm-new`` messages), any other the ``then`` behaviour.

``GET /props`` answers ``server.props`` and ``GET /v1/models`` ``server.models`` (JSON, when
set; 404 otherwise), so the server can pass for llama.cpp (``server.as_llama_cpp(n_ctx)``)
or vLLM (``server.as_vllm(model, max_model_len)``); GETs are recorded in ``server.gets``.

Every POST is recorded (``server.requests``: path, headers, JSON body, arrival time);
``server.max_in_flight`` is the largest number of requests handled at once. Usage is
reported with o200k token counts, and a system message seen before counts as cached
(rounded down to 128-token blocks from 1024 tokens, like OpenAI's prompt cache).

The ``fake_openai`` pytest fixture starts a server per test and stops it afterwards; test
modules import it (``from fake_openai_server import fake_openai``). ``settings_for`` makes
the settings of a pipeline on the server, ``run_closing`` runs an engine's coroutine and
closes its client.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import openai
import pytest

from processors.tokens import count_tokens
from prompts.loader import BATCH_OPEN, count_message_tokens, parse_batch
from refusal_audit.audit.settings import PolicyBundlePaths
from refusal_audit.config import Settings

_T = TypeVar("_T")
_POLICIES = Path(__file__).resolve().parents[1] / "refusal_audit" / "example_policies"


def settings_for(
    server: FakeOpenAIServer, api_key: str = "sk-test-not-a-real-key", **overrides: Any
) -> Settings:
    """Settings of a pipeline on ``server``: the example bundle, ``api_key``, no SDK retries,
    batches of at most 20 events, then ``overrides``."""
    bundle = PolicyBundlePaths(
        allowed_use=_POLICIES / "allowed_use_policy.md",
        product_safety=_POLICIES / "product_safety_policy.md",
        taxonomy=_POLICIES / "refusal_taxonomy.md",
    )
    return Settings(  # type: ignore[call-arg]
        policy_bundles={"default": bundle},
        openai_base_url=server.base_url,
        openai_api_key=api_key,
        **{"openai_max_retries": 0, "batch_max_events": 20, **overrides},
    )


def run_closing(coro: Coroutine[Any, Any, _T], engine: Any) -> _T:
    """Run ``coro``, then close ``engine``'s client in the same event loop."""

    async def go() -> _T:
        try:
            return await coro
        finally:
            await engine.client.close()

    return asyncio.run(go())


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_at: float

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages of the request."""
        return list(self.body.get("messages", []))

    def batch(self) -> list[dict[str, Any]]:
        """The events of the batch (from the first user message holding one)."""
        for m in self.messages:
            if m.get("role") == "user" and BATCH_OPEN in str(m.get("content", "")):
                return parse_batch(str(m["content"]))
        raise ValueError("no batch in the request")

    def log_ids(self) -> list[str]:
        """The batch's log ids, in order."""
        return [str(e["log_id"]) for e in self.batch()]


@dataclass
class Reply:
    """What to answer: an HTTP status, headers and JSON body, after ``delay`` seconds."""

    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    raw: bytes | None = None  # sent instead of ``body`` when set (malformed replies)


Behaviour = Callable[[RecordedRequest, "FakeOpenAIServer"], Reply]


def answer_for(log_ids: list[str], category: str = "policy_gray_zone") -> dict[str, Any]:
    """A valid wire answer for ``log_ids``: every event in ``category``, review required."""
    return {
        "audit_summary": {
            "total_refusals": len(log_ids),
            "categorization": [{"category": category, "count": len(log_ids)}] if log_ids else [],
            "estimated_false_positives": 0,
            "policy_gap_flags": [],
            "trends_identified": [],
        },
        "individual_assessments": [
            {
                "log_id": i,
                "category": category,
                "is_estimated_false_positive": False,
                "policy_clause_cited": None,
                "assessment_rationale": "Close to a policy line; the audit cannot decide.",
                "requires_human_review": True,
            }
            for i in log_ids
        ],
    }


def _completion(
    request: RecordedRequest,
    server: FakeOpenAIServer,
    content: str | None,
    finish_reason: str = "stop",
    refusal_text: str | None = None,
) -> Reply:
    messages = request.messages
    prompt_tokens = count_message_tokens(messages)
    system = next((str(m["content"]) for m in messages if m.get("role") == "system"), "")
    cached = server.cached_tokens_for(system)
    return Reply(
        body={
            "id": f"chatcmpl-fake-{len(server.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": refusal_text},
                    "finish_reason": finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": count_tokens(content or refusal_text or ""),
                "total_tokens": prompt_tokens + count_tokens(content or refusal_text or ""),
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
    )


def valid(category: str = "policy_gray_zone") -> Behaviour:
    """A correct answer for the request's batch."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        answer = answer_for(request.log_ids(), category)
        return _completion(request, server, json.dumps(answer))

    return behave


def mutated(fn: Callable[[dict[str, Any], list[str]], dict[str, Any]]) -> Behaviour:
    """The valid answer, changed by ``fn(answer, log_ids)``."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        ids = request.log_ids()
        return _completion(request, server, json.dumps(fn(answer_for(ids), ids)))

    return behave


def raw_reply(data: bytes) -> Behaviour:
    """An HTTP 200 whose body is exactly ``data`` (empty, cut off, not JSON, ...)."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        return Reply(raw=data)

    return behave


def content(text: str, finish_reason: str = "stop") -> Behaviour:
    """An answer with exactly this text."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        return _completion(request, server, text, finish_reason)

    return behave


def invalid_json() -> Behaviour:
    """An answer that is not JSON."""
    return content('{"audit_summary": {"total_refusals": 3,, oops')


def empty() -> Behaviour:
    """An empty answer."""
    return content("")


def refusal(text: str = "I'm sorry, I can't help with that.") -> Behaviour:
    """The model refuses: ``message.refusal`` set, no content."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        return _completion(request, server, None, "stop", text)

    return behave


def length() -> Behaviour:
    """``finish_reason: "length"`` with the valid answer cut off halfway."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        text = json.dumps(answer_for(request.log_ids()))
        return _completion(request, server, text[: len(text) // 2], "length")

    return behave


def status(code: int, retry_after: str | None = None, message: str = "fake error") -> Behaviour:
    """An HTTP error with an OpenAI-style error body (and ``Retry-After`` when given)."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        body = {"error": {"message": message, "type": "fake", "code": str(code)}}
        return Reply(status=code, body=body, headers=headers)

    return behave


def slow(seconds: float, then: Behaviour | None = None) -> Behaviour:
    """Wait ``seconds``, then behave like ``then`` (default ``valid()``)."""
    after = then if then is not None else valid()

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        reply = after(request, server)
        reply.delay += seconds
        return reply

    return behave


def echo_authorization() -> Behaviour:
    """HTTP 401 whose error message repeats the request's Authorization header."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        auth = request.headers.get("authorization", "")
        body = {"error": {"message": f"bad credentials: {auth}", "type": "auth", "code": "401"}}
        return Reply(status=401, body=body)

    return behave


def context_limit(
    n_ctx: int, style: str = "llama.cpp", ratio: float = 1.0, then: Behaviour | None = None
) -> Behaviour:
    """A context of ``n_ctx`` tokens counted by a tokenizer giving ``ratio`` tokens per
    o200k token: llama.cpp refuses a prompt of ``n_ctx`` tokens or more, OpenAI and vLLM a
    prompt plus the requested completion over ``n_ctx``, each with its own 400 body (the
    messages as the servers word them); a request that fits gets ``then`` (``valid()``)."""
    after = then if then is not None else valid()

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        prompt = math.ceil(count_message_tokens(request.messages) * ratio)
        body = request.body
        completion = int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)
        if style == "llama.cpp":
            if prompt < n_ctx:
                return after(request, server)
            error: dict[str, Any] = {
                "code": 400,
                "message": f"request ({prompt} tokens) exceeds the available context size "
                f"({n_ctx} tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": n_ctx,
            }
            return Reply(400, {"error": error})
        if prompt + completion <= n_ctx:
            return after(request, server)
        head = f"This model's maximum context length is {n_ctx} tokens. "
        if style == "openai":
            error = {
                "message": head + f"However, your messages resulted in {prompt} tokens. "
                "Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
            return Reply(400, {"error": error})
        if style == "vllm":  # vLLM up to 0.10: no "error" wrapper
            message = (
                head + f"However, you requested {prompt + completion} tokens ({prompt} in the "
                f"messages, {completion} in the completion). Please reduce the length of the "
                "messages or completion."
            )
            return Reply(
                400,
                {"object": "error", "message": message, "type": "BadRequestError", "code": 400},
            )
        message = (
            head + f"However, you requested {completion} output tokens and your prompt "
            f"contains at least {prompt} input tokens, for a total of at least "
            f"{prompt + completion} tokens. Please reduce the length of the input prompt or "
            "the number of requested output tokens."
        )
        return Reply(400, {"error": {"message": message, "type": "BadRequestError", "code": 400}})

    return behave


class FakeOpenAIServer:
    """The fake server (module docstring). ``start``/``stop``; ``base_url`` ends in ``/v1``."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.gets: list[RecordedRequest] = []
        self.props: dict[str, Any] | None = None
        self.models: dict[str, Any] | None = None
        self.fallback: Behaviour = valid()
        self.max_in_flight = 0
        self._in_flight = 0
        self._script: deque[Behaviour] = deque()
        self._systems_seen: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting -----------------------------------------------------------------------------
    def script(self, *behaviours: Behaviour) -> None:
        """Queue behaviours for the next requests, in order."""
        with self._lock:
            self._script.extend(behaviours)

    def pending(self) -> int:
        """Scripted behaviours not used yet."""
        with self._lock:
            return len(self._script)

    def cached_tokens_for(self, system: str) -> int:
        """Simulated prompt cache: tokens of a system message seen before, in 128-token blocks
        from 1024 (0 for the first sight)."""
        with self._lock:
            seen = system in self._systems_seen
            self._systems_seen.add(system)
        tokens = count_tokens(system)
        return (tokens // 128) * 128 if seen and tokens >= 1024 else 0

    def as_llama_cpp(self, n_ctx: int, slots: int = 1) -> None:
        """Answer ``/props`` and ``/v1/models`` like llama.cpp's server with ``n_ctx`` tokens
        per slot."""
        self.props = {
            "default_generation_settings": {"n_ctx": n_ctx, "params": {"n_predict": -1}},
            "total_slots": slots,
            "model_path": "/models/fake.gguf",
        }
        self.models = {
            "object": "list",
            "data": [
                {
                    "id": "fake.gguf",
                    "object": "model",
                    "owned_by": "llamacpp",
                    "meta": {"n_ctx_train": 8192},
                }
            ],
        }

    def as_vllm(self, model: str, max_model_len: int) -> None:
        """Answer ``/v1/models`` like vLLM serving ``model`` (and another one); no /props."""
        self.props = None
        self.models = {
            "object": "list",
            "data": [
                {"id": "other-model", "object": "model", "owned_by": "vllm", "max_model_len": 4096},
                {
                    "id": model,
                    "object": "model",
                    "owned_by": "vllm",
                    "max_model_len": max_model_len,
                },
            ],
        }

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def client(
        self, *, api_key: str = "sk-test-key", timeout: float = 10.0, max_retries: int = 0
    ) -> openai.AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` client for this server."""
        return openai.AsyncOpenAI(
            api_key=api_key, base_url=self.base_url, timeout=timeout, max_retries=max_retries
        )

    def start(self) -> None:
        """Bind a free port on 127.0.0.1 and serve from a daemon thread."""
        handler = _make_handler(self)
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving (slow replies still sleeping are cut short) and close the socket."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- handling ------------------------------------------------------------------------------
    def _handle(self, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return Reply(400, {"error": {"message": "body is not JSON", "type": "invalid"}})
        request = RecordedRequest(path, headers, body, time.monotonic())
        with self._lock:
            self.requests.append(request)
            behaviour = self._script.popleft() if self._script else self.fallback
        if path != "/v1/chat/completions":
            return Reply(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
        return behaviour(request, self)

    def _handle_get(self, path: str, headers: dict[str, str]) -> Reply:
        with self._lock:
            self.gets.append(RecordedRequest(path, headers, {}, time.monotonic()))
        served = {"/props": self.props, "/v1/models": self.models}.get(path)
        if served is None:
            return Reply(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
        return Reply(body=served)

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            self._reply(server._handle_get(self.path, headers))

        def do_POST(self) -> None:
            server._enter()
            try:
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size)
                headers = {k.lower(): v for k, v in self.headers.items()}
                self._reply(server._handle(self.path, headers, raw))
            finally:
                server._leave()

        def _reply(self, reply: Reply) -> None:
            try:
                if reply.delay and server._stopping.wait(reply.delay):
                    return
                data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """A started ``FakeOpenAIServer``, stopped after the test."""
    server = FakeOpenAIServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
