"""The question-engine interface shared by the ``local`` and ``openai`` question engines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from processors.clarification.ambiguity import Ambiguity
from schemas.audit import EngineUsage
from schemas.clarification import QuestionSet, Route
from schemas.policy import PolicyBundle


@dataclass(frozen=True)
class QuestionContext:
    """What a question engine is given: the refused ``request`` and its ``refusal``, the
    classifier's ``category``/``route`` and cited ``clause_id``, the ``bundle``, and the
    ``ambiguities`` found in the request (``processors.clarification.ambiguity``)."""

    request: str
    refusal: str
    category: str
    route: Route
    bundle: PolicyBundle
    ambiguities: tuple[Ambiguity, ...]
    clause_id: str | None = None


@dataclass(frozen=True)
class GeneratedQuestions:
    """A question engine's result.

    ``questions`` is a schema-valid set that passed the circumvention check, or None;
    then ``failure`` is ``invalid_questions`` (no schema-valid set after the retry) or
    ``circumvention`` (the check rejected the last set) and ``errors`` says why, ``reasons``
    the check's reason codes (``schemas.clarification.CircumventionReason``) for a
    ``circumvention`` failure. ``attempts``
    counts the engine calls (0 for the local engine); ``raw_output`` keeps the model's raw
    answers (API key masked) for the audit trail; ``usage`` sums the tokens.
    """

    questions: QuestionSet | None
    failure: str | None = None
    errors: tuple[str, ...] = ()
    attempts: int = 0
    raw_output: str | None = None
    usage: EngineUsage = field(default_factory=EngineUsage)
    reasons: tuple[str, ...] = ()


class QuestionEngine(Protocol):
    """A clarification question engine.

    ``name`` (``local``, ``openai``), ``model``, ``version`` and ``prompt_version`` identify
    it in the conversation state and the audit trail. ``generate`` never surfaces an
    unchecked set: it returns ``questions=None`` with a failure instead. It raises
    ``processors.engines.base.EngineError`` only when the API itself fails.
    """

    name: str
    model: str
    version: str
    prompt_version: str

    async def generate(self, context: QuestionContext) -> GeneratedQuestions:
        """Questions for ``context`` (see the class docstring)."""
        ...
