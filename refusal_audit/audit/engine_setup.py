"""Choose and build the audit engine from the settings."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from processors.engines.base import AuditEngine
from processors.engines.local import LocalEngine
from processors.redaction import Redactor
from refusal_audit.config import ConfigError, Settings

if TYPE_CHECKING:
    from inference.chat import Client
    from inference.discovery import ServerInfo

log = logging.getLogger("refusal_audit.engines")


def make_engine(settings: Settings, name: str | None = None) -> AuditEngine:
    """Build the engine ``name`` (default: ``settings.resolved_engine``).

    Raises ``ConfigError`` for an unknown engine, an openai engine without a key, or a
    missing or corrupt category model with ``local_category_model = "trained"``.
    """
    chosen = name or settings.resolved_engine
    if chosen == "local":
        if name is None and settings.engine is None:
            log.info("no LLM endpoint or key configured: using the offline local engine")
        category_model = None
        if settings.local_category_model == "trained":
            from refusal_audit.audit.prefilter_model import load_shipped_category_model

            category_model = load_shipped_category_model(settings.local_category_model_path)
        return LocalEngine(
            false_positive_threshold=settings.local_false_positive_threshold,
            category_model=category_model,
        )
    if chosen == "openai":
        return _openai_engine(settings)
    raise ConfigError(f"unknown engine {chosen!r} (available: local, openai)")


MIN_DISCOVERED_CONTEXT = 1024
"""The smallest server context the audit engine accepts (the answer alone asks for 512 + 256
tokens per event; the static prompt is several thousand)."""


def openai_client(settings: Settings) -> Client:
    """The ``openai.AsyncOpenAI`` client of the openai_* settings (base URL, key, timeout,
    retries; ``inference.chat.make_client``). Raises ``ConfigError`` when neither a key nor
    a base URL is configured."""
    from inference.chat import make_client

    key = settings.openai_key()
    if not key and not settings.openai_base_url:
        raise ConfigError(
            "engine openai needs an API key (openai_api_key, openai_api_key_file or "
            "$OPENAI_API_KEY) or an openai_base_url of a server that needs none"
        )
    return make_client(
        key or "unused",
        settings.openai_base_url,
        settings.openai_timeout_seconds,
        settings.openai_max_retries,
    )


def llm_server(settings: Settings, model: str | None = None) -> ServerInfo:
    """Ask the configured server what it is (``inference.discovery.discover``: its
    kind and context size for ``model``, default ``openai_model``). Never raises for what
    the server does; raises ``ConfigError`` when the key file cannot be read."""
    # imported here, as the engines and clients that call it: httpx stays out of a
    # local-engine worker
    from inference.discovery import discover

    return discover(settings.openai_base_url, settings.openai_key(), model or settings.openai_model)


def llm_call_options(settings: Settings, model: str) -> dict[str, Any]:
    """The keyword arguments every one-call LLM component (clarification questions, the
    circumvention judge, calibration variants) is built with on the configured server:
    ``response_format``, ``max_concurrency`` (capped at the server's slots, discovered
    here), ``server`` (its kind) and ``deadline_seconds``. Raises ``ConfigError`` when the
    key file cannot be read."""
    from inference.discovery import concurrency

    info = llm_server(settings, model)
    return {
        "response_format": settings.openai_response_format,
        "max_concurrency": concurrency(settings.openai_max_concurrency, info),
        "server": info.kind,
        "deadline_seconds": settings.openai_request_deadline_seconds,
    }


def _openai_engine(settings: Settings) -> AuditEngine:
    """The audit engine on the configured server: its kind, context and slots discovered
    once here, the context window chosen (setting, server, default) and logged with its
    source, the calls in flight capped at the server's slots."""
    from inference.audit_engine import OpenAIEngine
    from inference.discovery import choose_context, concurrency, describe

    client = openai_client(settings)
    info = llm_server(settings)
    window, source = choose_context(settings.openai_context_window, info)
    log.info("%s", describe(settings.openai_base_url, info, window, source))
    max_output = settings.openai_max_output_tokens
    if settings.openai_context_window is None and window < MIN_DISCOVERED_CONTEXT:
        raise ConfigError(
            f"the LLM server reports a context of {window} tokens ({source}): too small to "
            f"audit anything (at least {MIN_DISCOVERED_CONTEXT}); start it with a larger "
            "context (llama.cpp --ctx-size)"
        )
    if window <= max_output:
        if settings.openai_context_window is not None:
            raise ConfigError(
                f"openai_context_window ({window}) must be larger than "
                f"openai_max_output_tokens ({max_output})"
            )
        max_output = window // 2  # a small discovered context: half of it for the answer
        log.warning(
            "the server's context (%d tokens) is not larger than openai_max_output_tokens "
            "(%d): answers are capped at %d tokens",
            window,
            settings.openai_max_output_tokens,
            max_output,
        )
    return OpenAIEngine(
        client,
        settings.openai_model,
        response_format=settings.openai_response_format,
        max_concurrency=concurrency(settings.openai_max_concurrency, info),
        max_output_tokens=max_output,
        context_window=window,
        context_source=source,
        server=info.kind,
        max_calls=settings.openai_batch_max_calls,
        deadline_seconds=settings.openai_batch_deadline_seconds,
    )


def tag_prefilter(engine: AuditEngine, model_version: str) -> None:
    """Append the trained pre-filter's version to ``engine.version`` (``.../prefilter=<v>``).

    The pre-filter decides which events reach the engine, so assessments made behind another
    pre-filter model are another audit configuration: the stored ``engine_version`` tells
    them apart in trend queries (and a re-run audits them again). Idempotent.
    """
    suffix = f"/prefilter={model_version}"
    if not engine.version.endswith(suffix):
        engine.version += suffix


async def close_engine(engine: Any) -> None:
    """Close an engine's network client, if it has one (call in the loop that used it)."""
    client = getattr(engine, "client", None)
    close = getattr(client, "close", None)
    if close is not None:
        await close()


def configured_redactor(settings: Settings) -> Redactor | None:
    """The redactor the audit settings describe (``redaction_kinds``), or None when
    ``redaction_enabled`` is off: the one the batch audit, the clarification service, the
    calibration runs and the reviewers' label exports all apply."""
    return Redactor(settings.redaction_kinds) if settings.redaction_enabled else None
