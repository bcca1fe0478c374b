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
"""

from __future__ import annotations

import asyncio
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
ResponseFormatKind = Literal["json_schema", "json_object"]
_T = TypeVar("_T")

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
    ``json_schema``/``json_object``, an unknown ``output_token_param`` or
    ``max_output_tokens`` < 1 (the settings every LLM engine takes)."""
    if not model:
        raise ValueError("model must not be empty")
    if response_format not in ("json_schema", "json_object"):
        raise ValueError(f"response_format {response_format!r} not json_schema|json_object")
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
) -> ChatAnswer:
    """One chat completion; its usage is added to ``tally`` (a server's malformed usage is
    ignored). Raises ``EngineError`` (API key removed from the message) when the call fails
    after the SDK's own retries, or the server returns no choice."""
    params: dict[str, Any] = {output_token_param: max_output_tokens}
    if temperature is not None:
        params["temperature"] = temperature
    async with limiter.get():
        try:
            completion = await client.chat.completions.create(
                model=model,
                messages=cast(list[ChatCompletionMessageParam], list(messages)),
                response_format=response_format,
                **params,
            )
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
    """The calls of one engine run: ``(kind, answer)`` in order, and their token usage."""

    calls: list[tuple[str, ChatAnswer]] = field(default_factory=list)

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


class JsonCaller:
    """An engine that asks an OpenAI-compatible model for one JSON object per task.

    ``client`` is built by the caller (base_url, api_key, timeout, max_retries); ``model``
    the model id; ``schema_name``/``schema`` the strict ``json_schema`` output format (or
    ``response_format="json_object"``). ``max_output_tokens``, ``output_token_param``,
    ``temperature`` and ``max_concurrency`` (calls in flight per event loop) as for the
    audit engine. Raises ``ValueError`` for out-of-range settings.
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
    ) -> None:
        check_call_settings(model, response_format, output_token_param, max_output_tokens)
        self.client = client
        self.model = model
        self.schema_name = schema_name
        self.schema = schema
        self.response_format: ResponseFormatKind = response_format
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        self.output_token_param: OutputTokenParam = output_token_param
        self.max_concurrency = max_concurrency
        self._limiter = LoopLimiter(max_concurrency)

    def response_format_param(self) -> ResponseFormat:
        """The ``response_format`` request parameter."""
        if self.response_format == "json_object":
            return {"type": "json_object"}
        return {
            "type": "json_schema",
            "json_schema": {"name": self.schema_name, "strict": True, "schema": self.schema},
        }

    async def complete(self, messages: Sequence[dict[str, str]], tally: TokenTally) -> ChatAnswer:
        """One chat completion with these settings (:func:`chat_completion`); its usage is
        added to ``tally``. Raises ``EngineError``."""
        return await chat_completion(
            self.client,
            self.model,
            messages,
            self.response_format_param(),
            output_token_param=self.output_token_param,
            max_output_tokens=self.max_output_tokens,
            temperature=self.temperature,
            limiter=self._limiter,
            tally=tally,
        )

    async def call(self, messages: Sequence[dict[str, str]], log: CallLog, kind: str) -> ChatAnswer:
        """One chat completion, recorded in ``log`` as ``kind``. Raises ``EngineError``."""
        answer = await self.complete(messages, log)
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
