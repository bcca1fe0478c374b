"""The ``openai`` circumvention judge: its call and the one retry (issue 26 moved them here
from ``processors.clarification.judge``, whose module docstring describes the steps and
which keeps the output schema, the answer model, the check of an answer and the
:class:`~processors.clarification.judge.CircumventionJudge` protocol)."""

from __future__ import annotations

import logging
import time

from inference.prompted import PromptedCaller
from processors.clarification.judge import (
    ENGINE_VERSION,
    JUDGE_GRAMMAR_SCHEMA,
    JUDGE_JSON_SCHEMA,
    JUDGE_SCHEMA_NAME,
    RETRY_CONSTRAINT,
    JudgeHarness,
    JudgeResult,
)
from processors.engines.base import EngineError
from prompts.clarification import load_judge_template
from schemas.clarification import QuestionSet

log = logging.getLogger("processors.clarification.judge")
"""The judge's logger, named as before issue 26 moved the judge (the logs keep their name)."""


class OpenAIJudge(PromptedCaller, JudgeHarness):
    """The ``openai`` circumvention judge (module docstring); satisfies
    :class:`CircumventionJudge`.

    Arguments as for ``inference.prompted.PromptedCaller`` (``max_output_tokens``
    default 512: enough for a verdict); ``prompt`` defaults to
    ``prompts.clarification.load_judge_template()``. Raises ``ValueError`` for out-of-range
    settings.
    """

    name = "openai"
    version = ENGINE_VERSION
    output_schema_name = JUDGE_SCHEMA_NAME
    output_schema = JUDGE_JSON_SCHEMA
    output_grammar_schema = JUDGE_GRAMMAR_SCHEMA
    default_max_output_tokens = 512
    """The largest valid answer (a reject with all 9 reason codes and an 800-character
    explanation) is 257 o200k tokens as indented JSON; 512 is twice that."""
    load_prompt = staticmethod(load_judge_template)

    async def judge(self, questions: QuestionSet, request: str, refusal: str) -> JudgeResult:
        """The verdict (module docstring); never raises."""
        started = time.perf_counter()
        run = self.new_log()
        try:
            answer, _, problems = await self.call_checked(
                self.messages(questions, request, refusal), run, self._check,
                RETRY_CONSTRAINT, "judge",
            )  # fmt: skip
        except EngineError as exc:
            answer, problems = None, [f"engine_error: {exc}"]
        if answer is None:
            log.warning("openai judge: no valid verdict (%s, prompt %s)",
                        problems[0] if problems else "-", self.prompt_version)  # fmt: skip
            verdict = self._verdict("failed", [], "; ".join(problems))
        else:
            verdict = self._verdict(answer.verdict, list(answer.reasons), answer.explanation)
        return JudgeResult(verdict, run.started_calls, self.mask(run.raw()), run.usage(started))
