"""The ``openai`` question engine: an LLM writes the questions, the harness checks them.

One refusal, one chat completion (``processors.engines.llm_call``, shared with the audit
engine: the same client handling, usage counting, JSON decoding, retry turn and API-key
masking):

1. The prompt is ``prompts/clarify_v1.md`` (``prompts.clarify``), filled with the request
   (USER_INPUT), the refusal and its category (REFUSAL_REASON), the ambiguities found in
   the request (AMBIGUITY_DESCRIPTION), the bundle's clauses most relevant to the request
   (POLICY_CONTEXT: the cited clause and the best BM25 matches of the audit engine's clause
   index, ``processors.engines.local.ClauseIndex``) and its permitted clauses among them
   (SAFE_INTERPRETATION_CRITERIA).
2. ``response_format`` is strict ``json_schema`` (:data:`QUESTIONS_JSON_SCHEMA`) or
   ``json_object``. The answer must decode to a JSON object that validates as
   ``schemas.clarification.QuestionSet`` (2..4 questions, every field, bounded lengths) and
   pass the circumvention check (``processors.clarification.circumvention``).
3. On any failure, ONE retry in the same conversation, with a stronger constraint and the
   validation errors (or the check's findings) appended.
4. If the retry fails too, no question is returned: ``GeneratedQuestions.failure`` is
   ``invalid_questions`` (schema, refusal, truncation) or ``circumvention`` (the last set
   was schema-valid but failed the check), and the caller escalates. An unvalidated
   question is never returned.

``raw_output`` is a JSON array with one ``{"kind", "finish_reason", "content", "refusal"}``
object per call (kinds ``questions``, ``retry``), API key masked.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

import openai
import orjson
from openai.types.chat.completion_create_params import ResponseFormat
from pydantic import ValidationError

from processors.clarification.ambiguity import describe_ambiguities
from processors.clarification.base import GeneratedQuestions, QuestionContext
from processors.clarification.circumvention import check_question_set
from processors.engines.llm_call import (
    ChatAnswer,
    LoopLimiter,
    OutputTokenParam,
    TokenTally,
    chat_completion,
    check_call_settings,
    cut,
    decode_json_object,
    describe_error,
    mask_secret,
    retry_conversation,
)
from processors.engines.local import ClauseIndex, tokenize
from prompts.clarify import ClarifyPrompt, load_clarify_template
from schemas.audit import EngineUsage
from schemas.clarification import QuestionSet
from schemas.policy import Clause, PolicyBundle

ENGINE_VERSION = "openai-questions-1"
QUESTIONS_SCHEMA_NAME = "clarification_questions"

QUESTIONS_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "questions": {
            "type": "array",
            "description": "Two to four clarification questions.",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "question_text": {
                        "type": "string",
                        "description": "The question the user sees (10 to 300 characters).",
                    },
                    "target_ambiguity": {
                        "type": "string",
                        "description": "What the question disambiguates.",
                    },
                    "safety_guardrail": {
                        "type": "string",
                        "description": "Why the question does not guide the user toward an "
                        "unsafe rephrasing.",
                    },
                },
                "required": ["question_text", "target_ambiguity", "safety_guardrail"],
            },
        }
    },
    "required": ["questions"],
}
"""The strict-mode wire schema of a question set (bounds are checked by pydantic)."""

POLICY_CONTEXT_CLAUSES = 4
"""Clauses of the bundle shown as POLICY_CONTEXT (the cited one first, then the best BM25
matches of the request): enough to show both sides of a gray zone, few enough to keep the
prompt short."""
MAX_LISTED_ERRORS = 20

RETRY_CONSTRAINT = (
    'Answer again with ONLY one JSON object of the output schema: {"questions": [...]} with '
    "at least 2 and at most 4 questions, each with a non-empty question_text (10 to 300 "
    "characters), target_ambiguity and safety_guardrail. Ask only open questions about intent "
    "and context. No examples, no suggested wording, no methods, no policy or safety words, "
    "no leading or yes/no questions offering a purpose or role, no request to promise or "
    "confirm harmless intent, and no harm words the request does not use."
)

log = logging.getLogger(__name__)

ResponseFormatKind = Literal["json_schema", "json_object"]


@dataclass
class _Run(TokenTally):
    calls: list[tuple[str, ChatAnswer]] = field(default_factory=list)


def _clause_line(clause: Clause) -> str:
    text = " ".join(clause.text.split())
    return f"{clause.clause_id} [{clause.stance}] {cut(text, 400)}"


class OpenAIQuestionEngine:
    """The ``openai`` question engine (module docstring); satisfies
    ``processors.clarification.base.QuestionEngine``.

    ``client`` is built by the caller (base_url, api_key, timeout, max_retries); ``model``
    the model id. ``response_format``, ``max_output_tokens``, ``output_token_param``,
    ``temperature`` and ``max_concurrency`` as for the audit engine
    (``processors.engines.openai_engine.OpenAIEngine``). ``prompt`` defaults to
    ``prompts.clarify.load_clarify_template()``. Raises ``ValueError`` for out-of-range
    settings.
    """

    name = "openai"
    version = ENGINE_VERSION

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        *,
        response_format: ResponseFormatKind = "json_schema",
        max_concurrency: int = 4,
        max_output_tokens: int = 1024,
        temperature: float | None = None,
        output_token_param: OutputTokenParam = "max_completion_tokens",
        prompt: ClarifyPrompt | None = None,
    ) -> None:
        check_call_settings(model, response_format, output_token_param, max_output_tokens)
        self.client = client
        self.model = model
        self.response_format: ResponseFormatKind = response_format
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        self.output_token_param: OutputTokenParam = output_token_param
        self.prompt = prompt if prompt is not None else load_clarify_template()
        self.prompt_version = self.prompt.version
        self._limiter = LoopLimiter(max_concurrency)
        self._indexes: OrderedDict[str, ClauseIndex] = OrderedDict()

    def __repr__(self) -> str:
        return f"OpenAIQuestionEngine(model={self.model!r}, prompt_version={self.prompt_version!r})"

    # -- the prompt ----------------------------------------------------------------------------
    def _index(self, bundle: PolicyBundle) -> ClauseIndex:
        idx = self._indexes.get(bundle.version)
        if idx is None:
            idx = ClauseIndex(bundle)
            self._indexes[bundle.version] = idx
            while len(self._indexes) > 8:
                self._indexes.popitem(last=False)
        return idx

    def relevant_clauses(self, context: QuestionContext) -> list[Clause]:
        """The cited clause, then the clauses with the best BM25 score for the request (score
        > 0), ``POLICY_CONTEXT_CLAUSES`` at most, in that order."""
        bundle = context.bundle
        chosen: list[Clause] = []
        cited = bundle.clause(context.clause_id) if context.clause_id else None
        if cited is not None:
            chosen.append(cited)
        idx = self._index(bundle)
        scores = idx.scores(tokenize(context.request))
        for i in sorted(range(len(idx.clauses)), key=lambda j: (-scores[j], j)):
            if len(chosen) >= POLICY_CONTEXT_CLAUSES or scores[i] <= 0:
                break
            if idx.clauses[i] not in chosen:
                chosen.append(idx.clauses[i])
        return chosen

    def values(self, context: QuestionContext) -> dict[str, str]:
        """The five placeholder values for ``context`` (module docstring, step 1)."""
        clauses = self.relevant_clauses(context)
        allowed = [c for c in clauses if c.stance == "allow"]
        cited = f"; cited clause {context.clause_id}" if context.clause_id else ""
        return {
            "USER_INPUT": context.request,
            "REFUSAL_REASON": f"{context.refusal}\n(category: {context.category}{cited})",
            "AMBIGUITY_DESCRIPTION": describe_ambiguities(list(context.ambiguities)),
            "POLICY_CONTEXT": "\n".join(_clause_line(c) for c in clauses) or "(no clause matches)",
            "SAFE_INTERPRETATION_CRITERIA": "\n".join(
                ["The request may be fulfilled when the answers show it falls under:"]
                + [f"- {_clause_line(c)}" for c in allowed]
                if allowed
                else ["No permitted clause matches; ask what the request is for and about whom."]
            ),
        }

    # -- generation ----------------------------------------------------------------------------
    async def generate(self, context: QuestionContext) -> GeneratedQuestions:
        """Questions for ``context`` (module docstring). Raises
        ``processors.engines.base.EngineError`` when the API call fails after the SDK's
        retries."""
        started = time.perf_counter()
        run = _Run()
        messages = self.prompt.messages(self.values(context))
        answer = await self._call(messages, run, "questions")
        questions, failure, errors = self._check(answer, context)
        if questions is None:
            log.info("openai question engine: answer rejected (%s); retrying once", failure)
            retry = retry_conversation(messages, answer, self._retry_message(errors))
            answer = await self._call(retry, run, "retry")
            questions, failure, errors = self._check(answer, context)
        if questions is None:
            log.warning(
                "openai question engine: no valid question set after the retry (%s, prompt %s)",
                failure,
                self.prompt_version,
            )
        usage = EngineUsage(
            prompt_tokens=run.prompt_tokens,
            cached_tokens=run.cached_tokens,
            completion_tokens=run.completion_tokens,
            latency_ms=(time.perf_counter() - started) * 1000.0,
        )
        return GeneratedQuestions(
            questions=questions,
            failure=failure,
            errors=tuple(mask_secret(self.client, e) for e in errors),
            attempts=len(run.calls),
            raw_output=mask_secret(self.client, self._raw(run)),
            usage=usage,
        )

    def _check(
        self, answer: ChatAnswer, context: QuestionContext
    ) -> tuple[QuestionSet | None, str | None, list[str]]:
        data, code, message = decode_json_object(
            answer, self.max_output_tokens, "writing clarification questions"
        )
        if data is None:
            return None, "invalid_questions", [f"{code}: {message}"]
        try:
            questions = QuestionSet.model_validate_json(orjson.dumps(data))
        except ValidationError as exc:
            return None, "invalid_questions", [describe_error(e) for e in exc.errors()]
        check = check_question_set(questions, context.request, context.refusal)
        if not check.ok:
            return (
                None,
                "circumvention",
                [
                    f"{f.code}: question {f.question + 1 if f.question is not None else '-'}: "
                    f"{f.detail}"
                    for f in check.findings
                ],
            )
        return questions, None, []

    @staticmethod
    def _retry_message(errors: list[str]) -> str:
        listed = [f"- {cut(e, 300)}" for e in errors[:MAX_LISTED_ERRORS]]
        if len(errors) > MAX_LISTED_ERRORS:
            listed.append(f"- ... and {len(errors) - MAX_LISTED_ERRORS} more problems")
        return (
            "Your answer was rejected by the harness. Problems found:\n"
            + "\n".join(listed)
            + "\n\n"
            + RETRY_CONSTRAINT
        )

    # -- the API -------------------------------------------------------------------------------
    def _response_format(self) -> ResponseFormat:
        if self.response_format == "json_object":
            return {"type": "json_object"}
        return {
            "type": "json_schema",
            "json_schema": {
                "name": QUESTIONS_SCHEMA_NAME,
                "strict": True,
                "schema": QUESTIONS_JSON_SCHEMA,
            },
        }

    async def _call(self, messages: list[dict[str, str]], run: _Run, kind: str) -> ChatAnswer:
        answer = await chat_completion(
            self.client,
            self.model,
            messages,
            self._response_format(),
            output_token_param=self.output_token_param,
            max_output_tokens=self.max_output_tokens,
            temperature=self.temperature,
            limiter=self._limiter,
            tally=run,
        )
        run.calls.append((kind, answer))
        return answer

    @staticmethod
    def _raw(run: _Run) -> str | None:
        if not run.calls:
            return None
        return orjson.dumps(
            [
                {
                    "kind": kind,
                    "finish_reason": a.finish_reason,
                    "content": a.content,
                    "refusal": a.refusal,
                }
                for kind, a in run.calls
            ]
        ).decode()
