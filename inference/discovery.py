"""Ask an OpenAI-compatible server what it is and how large its context is (issue 24).

The engines' prompts and checks are pure (``processors/``); this module does the I/O when
an engine is built (``refusal_audit.audit.engine_setup``), once per engine (issue 26 moved it
here from ``refusal_audit.llm.discovery``; its logger keeps that name):

1. ``GET <root>/props`` (root = the base URL without its trailing ``/v1``): llama.cpp's
   server answers with ``default_generation_settings.n_ctx``, the context of ONE slot (the
   server's ``--ctx-size`` divided by its ``--parallel`` slots), which is what one request
   may use, and ``total_slots``, how many requests it serves at once (more wait in its
   queue, where the client's timeout keeps running). Kind ``llama.cpp``.
2. Otherwise ``GET <base_url>/models``: vLLM lists each served model with its
   ``max_model_len``; the entry whose ``id`` is the configured model gives the context. Kind
   ``vllm`` (an entry ``owned_by: "vllm"`` or with ``max_model_len``); an entry ``owned_by:
   "llamacpp"`` still tells a llama.cpp server whose ``/props`` did not answer (its context
   is then unknown: the ``meta.n_ctx_train`` it lists is the trained context, not the
   server's).
3. Anything else (OpenAI, Azure, Ollama, a server that refuses or times out): kind
   ``unknown``, no context.

Each request has a short timeout (``DISCOVERY_TIMEOUT_SECONDS``) and sends the API key as
``Authorization: Bearer`` (llama.cpp guards ``/props`` with it); the key is never logged.
Nothing is asked when no base URL is configured (api.openai.com says neither).
:func:`choose_context` then picks the context window: the configured
``openai_context_window``, else the discovered one, else ``DEFAULT_CONTEXT_WINDOW``, and
names the source; :func:`describe` is the line the engine builder logs.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from processors.engines.llm_call import ServerKind

log = logging.getLogger("refusal_audit.llm.discovery")

DISCOVERY_TIMEOUT_SECONDS = 5.0
"""Per request: a server on the same host or network answers these small GETs in
milliseconds; a server that does not within 5 s is treated as one that says nothing."""

DEFAULT_CONTEXT_WINDOW = 128_000
"""The context window when neither the setting nor the server gives one (gpt-4o-mini's,
the default model's)."""

SOURCE_PROPS = "discovered from llama.cpp /props"
SOURCE_MODELS = "discovered from vLLM /v1/models"
SOURCE_CONFIGURED = "configured (openai_context_window)"
SOURCE_DEFAULT = f"default ({DEFAULT_CONTEXT_WINDOW:,} tokens)"


@dataclass(frozen=True)
class ServerInfo:
    """What a server said: its ``kind``, the ``context`` size in tokens one request may use
    (None when it did not say), where that came from (``source``, one of the ``SOURCE_*``
    texts, empty without a context) and how many requests it serves at once (``slots``,
    llama.cpp's ``total_slots``; None when it did not say)."""

    kind: ServerKind = "unknown"
    context: int | None = None
    source: str = ""
    slots: int | None = None


def api_root(base_url: str) -> str:
    """``base_url`` without a trailing ``/`` and ``/v1`` (where llama.cpp serves /props)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _shown(url: str) -> str:
    """``url`` without user info (for logs)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _positive_int(value: object) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None  # type: ignore[return-value]


MAX_DISCOVERY_BODY_BYTES = 1_000_000
"""The largest discovery answer read (llama.cpp's /props is a few kB, a vLLM /v1/models
listing of many models some tens): a larger body is ignored, not buffered."""


def _get_json(client: httpx.Client, url: str) -> Any:
    """The JSON body of ``GET url`` when it answers 200 with JSON of at most
    ``MAX_DISCOVERY_BODY_BYTES`` within the client's timeout, counted over the whole body
    (a server trickling body bytes cannot hold start-up longer), else None. The body is
    asked for and read uncompressed (a compressed answer is not JSON here: None), so a small
    compressed body cannot inflate past the cap. Not bounded: a server trickling its
    response headers (each read within the per-read timeout)."""
    timeout = client.timeout.read or DISCOVERY_TIMEOUT_SECONDS
    deadline = time.monotonic() + timeout
    try:
        with client.stream("GET", url, headers={"Accept-Encoding": "identity"}) as response:
            if response.status_code != 200:
                log.debug(
                    "LLM server discovery: GET %s -> HTTP %d", _shown(url), response.status_code
                )
                return None
            body = bytearray()
            if response.headers.get("content-encoding", "identity").lower() != "identity":
                log.debug("LLM server discovery: GET %s answered compressed", _shown(url))
                return None  # asked for identity; an inflated body could pass the cap
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_DISCOVERY_BODY_BYTES or time.monotonic() > deadline:
                    log.debug("LLM server discovery: GET %s too large or slow", _shown(url))
                    return None
    except httpx.HTTPError as exc:
        log.debug("LLM server discovery: GET %s failed (%s)", _shown(url), type(exc).__name__)
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def _from_props(data: Any) -> ServerInfo | None:
    if not isinstance(data, dict):
        return None
    settings = data.get("default_generation_settings")
    n_ctx = _positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    if n_ctx is None:
        return None
    return ServerInfo("llama.cpp", n_ctx, SOURCE_PROPS, _positive_int(data.get("total_slots")))


def _from_models(data: Any, model: str) -> ServerInfo:
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return ServerInfo()
    listed = [e for e in entries if isinstance(e, dict)]
    owners = {e.get("owned_by") for e in listed}
    if "vllm" in owners or any("max_model_len" in e for e in listed):
        for entry in listed:
            length = _positive_int(entry.get("max_model_len"))
            if entry.get("id") == model and length is not None:
                return ServerInfo("vllm", length, SOURCE_MODELS)
        return ServerInfo("vllm")
    if "llamacpp" in owners:
        return ServerInfo("llama.cpp")
    return ServerInfo()


def discover(
    base_url: str | None,
    api_key: str | None,
    model: str,
    *,
    timeout: float = DISCOVERY_TIMEOUT_SECONDS,
    transport: httpx.BaseTransport | None = None,
) -> ServerInfo:
    """Ask the server at ``base_url`` (module docstring) what it is; never raises for
    anything the server does (an unreachable or silent server is ``ServerInfo()``).
    ``api_key`` is sent as a Bearer token when given; ``model`` picks vLLM's entry;
    ``transport`` is for tests."""
    if not base_url:
        return ServerInfo()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(timeout=timeout, headers=headers, transport=transport) as client:
        found = _from_props(_get_json(client, api_root(base_url) + "/props"))
        if found is not None:
            return found
        return _from_models(_get_json(client, base_url.rstrip("/") + "/models"), model)


def choose_context(configured: int | None, info: ServerInfo) -> tuple[int, str]:
    """The context window to use and its source: ``configured`` when set
    (``SOURCE_CONFIGURED``), else the server's (``info.source``), else
    ``DEFAULT_CONTEXT_WINDOW`` (``SOURCE_DEFAULT``)."""
    if configured is not None:
        return configured, SOURCE_CONFIGURED
    if info.context is not None:
        return info.context, info.source
    return DEFAULT_CONTEXT_WINDOW, SOURCE_DEFAULT


def concurrency(configured: int, info: ServerInfo) -> int:
    """The calls to keep in flight: ``configured`` (``openai_max_concurrency``), at most the
    server's slots when it said (a request beyond them waits in llama.cpp's queue while its
    client timeout runs: with one slot and a minute of prompt processing, the queued calls
    time out before they start)."""
    return min(configured, info.slots) if info.slots else configured


def describe(base_url: str | None, info: ServerInfo, window: int, source: str) -> str:
    """One log line: the server (without user info), its kind, the window and its source,
    and its slots when it said."""
    where = _shown(base_url) if base_url else "api.openai.com"
    server = {"llama.cpp": "llama.cpp", "vllm": "vLLM", "unknown": "unknown kind"}[info.kind]
    slots = f", {info.slots} slot(s)" if info.slots else ""
    return f"LLM server {where}: {server}{slots}; context window {window:,} tokens, {source}"
