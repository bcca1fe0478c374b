"""The ``openai`` variant engine: its call and the one retry (issue 26 moved them here from
``processors.calibration.variant_harness``, whose module docstring describes the steps and
which keeps the output schema, the prompt values and the check of an answer)."""

from __future__ import annotations

import logging
import time

from inference.prompted import PromptedCaller
from processors.calibration.base import CalibrationContext, GeneratedVariants
from processors.calibration.variant_harness import (
    ENGINE_VERSION,
    PREVIOUS_ERROR,
    RETRY_CONSTRAINT,
    VARIANTS_JSON_SCHEMA,
    VARIANTS_SCHEMA_NAME,
    Checked,
    VariantHarness,
)
from processors.engines.base import EngineError
from processors.engines.llm_call import cut, problems_message, retry_conversation
from prompts.calibration import load_calibrate_template
from schemas.calibration import CalibrationEscalation, CalibrationOutput

log = logging.getLogger("processors.calibration.openai_variants")
"""The engine's logger, named as before issue 26 moved the engine (the logs keep their name)."""


class OpenAIVariantEngine(PromptedCaller, VariantHarness):
    """The ``openai`` variant engine (module docstring); satisfies
    ``processors.calibration.base.VariantEngine``.

    Arguments as for ``inference.prompted.PromptedCaller`` (the audit engine's
    call settings; ``max_output_tokens`` default 8192, the cap of each call's allowance
    :meth:`output_tokens_for`, sized to the spectrum's styles); ``prompt`` defaults to
    ``prompts.calibration.load_calibrate_template()``; ``auditor`` (default a new
    ``LocalEngine``) judges offered alternatives in the regression check. Raises
    ``ValueError`` for out-of-range settings.
    """

    name = "openai"
    version = ENGINE_VERSION
    output_schema_name = VARIANTS_SCHEMA_NAME
    output_schema = VARIANTS_JSON_SCHEMA
    default_max_output_tokens = 8192
    """The cap of :meth:`output_tokens_for` (a spectrum of 12 styles, the most allowed,
    needs 7,999)."""
    load_prompt = staticmethod(load_calibrate_template)

    async def generate(self, context: CalibrationContext) -> GeneratedVariants:
        """Variants for ``context`` (module docstring); never raises for the API: when it
        fails after the SDK's retries, or the request's time budget (``deadline_seconds``)
        runs out, the run is escalated ``api_error`` with the error, the calls started and
        the raw answers received so far."""
        started = time.perf_counter()
        run = self.new_log()
        messages = self.prompt.messages(self.values(context))
        allowance = self.output_tokens_for(len(context.spectrum.styles))
        schema = self.wire_schema(context)  # narrowed on llama.cpp
        last_valid: CalibrationOutput | None = None
        try:
            answer = await self.call(messages, run, "variants", allowance, schema)
            checked = self._check(answer, context)
            last_valid = checked.output
            if checked.failure is not None:
                turn = f"{PREVIOUS_ERROR}\n{problems_message(checked.problems, RETRY_CONSTRAINT)}"
                conversation = retry_conversation(messages, answer, turn)
                answer = await self.call(conversation, run, "retry", allowance, schema)
                checked = self._check(answer, context)
                last_valid = checked.output or last_valid
        except EngineError as exc:  # the API failed or the time budget ran out
            checked = Checked(failure="api_error", problems=[str(exc)])
        if checked.failure is None:
            return GeneratedVariants(
                output=checked.output, attempts=run.started_calls, usage=run.usage(started)
            )
        log.warning(
            "openai variant engine: no valid variants after the retry (%s, prompt %s)",
            checked.failure,
            self.prompt_version,
        )
        escalation = CalibrationEscalation.model_validate(
            {
                "reason": checked.failure,
                "errors": [cut(self.mask(p) or "") for p in checked.problems[:50]],
                "raw_output": self.mask(run.raw()),
            }
        )
        return GeneratedVariants(
            output=last_valid,
            escalation=escalation,
            attempts=run.started_calls,
            usage=run.usage(started),
        )
