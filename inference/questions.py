"""The ``openai`` question engine: its call and the one retry (issue 26 moved them here from
``processors.clarification.question_harness``, whose module docstring describes the steps
and which keeps the prompt values, the output schema and the check of an answer)."""

from __future__ import annotations

import logging
import time

from inference.prompted import PromptedCaller
from processors.clarification.base import GeneratedQuestions, QuestionContext
from processors.clarification.question_harness import (
    ENGINE_VERSION,
    QUESTIONS_GRAMMAR_SCHEMA,
    QUESTIONS_JSON_SCHEMA,
    QUESTIONS_SCHEMA_NAME,
    RETRY_CONSTRAINT,
    QuestionHarness,
)
from processors.engines.base import EngineError
from prompts.clarification import load_clarify_template
from schemas.clarification import CIRCUMVENTION_REASONS

log = logging.getLogger("processors.clarification.openai_questions")
"""The engine's logger, named as before issue 26 moved the engine (the logs keep their name)."""


class OpenAIQuestionEngine(PromptedCaller, QuestionHarness):
    """The ``openai`` question engine (module docstring); satisfies
    ``processors.clarification.base.QuestionEngine``.

    Arguments as for ``inference.prompted.PromptedCaller`` (the audit engine's
    call settings; ``max_output_tokens`` default 1280); ``prompt`` defaults to
    ``prompts.clarification.load_clarify_template()``. Raises ``ValueError`` for out-of-range
    settings.
    """

    name = "openai"
    version = ENGINE_VERSION
    output_schema_name = QUESTIONS_SCHEMA_NAME
    output_schema = QUESTIONS_JSON_SCHEMA
    output_grammar_schema = QUESTIONS_GRAMMAR_SCHEMA
    default_max_output_tokens = 1280
    """The largest valid answer (4 questions, every text at its maximum length: 300 + 400 +
    400 characters of English prose) is 1,105 o200k tokens as indented JSON; 1,280 holds it
    with ~15% to spare (1,024 cut it off)."""
    load_prompt = staticmethod(load_clarify_template)

    # -- generation ----------------------------------------------------------------------------
    async def generate(self, context: QuestionContext) -> GeneratedQuestions:
        """Questions for ``context`` (module docstring); never raises: when the API fails
        after the SDK's retries, or the request's time budget (``deadline_seconds``) runs
        out, the result has no questions, failure ``invalid_questions`` and the error."""
        started = time.perf_counter()
        run = self.new_log()
        messages = self.prompt.messages(self.values(context))
        try:
            questions, failure, errors = await self.call_checked(
                messages, run, lambda answer: self._check(answer, context), RETRY_CONSTRAINT,
                "questions",
            )  # fmt: skip
        except EngineError as exc:  # the API failed or the time budget ran out
            questions, failure = None, "invalid_questions"
            errors = [f"engine_error: {self.mask(str(exc))}"]
        if questions is None:
            log.warning(
                "openai question engine: no valid question set after the retry (%s, prompt %s)",
                failure,
                self.prompt_version,
            )
        reasons = (
            tuple(dict.fromkeys(e.split(":", 1)[0] for e in errors if e.split(":", 1)[0]
                                in CIRCUMVENTION_REASONS))
            if failure == "circumvention"
            else ()
        )  # fmt: skip
        return GeneratedQuestions(
            questions=questions,
            failure=failure,
            errors=tuple(errors),
            reasons=reasons,
            attempts=run.started_calls,
            raw_output=self.mask(run.raw()),
            usage=run.usage(started),
        )
