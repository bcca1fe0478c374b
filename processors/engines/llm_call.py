"""What every LLM engine shares: one chat completion, its checks, the retry turn, secrets.

Used by the audit engine (``processors.engines.openai_engine``), the clarification question
engine (``processors.clarification.openai_questions``) and the circumvention judge
(``processors.clarification.judge``), all three :class:`JsonCaller` s, so they call the
OpenAI-compatible API, count usage, read a structured answer, build the one retry turn and
keep the API key out of errors and stored raw output the same way.

- :func:`chat_completion`: one ``chat.completions.create`` call under a per-event-loop
  concurrency limit (:class:`LoopLimiter`); usage adds up in a :class:`TokenTally`; any API
  failure raises ``EngineError`` with the key removed from its message.
- :func:`decode_json_object`: an answer -> a JSON object, or the reason code and message
  why not (``model_refusal``: a refusal, an empty answer or a content-filter stop;
  ``output_truncated``: ``finish_reason == "length"``; ``invalid_output``: not JSON, or JSON
  but not an object).
- :func:`retry_conversation`: the conversation of the one retry (the answer appended as
  the assistant's turn, then a user turn listing the problems).
- :func:`mask_secret` / :func:`scrub_secret`: the client's API key replaced by ``***``.
- :class:`JsonCaller`: the settings and the checked call (one retry) of an engine that asks
  for one JSON object per task (the question engine and the judge); :class:`CallLog` keeps
  its calls and usage, :meth:`CallLog.raw` the raw answers as stored.

What a real server needs (issue 24): the caller tells the engine the server's kind
(:data:`ServerKind`, found by ``refusal_audit.llm.discovery``). On llama.cpp every call
sends ``cache_prompt: true`` (reuse the slot's KV cache for the shared prefix; never sent to
other servers: OpenAI rejects unknown fields), and ``response_format="auto"`` resolves per
kind (:func:`resolve_response_format`). A context-length HTTP 400 (llama.cpp, OpenAI,
vLLM; :func:`parse_context_overflow`) raises :class:`PromptTooLong`, an ``EngineError``
carrying the server's numbers, so the audit engine can split the batch.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, TypeVar, cast, overload

import openai
import orjson
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from openai.types.chat.completion_create_params import ResponseFormat

from processors.engines.base import EngineError
from schemas.audit import EngineUsage

OutputTokenParam = Literal["max_completion_tokens", "max_tokens"]
WireFormat = Literal["json_schema", "json_object"]
"""A ``response_format`` type sent to the server."""
ResponseFormatKind = Literal["auto", "json_schema", "json_object"]
"""The ``response_format`` setting: a :data:`WireFormat`, or ``auto`` (per server kind)."""
ServerKind = Literal["llama.cpp", "vllm", "unknown"]
"""What serves the OpenAI-compatible API (``unknown``: OpenAI, Azure, Ollama, ... or a
server that did not say)."""
_T = TypeVar("_T")

LLAMA_CPP_RESPONSE_FORMAT: WireFormat = "json_schema"
"""What ``response_format="auto"`` sends to llama.cpp's server. llama.cpp turns a JSON
Schema into a grammar, so even a small model answers schema-valid JSON; json_schema is also
what every other server gets. Measured by benchmarks/constrained_decoding.py (share of first
answers that validate, json_schema vs json_object, per LLM path, on SmolLM2-135M): flip this
one constant if that measurement says json_object does better on llama.cpp."""


def resolve_response_format(setting: str, server: ServerKind = "unknown") -> WireFormat:
    """The wire ``response_format`` for a setting: ``json_schema``/``json_object`` as given;
    ``auto``: :data:`LLAMA_CPP_RESPONSE_FORMAT` on llama.cpp, ``json_schema`` on every other
    server. Raises ``ValueError`` for another value."""
    if setting == "auto":
        return LLAMA_CPP_RESPONSE_FORMAT if server == "llama.cpp" else "json_schema"
    if setting in ("json_schema", "json_object"):
        return cast(WireFormat, setting)
    raise ValueError(f"response_format {setting!r} not auto|json_schema|json_object")


MAX_REASON_CHARS = 1000
"""Reasons and error details are cut to this many characters."""


@dataclass(frozen=True)
class ChatAnswer:
    """One chat completion's first choice: its text, its refusal and why it stopped."""

    content: str | None
    refusal: str | None
    finish_reason: str | None


