"""The LLM calls every engine shares: one chat completion over the ``openai`` SDK, under a
concurrency limit and a task's deadline, and the checked call with its one retry.

Moved out of ``processors.engines.llm_call`` (issue 26), which keeps what needs no network:
reading an answer (``decode_json_object``), the retry turn, the context-overflow text,
masking the API key, the call log and its deadline fields.

- :func:`chat_completion`: one ``chat.completions.create`` call under a per-event-loop
  concurrency limit (:class:`LoopLimiter`); usage adds up in a ``TokenTally``; any API
  failure raises ``EngineError`` with the key removed from its message, a context-length
  400 :class:`~processors.engines.llm_call.PromptTooLong` (:func:`parse_context_overflow`).
- :class:`JsonCaller`: the settings and the checked call (one retry) of an engine that asks
  for one JSON object per task (the question engine, the judge and the variant engine;
  the audit engine builds on it too); ``CallLog`` keeps its calls and usage.
- :func:`make_client`: the ``openai.AsyncOpenAI`` client of the openai_* settings.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections.abc import Sequence
from typing import Any, TypeAlias, TypeVar, cast

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from openai.types.chat.completion_create_params import ResponseFormat

from processors.engines.base import EngineError
from processors.engines.llm_call import (
    BudgetExhausted,
    CallLog,
    ChatAnswer,
    Checker,
    ContextOverflow,
    KeyMasking,
    OutputTokenParam,
    PromptTooLong,
    ResponseFormatKind,
    ServerKind,
    TokenTally,
    WireFormat,
    check_call_settings,
    count_value,
    mask_secret,
    problems_message,
    read_context_overflow,
    resolve_response_format,
    retry_conversation,
    scrub_secret,
)

_T = TypeVar("_T")

Client: TypeAlias = openai.AsyncOpenAI
"""The LLM client type the engines take (for annotations outside this layer)."""


def make_client(
    api_key: str, base_url: str | None, timeout_seconds: float, max_retries: int
) -> Client:
    """An ``openai.AsyncOpenAI`` client of ``base_url`` (None: api.openai.com) with
    ``api_key``, a per-request ``timeout_seconds`` and ``max_retries`` SDK retries."""
    return openai.AsyncOpenAI(
        api_key=api_key, base_url=base_url, timeout=timeout_seconds, max_retries=max_retries
    )


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


def parse_context_overflow(exc: openai.APIStatusError) -> ContextOverflow | None:
    """The :class:`~processors.engines.llm_call.ContextOverflow` of an SDK error that says
    the request does not fit the model's context
    (:func:`processors.engines.llm_call.read_context_overflow` of its status, body and
    message), else None (any other error)."""
    return read_context_overflow(exc.status_code, exc.body, exc.message)


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


class JsonCaller(KeyMasking):
    """An engine that asks an OpenAI-compatible model for one JSON object per task.

    ``client`` is built by the caller (base_url, api_key, timeout, max_retries); ``model``
    the model id; ``schema_name``/``schema`` the strict ``json_schema`` output format (or
    ``response_format="json_object"``; ``auto`` resolves with ``server``, the server's kind:
    :func:`resolve_response_format`; the attribute ``response_format`` holds what is sent);
    ``grammar_schema`` (optional) is sent in place of ``schema`` to llama.cpp, which compiles
    the schema into a decoding grammar: the same fields with the contract's length and count
    bounds, so a small model cannot fill a string up to the output cap.
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
        grammar_schema: dict[str, Any] | None = None,
    ) -> None:
        check_call_settings(model, response_format, output_token_param, max_output_tokens)
        if deadline_seconds is not None and not deadline_seconds > 0:
            raise ValueError("deadline_seconds must be > 0")
        self.deadline_seconds = deadline_seconds
        self.client = client
        self.model = model
        self.schema_name = schema_name
        self.schema = schema
        self.grammar_schema = grammar_schema
        self.server: ServerKind = server
        self.response_format: WireFormat = resolve_response_format(response_format, server)
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        self.output_token_param: OutputTokenParam = output_token_param
        self.max_concurrency = max_concurrency
        self._limiter = LoopLimiter(max_concurrency)

    def response_format_param(self, schema: dict[str, Any] | None = None) -> ResponseFormat:
        """The ``response_format`` request parameter (``schema``: this call's JSON Schema in
        place of ``self.schema``, or on llama.cpp of ``self.grammar_schema`` when set;
        ignored in ``json_object`` mode)."""
        if self.response_format == "json_object":
            return {"type": "json_object"}
        chosen = self.schema
        if self.server == "llama.cpp" and self.grammar_schema is not None:
            chosen = self.grammar_schema
        chosen = chosen if schema is None else schema
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
        schema: dict[str, Any] | None = None,
    ) -> ChatAnswer:
        """One chat completion, recorded in ``log`` as ``kind`` (``max_output_tokens`` and
        ``schema`` as for :meth:`complete`) and counted in ``log.started_calls``. Raises
        :class:`BudgetExhausted` when ``log``'s deadline has passed, or passes during the
        call (which is cancelled), and ``EngineError`` for API failures."""
        remaining = log.deadline - time.monotonic()
        spent = f"the request's time budget ({log.deadline_seconds or math.inf:g} s) ran out"
        if remaining <= 0:
            raise BudgetExhausted(f"{spent} before the {kind} call")
        log.started_calls += 1
        try:
            answer = await asyncio.wait_for(
                self.complete(messages, log, max_output_tokens, schema),
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
