"""What every LLM engine shares that needs no network: the call settings, reading an answer,
the retry turn, the server's context-overflow message, secrets.

The calls themselves (the ``openai`` SDK, concurrency, deadlines) are
``inference.chat`` (``chat_completion``, ``JsonCaller``); the audit engine
(``inference.audit_engine``), the clarification question engine
(``inference.questions``), the circumvention judge (``inference.judge``) and the
variant engine (``inference.variants``) all use both, so they count usage, read a
structured answer, build the one retry turn and keep the API key out of errors and stored
raw output the same way.

- :func:`decode_json_object`: an answer -> a JSON object, or the reason code and message
  why not (``model_refusal``: a refusal, an empty answer or a content-filter stop;
  ``output_truncated``: ``finish_reason == "length"``; ``invalid_output``: not JSON, or JSON
  but not an object).
- :func:`retry_conversation`: the conversation of the one retry (the answer appended as
  the assistant's turn, then a user turn listing the problems).
- :func:`mask_secret` / :func:`scrub_secret`: the client's API key replaced by ``***``.
- :class:`TokenTally` / :class:`CallLog`: the usage of a run, and the calls, usage and
  deadline of one task (:meth:`CallLog.raw`: the raw answers as stored).

What a real server needs (issue 24): the caller tells the engine the server's kind
(:data:`ServerKind`, found by ``inference.discovery``). On llama.cpp every call sends
``cache_prompt: true`` (reuse the slot's KV cache for the shared prefix; never sent to other
servers: OpenAI rejects unknown fields), and ``response_format="auto"`` resolves per kind
(:func:`resolve_response_format`). A context-length HTTP 400 (llama.cpp, OpenAI, vLLM;
:func:`read_context_overflow`) raises :class:`PromptTooLong`, an ``EngineError`` carrying
the server's numbers, so the audit engine can split the batch.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, TypeVar, cast, overload

import orjson

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


class KeyMasking:
    """A holder of an LLM client (``client``, any object with an ``api_key``) whose key must
    not reach an error or a stored answer: the base of ``inference.chat.JsonCaller`` and of
    the engines' network-free steps."""

    client: Any

    def mask(self, text: str | None) -> str | None:
        """``text`` with the client's API key masked (:func:`mask_secret`)."""
        return mask_secret(self.client, text)


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


def read_context_overflow(
    status_code: int, error_body: object, error_message: str
) -> ContextOverflow | None:
    """The :class:`ContextOverflow` of an HTTP error (its status, its decoded JSON body and
    the client's message) that says the request does not fit the model's context: a 400 with
    a llama.cpp, OpenAI or vLLM message (see the patterns above), else None (any other
    error). ``inference.chat.parse_context_overflow`` reads an SDK error with it."""
    if status_code != 400:
        return None
    body: dict[str, Any] = error_body if isinstance(error_body, dict) else {}
    error = body.get("error")
    inner: dict[str, Any] = error if isinstance(error, dict) else body
    text = " ".join(
        str(v) for v in (error_message, inner.get("message"), inner.get("code"), inner.get("type"))
    )
    if not any(marker in text for marker in _OVERFLOW_MARKERS):
        return None
    prompt = count_value(inner.get("n_prompt_tokens")) or _first_int(_PROMPT_PATTERNS, text)
    context = count_value(inner.get("n_ctx")) or _first_int(_CONTEXT_PATTERNS, text)
    message = str(inner.get("message") or error_message)
    return ContextOverflow(prompt, context, _first_int(_COMPLETION_PATTERNS, text), message)


@dataclass
class CallLog(TokenTally):
    """The calls of one engine run: ``(kind, answer)`` in order, their token usage, and the
    run's time budget: no call starts after ``deadline`` (a ``time.monotonic()``; ``inf``:
    none) and a call in flight then is cancelled (``inference.chat.JsonCaller.call``).
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
    """The keyword settings of an ``inference.chat.JsonCaller`` (for ``**kwargs: Unpack[...]``)."""

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