@dataclass
class TokenTally:
    """Token usage added up over the calls of one engine run."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0


class LoopLimiter:
    """At most ``limit`` (>= 1) calls in flight per event loop: one ``asyncio.Semaphore`` per
    running loop, kept weakly (an engine may serve several loops, e.g. tests)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("max_concurrency must be >= 1")
        self.limit = limit
        self._semaphores: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, asyncio.Semaphore
        ] = weakref.WeakKeyDictionary()

    def get(self) -> asyncio.Semaphore:
        """The semaphore of the running loop (made on first use)."""
        loop = asyncio.get_running_loop()
        semaphore = self._semaphores.get(loop)
        if semaphore is None:
            semaphore = asyncio.Semaphore(self.limit)
            self._semaphores[loop] = semaphore
        return semaphore


def check_call_settings(
    model: str, response_format: str, output_token_param: str, max_output_tokens: int
) -> None:
    """Raise ``ValueError`` for an empty ``model``, a ``response_format`` other than
    ``auto``/``json_schema``/``json_object``, an unknown ``output_token_param`` or
    ``max_output_tokens`` < 1 (the settings every LLM engine takes)."""
    if not model:
        raise ValueError("model must not be empty")
    if response_format not in ("auto", "json_schema", "json_object"):
        raise ValueError(f"response_format {response_format!r} not auto|json_schema|json_object")
    if output_token_param not in ("max_completion_tokens", "max_tokens"):
        raise ValueError(f"output_token_param {output_token_param!r} is not supported")
    if max_output_tokens < 1:
        raise ValueError("max_output_tokens must be >= 1")


