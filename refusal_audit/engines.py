"""Choose and build the audit engine from the settings."""

from __future__ import annotations

from processors.engines.base import AuditEngine
from processors.engines.local import LocalEngine
from refusal_audit.config import ConfigError, Settings


def make_engine(settings: Settings, name: str | None = None) -> AuditEngine:
    """Build the engine ``name`` (default: ``settings.engine``).

    Raises ``ConfigError`` for an engine that is unknown or not available in this version.
    """
    chosen = name or settings.engine
    if chosen == "local":
        return LocalEngine(false_positive_threshold=settings.local_false_positive_threshold)
    raise ConfigError(f"unknown engine {chosen!r} (available: local)")
