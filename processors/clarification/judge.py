"""The optional LLM judge of the circumvention check: a second opinion after the rules.

The deterministic rules (``processors.clarification.circumvention``) run first; only a set
they pass is shown to the judge (``processors.clarification.flow``). One chat completion
(``inference.chat.JsonCaller``, shared with the question engine: the same client handling,
usage counting, JSON decoding, retry turn and API-key masking). The judge,
``inference.judge.OpenAIJudge``, makes the calls; this module holds what needs no network
(:class:`JudgeHarness`: the messages, the check of an answer, the verdict), the schema and
the :class:`CircumventionJudge` protocol:

1. The prompt is ``prompts/clarify_judge_v1.md`` (``prompts.clarification.load_judge_template``),
   filled with the (redacted) request (USER_INPUT), the refusal (REFUSAL_REASON) and the
   numbered question texts (QUESTIONS). The guardrail notes are not shown: the judge rates
   what the user would see.
2. ``response_format`` is strict ``json_schema`` (:data:`JUDGE_JSON_SCHEMA`) or
   ``json_object``. The answer must validate as :class:`JudgeAnswer`: ``verdict`` ``pass``
   or ``reject``, ``reasons`` from the rules' vocabulary
   (``schemas.clarification.RuleReason``; at least one for ``reject``, none for
   ``pass``) and a free-text ``explanation``.
3. On an invalid answer, ONE retry in the same conversation with the validation errors and a
   stronger constraint appended.
4. If the retry is invalid too, or the API fails, or the request's time budget
   (``deadline_seconds``) runs out, the verdict is ``failed``: the caller
   escalates (``judge_failed``) and surfaces nothing.

``raw_output`` is a JSON array with one ``{"kind", "finish_reason", "content", "refusal"}``
object per call (kinds ``judge``, ``retry``), API key masked.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from processors.engines.llm_call import (
    ChatAnswer,
    KeyMasking,
    cut,
    decode_json_object,
    describe_error,
)
from prompts.clarification import ClarifyPrompt
from schemas.audit import EngineUsage
from schemas.clarification import (
    NOTE_MAX_CHARS,
    RULE_REASONS,
    CircumventionReason,
    JudgeVerdict,
    QuestionSet,
    RuleReason,
)

ENGINE_VERSION = "openai-judge-1"
JUDGE_SCHEMA_NAME = "circumvention_verdict"

JUDGE_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "verdict": {
            "type": "string",
            "enum": ["pass", "reject"],
            "description": "reject when any question teaches circumvention, else pass.",
        },
        "reasons": {
            "type": "array",
            "items": {"type": "string", "enum": list(RULE_REASONS)},
            "description": "Every reason code that applies; empty for pass.",
        },
        "explanation": {
            "type": "string",
            "description": "One or two sentences: which question and why (at most 800 characters).",
        },
    },
    "required": ["verdict", "reasons", "explanation"],
}
"""The strict-mode wire schema of a verdict (the bounds are checked by pydantic)."""

JUDGE_GRAMMAR_SCHEMA: dict[str, Any] = copy.deepcopy(JUDGE_JSON_SCHEMA)
""":data:`JUDGE_JSON_SCHEMA` with :class:`JudgeAnswer`'s bounds (at most one of each reason
code, the explanation at most 800 characters), sent to llama.cpp, which compiles it into a
decoding grammar; not sent to OpenAI (strict mode documents a smaller subset)."""
JUDGE_GRAMMAR_SCHEMA["properties"]["reasons"]["maxItems"] = len(RULE_REASONS)
JUDGE_GRAMMAR_SCHEMA["properties"]["explanation"] |= {
    "minLength": 1,
    "maxLength": NOTE_MAX_CHARS * 2,
}

RETRY_CONSTRAINT = (
    'Answer again with ONLY one JSON object of the output schema: {"verdict": "pass" or '
    '"reject", "reasons": [...], "explanation": "..."}. reasons holds only codes from the '
    "list in the rules: at least one when the verdict is reject, none when it is pass. The "
    "explanation is one or two sentences."
)


class JudgeAnswer(BaseModel):
    """What the judge must answer (module docstring, step 2). Strict; raises
    ``pydantic.ValidationError``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    verdict: Literal["pass", "reject"]
    reasons: list[RuleReason] = Field(max_length=len(RULE_REASONS))
    explanation: str = Field(min_length=1, max_length=NOTE_MAX_CHARS * 2)

    @model_validator(mode="after")
    def _reasons_fit_the_verdict(self) -> JudgeAnswer:
        if self.verdict == "reject" and not self.reasons:
            raise ValueError("a reject verdict needs at least one reason code")
        if self.verdict == "pass" and self.reasons:
            raise ValueError("a pass verdict takes no reason code")
        return self