def cut(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """``text`` cut to ``limit`` characters (ending in ``...`` when cut)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def strip_fence(text: str) -> str:
    """Remove one surrounding Markdown code fence (some servers add it in json_object mode)."""
    t = text.strip()
    if t.startswith("```") and t.endswith("```") and len(t) >= 6:
        t = t[3:-3]
        first_newline = t.find("\n")
        if first_newline >= 0 and t[:first_newline].strip().isalpha():
            t = t[first_newline + 1 :]
        elif t.startswith("json"):
            t = t[4:]
    return t.strip()


def count_value(value: object) -> int:
    """A token count from a server's usage block: non-negative ints only, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def describe_error(error: Any) -> str:
    """One pydantic error (an item of ``ValidationError.errors()``) as ``loc: message``."""
    loc = ".".join(str(p) for p in error.get("loc", ())) or "(answer)"
    return f"{loc}: {error.get('msg', 'invalid')}"


def _api_key(client: object) -> str | None:
    key = getattr(client, "api_key", None)
    return key if isinstance(key, str) and len(key) >= 4 else None


@overload
def mask_secret(client: object, text: str) -> str: ...
@overload
def mask_secret(client: object, text: None) -> None: ...
def mask_secret(client: object, text: str | None) -> str | None:
    """``text`` with ``client.api_key`` (when a string of 4+ characters) replaced by ``***``."""
    key = _api_key(client)
    if text is None or key is None:
        return text
    return text.replace(key, "***")


def scrub_secret(client: object, text: str) -> str:
    """``text`` without the client's API key, cut to ``MAX_REASON_CHARS`` (for errors)."""
    return cut(mask_secret(client, text))


def answer_text(answer: ChatAnswer) -> str:
    """What the assistant said, for the retry conversation (its refusal when no content)."""
    if answer.content:
        return answer.content
    if answer.refusal:
        return answer.refusal
    return "(no answer)"


def retry_conversation(
    messages: Sequence[dict[str, str]], answer: ChatAnswer, problems: str
) -> list[dict[str, str]]:
    """``messages``, then the rejected answer as the assistant's turn, then ``problems`` as a
    user turn: the conversation of the one retry."""
    return [
        *messages,
        {"role": "assistant", "content": answer_text(answer)},
        {"role": "user", "content": problems},
    ]


def decode_json_object(
    answer: ChatAnswer, max_output_tokens: int, task: str = "answering"
) -> tuple[dict[str, Any] | None, str, str]:
    """The answer's JSON object, or why there is none: ``(data, "", "")`` or
    ``(None, code, message)`` with code ``model_refusal``, ``output_truncated`` or
    ``invalid_output`` (module docstring). One surrounding code fence is tolerated. ``task``
    names the job in the refusal message ("you refused to answer instead of <task>")."""
    if answer.refusal:
        return (
            None,
            "model_refusal",
            f"you refused to answer instead of {task}: {cut(answer.refusal, 300)}",
        )
    if answer.finish_reason == "content_filter":
        return None, "model_refusal", "the answer was stopped by a content filter"
    if answer.finish_reason == "length":
        return None, "output_truncated", f"the answer was cut off at {max_output_tokens} tokens"
    text = strip_fence(answer.content or "")
    if not text:
        return None, "model_refusal", "the answer was empty"
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return None, "invalid_output", f"not valid JSON: {exc}"
    if not isinstance(data, dict):
        return None, "invalid_output", f"the answer is a JSON {type(data).__name__}, not an object"
    return data, "", ""


@dataclass(frozen=True)
class ContextOverflow:
    """What a server said when a request did not fit its context: the prompt tokens it
    counted (``prompt_tokens``), its context size (``context``) and the completion tokens
    asked for (``completion``), each None when the message does not state it; ``message``
    is the server's message (cut, API key removed)."""

    prompt_tokens: int | None
    context: int | None
    completion: int | None
    message: str

    def describe(self) -> str:
        """The numbers in one phrase, e.g. ``the server counted 8966 prompt tokens for a
        context of 8192``; the message when it states none."""
        if self.prompt_tokens is not None and self.context is not None:
            asked = f" and {self.completion} completion tokens" if self.completion else ""
            return (
                f"the server counted {self.prompt_tokens} prompt tokens{asked} for a context "
                f"of {self.context}"
            )
        return f"the server said: {cut(self.message, 300)}"


class PromptTooLong(EngineError):
    """A context-length HTTP 400: the request does not fit the server's context
    (``overflow`` holds the server's numbers)."""

    def __init__(self, message: str, overflow: ContextOverflow) -> None:
        super().__init__(message)
        self.overflow = overflow


_OVERFLOW_MARKERS = (
    "context_length_exceeded",  # OpenAI's error code
    "exceed_context_size_error",  # llama.cpp's error type
    "exceeds the available context size",  # llama.cpp
    "maximum context length",  # OpenAI, vLLM
    "maximum model length",  # vLLM's engine check ("the decoder prompt ... is longer than")
)
# the servers' messages (issue 24): llama.cpp "request (8966 tokens) exceeds the available
# context size (8192 tokens), try increasing it" (+ n_prompt_tokens, n_ctx in the error);
# OpenAI "This model's maximum context length is 128000 tokens. However, your messages
# resulted in 130000 tokens. ..."; vLLM "This model's maximum context length is 4096 tokens.
# However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). ...",
# newer: "... However, you requested 1000 output tokens and your prompt contains at least
# 4000 input tokens, for a total of ...", "... and your request has 4000 input tokens
# (1000 > 4096 - 4000)" or "The decoder prompt (length 5000) is longer than the maximum
# model length of 4096."
_PROMPT_PATTERNS = (
    r"request \((\d+) tokens\) exceeds",
    r"messages resulted in (\d+) tokens",
    r"\((\d+) in the messages",
    r"prompt contains (?:at least )?(\d+) input tokens",
    r"request has (\d+) input tokens",
    r"decoder prompt \(length (\d+)\)",
)
_CONTEXT_PATTERNS = (
    r"available context size \((\d+) tokens\)",
    r"maximum context length is (\d+)",
    r"maximum model length of (\d+)",
)
_COMPLETION_PATTERNS = (
    r"(\d+) in the completion",
    r"requested (\d+) output tokens",
    r"is too large: (\d+)",
)


MAX_STATED_TOKENS = 100_000_000
"""A token count a server states above this is not believed (no model has such a context);
it also keeps a crafted message of thousands of digits from reaching ``int()``."""


def _first_int(patterns: Sequence[str], text: str) -> int | None:
    """The first number one of ``patterns`` captures in ``text`` (at most 9 digits are read:
    a longer run is no token count), or None."""
    for pattern in patterns:
        match = re.search(pattern.replace(r"(\d+)", r"(\d{1,9})(?!\d)"), text)
        if match:
            value = int(match.group(1))
            return value if 0 < value <= MAX_STATED_TOKENS else None
    return None


def parse_context_overflow(exc: openai.APIStatusError) -> ContextOverflow | None:
    """The :class:`ContextOverflow` of an HTTP 400 that says the request does not fit the
    model's context (llama.cpp, OpenAI, vLLM messages; see the patterns above), else None
    (any other error)."""
    if exc.status_code != 400:
        return None
    body: dict[str, Any] = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    inner: dict[str, Any] = error if isinstance(error, dict) else body
    text = " ".join(
        str(v) for v in (exc.message, inner.get("message"), inner.get("code"), inner.get("type"))
    )
    if not any(marker in text for marker in _OVERFLOW_MARKERS):
        return None
    prompt = count_value(inner.get("n_prompt_tokens")) or _first_int(_PROMPT_PATTERNS, text)
    context = count_value(inner.get("n_ctx")) or _first_int(_CONTEXT_PATTERNS, text)
    message = str(inner.get("message") or exc.message)
    return ContextOverflow(prompt, context, _first_int(_COMPLETION_PATTERNS, text), message)


async def chat_completion(
    client: openai.AsyncOpenAI,
    model: str,
    messages: Sequence[dict[str, str]],
    response_format: ResponseFormat,
    *,
    output_token_param: OutputTokenParam,
    max_output_tokens: int,
    temperature: float | None,
    limiter: LoopLimiter,
    tally: TokenTally,
    server: ServerKind = "unknown",
) -> ChatAnswer:
    """One chat completion; its usage is added to ``tally`` (a server's malformed usage is
    ignored). On llama.cpp (``server``) it asks for the prompt cache (``cache_prompt``).
    Raises :class:`PromptTooLong` for a context-length HTTP 400, ``EngineError`` (API key
    removed from the message) when the call fails otherwise after the SDK's own retries, or
    the server returns no choice."""
    params: dict[str, Any] = {output_token_param: max_output_tokens}
    if temperature is not None:
        params["temperature"] = temperature
    if server == "llama.cpp":  # never to OpenAI, which rejects unknown fields
        params["extra_body"] = {"cache_prompt": True}
    async with limiter.get():
        try:
            completion = await client.chat.completions.create(
                model=model,
                messages=cast(list[ChatCompletionMessageParam], list(messages)),
                response_format=response_format,
                **params,
            )
        except openai.BadRequestError as exc:
            overflow = parse_context_overflow(exc)
            text = scrub_secret(client, f"chat completion failed: {type(exc).__name__}: {exc}")
            if overflow is None:
                raise EngineError(text) from None
            overflow = ContextOverflow(
                overflow.prompt_tokens,
                overflow.context,
                overflow.completion,
                scrub_secret(client, overflow.message),
            )
            raise PromptTooLong(text, overflow) from None
        except (openai.OpenAIError, ValueError, TypeError, AttributeError) as exc:
            # ValueError covers a 200 whose body is empty or cut off (JSON decode error)
            raise EngineError(
                scrub_secret(client, f"chat completion failed: {type(exc).__name__}: {exc}")
            ) from None
    if not isinstance(completion, ChatCompletion) or not completion.choices:
        raise EngineError("chat completion without choices from the server")
    usage = completion.usage
    if usage is not None:
        tally.prompt_tokens += count_value(usage.prompt_tokens)
        tally.completion_tokens += count_value(usage.completion_tokens)
        details = usage.prompt_tokens_details
        tally.cached_tokens += count_value(getattr(details, "cached_tokens", None))
    choice = completion.choices[0]
    message = choice.message
    return ChatAnswer(
        content=message.content,
        refusal=getattr(message, "refusal", None),
        finish_reason=choice.finish_reason,
    )


@dataclass
class CallLog(TokenTally):
    """The calls of one engine run: ``(kind, answer)`` in order, their token usage, and the
    run's time budget: no call starts after ``deadline`` (a ``time.monotonic()``; ``inf``:
    none) and a call in flight then is cancelled (``JsonCaller.call``).
    ``started_calls`` counts every call started, answered or not."""

    calls: list[tuple[str, ChatAnswer]] = field(default_factory=list)
    deadline: float = math.inf
    deadline_seconds: float | None = None
    started_calls: int = 0

    def usage(self, started: float) -> EngineUsage:
        """The tokens used, and the time since ``started`` (a ``time.perf_counter()``)."""
        return EngineUsage(
            prompt_tokens=self.prompt_tokens,
            cached_tokens=self.cached_tokens,
            completion_tokens=self.completion_tokens,
            latency_ms=(time.perf_counter() - started) * 1000.0,
        )

    def raw(self) -> str | None:
        """The raw answers as a JSON array of ``{"kind", "finish_reason", "content",
        "refusal"}`` objects (None when nothing was called); mask the key before storing."""
        if not self.calls:
            return None
        return orjson.dumps(
            [
                {
                    "kind": kind,
                    "finish_reason": a.finish_reason,
                    "content": a.content,
                    "refusal": a.refusal,
                }
                for kind, a in self.calls
            ]
        ).decode()


MAX_LISTED_PROBLEMS = 20


def problems_message(problems: Sequence[str], constraint: str) -> str:
    """The retry turn's text: the harness's ``problems`` (at most ``MAX_LISTED_PROBLEMS``
    listed, each cut to 300 characters), then the stronger ``constraint``."""
    listed = [f"- {cut(p, 300)}" for p in problems[:MAX_LISTED_PROBLEMS]]
    if len(problems) > MAX_LISTED_PROBLEMS:
        listed.append(f"- ... and {len(problems) - MAX_LISTED_PROBLEMS} more problems")
    return (
        "Your answer was rejected by the harness. Problems found:\n"
        + "\n".join(listed)
        + "\n\n"
        + constraint
    )


Checker = Callable[[ChatAnswer], tuple[_T | None, str | None, list[str]]]
"""Reads one answer: ``(value, None, [])`` when it is usable, else ``(None, failure code,
problems)``."""


class CallSettings(TypedDict, total=False):
    """The keyword settings of a :class:`JsonCaller` (for ``**kwargs: Unpack[...]``)."""

    response_format: ResponseFormatKind
    max_concurrency: int
    max_output_tokens: int
    temperature: float | None
    output_token_param: OutputTokenParam
    server: ServerKind
    deadline_seconds: float | None


class BudgetExhausted(EngineError):
    """A task's time budget ran out: before a call could start, or during one (which was
    cancelled). The message says which budget and how large it was."""


class JsonCaller:
    """An engine that asks an OpenAI-compatible model for one JSON object per task.

    ``client`` is built by the caller (base_url, api_key, timeout, max_retries); ``model``
    the model id; ``schema_name``/``schema`` the strict ``json_schema`` output format (or
    ``response_format="json_object"``; ``auto`` resolves with ``server``, the server's kind:
    :func:`resolve_response_format`; the attribute ``response_format`` holds what is sent).
    ``max_output_tokens``, ``output_token_param``, ``temperature`` and ``max_concurrency``
    (calls in flight per event loop) as for the audit engine; on llama.cpp every call asks
    for the prompt cache. ``deadline_seconds`` (None: no limit) bounds the wall time of all
    the calls of one task (a log from :meth:`new_log`: the first call and its retry), so a
    slow server cannot hold a clarification or calibration request longer than that.
    Raises ``ValueError`` for out-of-range settings.
    """

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        schema_name: str,
        schema: dict[str, Any],
        *,
        response_format: ResponseFormatKind = "json_schema",
        max_concurrency: int = 4,
        max_output_tokens: int = 1024,
        temperature: float | None = None,
        output_token_param: OutputTokenParam = "max_completion_tokens",
        server: ServerKind = "unknown",
        deadline_seconds: float | None = None,
    ) -> None:
        check_call_settings(model, response_format, output_token_param, max_output_tokens)
        if deadline_seconds is not None and not deadline_seconds > 0:
            raise ValueError("deadline_seconds must be > 0")
        self.deadline_seconds = deadline_seconds
        self.client = client
        self.model = model
        self.schema_name = schema_name
        self.schema = schema
        self.server: ServerKind = server
        self.response_format: WireFormat = resolve_response_format(response_format, server)
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        self.output_token_param: OutputTokenParam = output_token_param
        self.max_concurrency = max_concurrency
        self._limiter = LoopLimiter(max_concurrency)

    def response_format_param(self, schema: dict[str, Any] | None = None) -> ResponseFormat:
        """The ``response_format`` request parameter (``schema``: this call's JSON Schema in
        place of ``self.schema``; ignored in ``json_object`` mode)."""
        if self.response_format == "json_object":
            return {"type": "json_object"}
        chosen = self.schema if schema is None else schema
        return {
            "type": "json_schema",
            "json_schema": {"name": self.schema_name, "strict": True, "schema": chosen},
        }

    async def complete(
        self,
        messages: Sequence[dict[str, str]],
        tally: TokenTally,
        max_output_tokens: int | None = None,
        schema: dict[str, Any] | None = None,
    ) -> ChatAnswer:
        """One chat completion with these settings (:func:`chat_completion`); its usage is
        added to ``tally``. ``max_output_tokens`` (default: the setting) is this call's
        output cap; ``schema`` (default: ``self.schema``) this call's output schema. Raises
        ``EngineError`` (:class:`PromptTooLong` for a context-length 400)."""
        return await chat_completion(
            self.client,
            self.model,
            messages,
            self.response_format_param(schema),
            output_token_param=self.output_token_param,
            max_output_tokens=max_output_tokens or self.max_output_tokens,
            temperature=self.temperature,
            limiter=self._limiter,
            tally=tally,
            server=self.server,
        )

    def new_log(self) -> CallLog:
        """The log of one task, its deadline ``deadline_seconds`` from now."""
        if self.deadline_seconds is None:
            return CallLog()
        return CallLog(
            deadline=time.monotonic() + self.deadline_seconds,
            deadline_seconds=self.deadline_seconds,
        )

    async def call(
        self,
        messages: Sequence[dict[str, str]],
        log: CallLog,
        kind: str,
        max_output_tokens: int | None = None,
    ) -> ChatAnswer:
        """One chat completion, recorded in ``log`` as ``kind`` (``max_output_tokens`` as for
        :meth:`complete`) and counted in ``log.started_calls``. Raises
        :class:`BudgetExhausted` when ``log``'s deadline has passed, or passes during the
        call (which is cancelled), and ``EngineError`` for API failures."""
        remaining = log.deadline - time.monotonic()
        spent = f"the request's time budget ({log.deadline_seconds or math.inf:g} s) ran out"
        if remaining <= 0:
            raise BudgetExhausted(f"{spent} before the {kind} call")
        log.started_calls += 1
        try:
            answer = await asyncio.wait_for(
                self.complete(messages, log, max_output_tokens),
                None if math.isinf(remaining) else remaining,
            )
        except TimeoutError:
            raise BudgetExhausted(f"{spent} during the {kind} call") from None
        log.calls.append((kind, answer))
        return answer

    async def call_checked(
        self,
        messages: Sequence[dict[str, str]],
        log: CallLog,
        check: Checker[_T],
        constraint: str,
        kind: str,
    ) -> tuple[_T | None, str | None, list[str]]:
        """Call (recorded as ``kind``), read the answer with ``check`` and, when it is not
        usable, retry ONCE in the same conversation with the problems and ``constraint``
        appended (:func:`problems_message`; recorded as ``retry``). Returns the last
        ``check`` result (problems with the API key masked). Raises ``EngineError`` when
        the API fails."""
        answer = await self.call(messages, log, kind)
        value, failure, problems = check(answer)
        if value is None:
            retry = retry_conversation(messages, answer, problems_message(problems, constraint))
            answer = await self.call(retry, log, "retry")
            value, failure, problems = check(answer)
        return value, failure, [mask_secret(self.client, p) for p in problems]

    def mask(self, text: str | None) -> str | None:
        """``text`` with the client's API key masked (:func:`mask_secret`)."""
        return mask_secret(self.client, text)
