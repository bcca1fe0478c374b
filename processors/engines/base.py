"""The engine interface shared by the offline ``local`` engine and LLM engines."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from schemas.audit import AuditResult, EngineUsage
from schemas.events import RefusalEvent
from schemas.policy import PolicyBundle


@dataclass(frozen=True)
class EngineOutput:
    """What an engine returns for one batch.

    ``result`` is the engine's claimed result (the harness validates it and recomputes the
    summary); ``false_positive_scores`` maps log_id to an over-refusal score in [0, 1] when
    the engine has one; ``raw_output`` is the model's raw text (None for the local engine).
    ``unresolved`` maps log_id to the reason (``"<code>: <detail>"``) for events of the batch
    the engine could not audit; ``result`` then holds assessments for the other events only,
    and the caller dead-letters the unresolved ones (empty for the local engine).
    ``steps`` maps each assessed log_id to the step of an LLM engine's recovery ladder that
    resolved it (``first``, ``split``, ``retry``, ``reaudit``; empty for the local engine)
    and ``calls`` counts the model calls the batch took (0 for the local engine).
    """

    result: AuditResult
    usage: EngineUsage = field(default_factory=EngineUsage)
    false_positive_scores: dict[str, float] = field(default_factory=dict)
    raw_output: str | None = None
    unresolved: dict[str, str] = field(default_factory=dict)
    steps: dict[str, str] = field(default_factory=dict)
    calls: int = 0


class EngineError(RuntimeError):
    """Raised by an engine that cannot produce a result for a batch (the batch is dead-lettered)."""


class AuditEngine(Protocol):
    """An audit engine.

    ``name`` is the engine kind (``local``, ``openai``), ``model`` the model or method id,
    ``version`` the engine's code/config version and ``prompt_version`` the prompt template's
    content hash (``"none"`` when no prompt is used). ``audit`` receives redacted refusal
    events of one policy bundle and raises ``EngineError`` on failure.
    """

    name: str
    model: str
    version: str
    prompt_version: str

    async def audit(self, events: Sequence[RefusalEvent], bundle: PolicyBundle) -> EngineOutput:
        """Audit one batch; see the class docstring."""
        ...