@dataclass(frozen=True)
class JudgeResult:
    """A judge run: ``verdict`` (as the conversation state keeps it), ``attempts`` (calls
    made), ``raw_output`` (API key masked) and ``usage``."""

    verdict: JudgeVerdict
    attempts: int = 0
    raw_output: str | None = None
    usage: EngineUsage = field(default_factory=EngineUsage)

    @property
    def passed(self) -> bool:
        """True when the set may be surfaced."""
        return self.verdict.verdict == "pass"

    def describe(self) -> str:
        """The verdict for an escalation detail: ``judge <verdict>: <reasons> (<why>)``."""
        v = self.verdict
        reasons = ", ".join(v.reasons) or "-"
        return f"judge {v.verdict}: {reasons} ({v.explanation})"


class CircumventionJudge(Protocol):
    """An LLM judge of question sets. ``name``, ``model``, ``version`` and
    ``prompt_version`` identify it; ``judge`` never raises: an API failure or no valid
    answer is a ``failed`` verdict."""

    name: str
    model: str
    version: str
    prompt_version: str

    async def judge(self, questions: QuestionSet, request: str, refusal: str) -> JudgeResult:
        """The verdict on ``questions`` about ``request`` and its ``refusal``."""
        ...


def questions_block(questions: QuestionSet) -> str:
    """The question texts as the judge sees them: ``1. ...`` one per line."""
    return "\n".join(f"{i}. {q.question_text}" for i, q in enumerate(questions.questions, 1))


class JudgeHarness(KeyMasking):
    """The network-free steps of the ``openai`` judge (``inference.judge.OpenAIJudge``,
    which sets the attributes below): the messages of one verdict, the check of one answer
    and the verdict as the conversation state keeps it (API key masked)."""

    name: str
    model: str
    prompt: ClarifyPrompt
    prompt_version: str
    max_output_tokens: int

    def messages(self, questions: QuestionSet, request: str, refusal: str) -> list[dict[str, str]]:
        """The chat messages of one verdict (module docstring, step 1)."""
        return self.prompt.messages(
            {"USER_INPUT": request, "REFUSAL_REASON": refusal,
             "QUESTIONS": questions_block(questions)}
        )  # fmt: skip

    def _verdict(
        self, verdict: Literal["pass", "reject", "failed"], codes: Sequence[RuleReason],
        explanation: str,
    ) -> JudgeVerdict:  # fmt: skip
        reasons: list[CircumventionReason] = list(codes)
        return JudgeVerdict(
            verdict=verdict,
            reasons=reasons,
            explanation=cut(self.mask(explanation) or "", NOTE_MAX_CHARS * 2),
            engine=self.name,
            model=self.model,
            prompt_version=self.prompt_version,
        )

    def _check(self, answer: ChatAnswer) -> tuple[JudgeAnswer | None, str | None, list[str]]:
        data, code, message = decode_json_object(
            answer, self.max_output_tokens, "judging the clarification questions"
        )
        if data is None:
            return None, code, [f"{code}: {message}"]
        try:
            return JudgeAnswer.model_validate_json(orjson.dumps(data)), None, []
        except ValidationError as exc:
            return None, "invalid_output", [describe_error(e) for e in exc.errors()]
