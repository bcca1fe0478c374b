"""Choose and build the audit engine from the settings."""

from __future__ import annotations

from processors.engines.base import AuditEngine
from processors.engines.local import LocalEngine
from refusal_audit.config import ConfigError, Settings


def make_engine(settings: Settings, name: str | None = None) -> AuditEngine:
    """Build the engine ``name`` (default: ``settings.resolved_engine``).

    Raises ``ConfigError`` for an engine that is unknown or not available in this version.
    """
    chosen = name or settings.resolved_engine
    if chosen == "local":
        return LocalEngine(false_positive_threshold=settings.local_false_positive_threshold)
    if chosen == "openai":
        raise ConfigError(
            "engine 'openai' is not available yet in this version; use --engine local"
        )
    raise ConfigError(f"unknown engine {chosen!r} (choose local or openai)")
