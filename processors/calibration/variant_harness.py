"""The ``openai`` variant engine's harness: an LLM writes the variants, this checks every one.

One refusal, one chat completion through ``inference.chat`` and ``processors.engines.llm_call``
(shared with the audit engine and the clarification engines: client handling, usage
counting, JSON decoding, the retry turn and API-key masking; the prompt plumbing is
``inference.prompted.PromptedCaller``). The engine, ``inference.variants.OpenAIVariantEngine``,
makes the calls; this module holds what needs no network (:class:`VariantHarness`: the
prompt values, each call's allowance, the check of an answer) and the schema:

1. The prompt is ``prompts/calibrate_v1.md`` (``prompts.calibration``), filled with the
   request (REQUEST), the raw refusal (REFUSAL), the triggered clause (POLICY_CLAUSE: id,
   stance, title and text) and the spectrum (SPECTRUM: one line per style with its label,
   base and description).
2. ``response_format`` is strict ``json_schema`` (:data:`VARIANTS_JSON_SCHEMA`) or
   ``json_object``. The answer must decode to a JSON object that validates as
   ``schemas.calibration.CalibrationOutput``, hold exactly one variant per style of the
   spectrum (no missing, no extra style) and every variant must pass the safety regression
   check (``processors.calibration.regression.check_variant``: still a refusal with the
   margin, nothing fulfilled, allowed alternatives, the circumvention check for the
   clarification-seeking style).
3. On any failure, ONE retry in the same conversation: the rejected answer as the
   assistant's turn, then a user turn starting ``PREVIOUS_ERROR:`` with every problem found
   and a stronger constraint.
4. If the retry fails too, the engine returns an escalation (``invalid_output``,
   ``model_refusal`` or ``regression``; ``api_error`` when the API failed or the request's
   time budget ``deadline_seconds`` ran out) with the raw output of the calls (API key masked):
   a human reviews it; nothing is guessed or repaired. The last schema-valid output, if
   any, is kept so the run record shows each variant with its failing reasons.

The prompt's maintainer notes still call this module ``openai_variants`` (its name before issue
26): the prompt version is the hash of the whole file, so editing them would make a new
prompt version.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from processors.calibration.base import (
    CalibrationContext,
    ordered,
    spectrum_problems,
)
from processors.calibration.regression import CheckContext, check_variant
from processors.engines.llm_call import (
    ChatAnswer,
    ServerKind,
    WireFormat,
    cut,
    decode_json_object,
    describe_error,
)
from processors.engines.local import LocalEngine
from schemas.calibration import MAX_TEXT_FIELD_CHARS, MAX_VARIANT_CHARS, CalibrationOutput, Spectrum

ENGINE_VERSION = "openai-variants-1"
VARIANTS_SCHEMA_NAME = "refusal_variants"
PREVIOUS_ERROR = "PREVIOUS_ERROR:"
"""The first line of the retry turn."""

VARIANTS_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "request_summary": {
            "type": "string",
            "description": "A neutral one-sentence summary of what was requested, without any "
            "detail of the refused content.",
        },
        "policy_applied": {
            "type": "string",
            "description": "The clause id and title the refusal rests on.",
        },
        "variants": {
            "type": "array",
            "description": "Exactly one variant per style of the spectrum.",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "style": {"type": "string", "description": "A style id of the spectrum."},
                    "response_text": {
                        "type": "string",
                        "description": "The refusal the user would see (at most 2000 characters).",
                    },
                    "ux_impact_note": {
                        "type": "string",
                        "description": "The expected effect on the user's experience.",
                    },
                },
                "required": ["style", "response_text", "ux_impact_note"],
            },
        },
    },
    "required": ["request_summary", "policy_applied", "variants"],
}
"""The strict-mode wire schema of the output (bounds and coverage are checked by the
harness)."""

GRAMMAR_RESPONSE_MAX_CHARS = 800
"""Longest ``response_text`` the per-spectrum schema (:func:`spectrum_wire_schema`) lets a
grammar-constrained model write: a refusal a user reads is a few sentences, and without a
bound a small model on llama.cpp can repeat itself up to the output cap (SmolLM2-135M did:
every run of the real-model test took the whole 240 s budget before this bound). The
contract's own bound (``schemas.calibration.MAX_VARIANT_CHARS``, 2,000) still applies to
every other server."""

GRAMMAR_NOTE_MAX_CHARS = 300
"""Longest ``ux_impact_note``, ``request_summary`` and ``policy_applied`` in the
per-spectrum schema (one or two sentences; the contract allows 600)."""


def spectrum_wire_schema(style_ids: Sequence[str]) -> dict[str, Any]:
    """:data:`VARIANTS_JSON_SCHEMA` narrowed to one spectrum, for servers that compile the
    schema into a decoding grammar (llama.cpp): exactly one variant per style, in spectrum
    order (``prefixItems``, JSON Schema 2020-12), and every text bounded (``GRAMMAR_*``
    constants, within the contract's bounds), so the answer's length is bounded by the
    grammar and not only by the output cap. The harness checks the same rules for every
    server. Not sent to OpenAI, whose strict mode documents a smaller subset (no
    ``prefixItems``). Raises ``ValueError`` for no style."""
    ids = list(dict.fromkeys(style_ids))
    if not ids:
        raise ValueError("a spectrum has at least one style")
    assert GRAMMAR_RESPONSE_MAX_CHARS <= MAX_VARIANT_CHARS
    assert GRAMMAR_NOTE_MAX_CHARS <= MAX_TEXT_FIELD_CHARS
    schema = copy.deepcopy(VARIANTS_JSON_SCHEMA)
    top = schema["properties"]
    for name in ("request_summary", "policy_applied"):
        top[name] |= {"minLength": 1, "maxLength": GRAMMAR_NOTE_MAX_CHARS}
    variants = top["variants"]
    item = variants.pop("items")
    fields = item["properties"]
    fields["response_text"] |= {"minLength": 1, "maxLength": GRAMMAR_RESPONSE_MAX_CHARS}
    fields["ux_impact_note"] |= {"minLength": 1, "maxLength": GRAMMAR_NOTE_MAX_CHARS}
    positions = []
    for style in ids:
        one = copy.deepcopy(item)
        one["properties"]["style"]["enum"] = [style]
        positions.append(one)
    # one item per position (no "items" beside it: llama.cpp's grammar converter would read
    # it in place of "prefixItems"); the count bounds it for validators
    variants |= {"prefixItems": positions, "minItems": len(ids), "maxItems": len(ids)}
    return schema


RETRY_CONSTRAINT = (
    "Answer again with ONLY one JSON object of the output schema: request_summary, "
    "policy_applied and variants with exactly one variant for each style id of the spectrum, "
    "no other style. Every response_text must be an unmistakable refusal that starts by "
    'declining (for example "I can\'t help with that"), fulfils no part of the request (no '
    "steps, lists, quantities, code, recipes, links or technical detail), names nothing "
    "harmful beyond the clause title, offers only alternatives the policy clearly permits, "
    "and never suggests how the request could be rephrased."
)


VARIANT_OUTPUT_TOKENS_PER_STYLE = 640
"""Output tokens per style of the spectrum: a variant at its bounds (a 2,000-character
response_text and a 600-character ux_impact_note of English prose) is 602 o200k tokens as
indented JSON."""

VARIANT_OUTPUT_TOKENS_FIXED = 320
"""Output tokens besides the variants: request_summary and policy_applied at their 600
characters each are 288 o200k tokens as indented JSON."""

NO_REQUEST = "(not available: only the log id of the refused request is known)"


def spectrum_lines(spectrum: Spectrum) -> str:
    """The SPECTRUM placeholder: one line per style, ``- <id> (<label>; base <base>):
    <description>``."""
    return "\n".join(
        f"- {s.style} ({s.label}; base {s.base}): {s.description}" for s in spectrum.styles
    )


@dataclass
class Checked:
    """One answer, checked: the output when it is schema-valid, the failure code (None: the
    answer passed) and the problems found."""

    output: CalibrationOutput | None = None
    failure: str | None = None
    problems: list[str] = field(default_factory=list)


class VariantHarness:
    """The network-free steps of the ``openai`` variant engine
    (``inference.variants.OpenAIVariantEngine``, which sets ``max_output_tokens``): each
    call's output allowance, the prompt's placeholder values and the check of one answer
    (schema, spectrum coverage, the safety regression check of every variant)."""

    max_output_tokens: int
    server: ServerKind
    response_format: WireFormat
    auditor: LocalEngine | None = None

    def output_tokens_for(self, n_styles: int) -> int:
        """The output cap of a call for a spectrum of ``n_styles`` styles:
        ``VARIANT_OUTPUT_TOKENS_FIXED + VARIANT_OUTPUT_TOKENS_PER_STYLE * n_styles``, at most
        ``max_output_tokens`` (6 styles, the default spectrum: 4,160)."""
        return min(
            self.max_output_tokens,
            VARIANT_OUTPUT_TOKENS_FIXED + VARIANT_OUTPUT_TOKENS_PER_STYLE * n_styles,
        )

    def wire_schema(self, context: CalibrationContext) -> dict[str, Any] | None:
        """The output schema of ``context``'s calls: :func:`spectrum_wire_schema` when the
        server compiles schemas into a grammar (llama.cpp) and json_schema is sent; else
        None (:data:`VARIANTS_JSON_SCHEMA`)."""
        if self.server != "llama.cpp" or self.response_format != "json_schema":
            return None
        return spectrum_wire_schema(context.spectrum.ids())

    def values(self, context: CalibrationContext) -> dict[str, str]:
        """The four placeholder values for ``context`` (module docstring, step 1)."""
        c = context.clause
        return {
            "REQUEST": context.request if context.request is not None else NO_REQUEST,
            "REFUSAL": context.refusal,
            "POLICY_CLAUSE": f"{c.clause_id} [{c.stance}] {c.title}\n{cut(c.text, 1500)}",
            "SPECTRUM": spectrum_lines(context.spectrum),
        }

    def _check(self, answer: ChatAnswer, context: CalibrationContext) -> Checked:
        allowance = self.output_tokens_for(len(context.spectrum.styles))
        data, code, message = decode_json_object(answer, allowance, "writing refusal variants")
        if data is None:
            failure = "model_refusal" if code == "model_refusal" else "invalid_output"
            return Checked(failure=failure, problems=[f"{code}: {message}"])
        try:
            output = CalibrationOutput.model_validate_json(orjson.dumps(data))
        except ValidationError as exc:
            return Checked(
                failure="invalid_output", problems=[describe_error(e) for e in exc.errors()]
            )
        coverage = spectrum_problems(output, context.spectrum)
        if coverage:
            return Checked(failure="invalid_output", problems=coverage)
        output = ordered(output, context.spectrum)
        if self.auditor is None:
            self.auditor = LocalEngine()
        check = CheckContext(
            context.clause, context.bundle, context.request, context.refusal, self.auditor
        )
        problems: list[str] = []
        for variant in output.variants:
            style = context.spectrum.get(variant.style)
            assert style is not None  # coverage checked above
            result = check_variant(variant, style, check)
            problems += [f"variant {variant.style}: {f.code}: {f.detail}" for f in result.findings]
        if problems:
            return Checked(output=output, failure="regression", problems=problems)
        return Checked(output=output)
