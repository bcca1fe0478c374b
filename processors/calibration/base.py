"""The variant-engine interface shared by the ``local`` and ``openai`` variant engines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from schemas.audit import EngineUsage
from schemas.calibration import CalibrationEscalation, CalibrationOutput, Spectrum
from schemas.policy import Clause, PolicyBundle


class CalibrationInputError(ValueError):
    """A calibration request that cannot be run: an unknown bundle or clause, or a spectrum
    that does not parse."""


@dataclass(frozen=True)
class CalibrationContext:
    """What a variant engine is given: the refused ``request`` (None when only a log id was
    given and the text is not at hand), the raw ``refusal``, the triggered ``clause`` of
    ``bundle`` and the ``spectrum`` to cover."""

    request: str | None
    refusal: str
    clause: Clause
    bundle: PolicyBundle
    spectrum: Spectrum


@dataclass(frozen=True)
class GeneratedVariants:
    """A variant engine's result.

    ``output`` is the last schema-valid answer covering the spectrum (None when there was
    none); ``escalation`` is set when the engine gives up (no valid output after its one
    retry, or variants that still fail the regression check): the run is then escalated for
    manual review, never guessed. ``attempts`` counts the LLM calls (0 for ``local``);
    ``usage`` sums their tokens.
    """

    output: CalibrationOutput | None
    escalation: CalibrationEscalation | None = None
    attempts: int = 0
    usage: EngineUsage = field(default_factory=EngineUsage)


class VariantEngine(Protocol):
    """A refusal-variant engine.

    ``name`` (``local``, ``openai``), ``model``, ``version`` and ``prompt_version``
    identify it in the run record. ``generate`` raises
    ``processors.engines.base.EngineError`` only when an API itself fails.
    """

    name: str
    model: str
    version: str
    prompt_version: str

    async def generate(self, context: CalibrationContext) -> GeneratedVariants:
        """Variants for ``context`` (see the class docstring)."""
        ...


def spectrum_problems(output: CalibrationOutput, spectrum: Spectrum) -> list[str]:
    """Why ``output`` does not hold exactly one variant per style of ``spectrum``: one
    problem per missing style and per style not in the spectrum (empty when it does;
    duplicates are already rejected by ``CalibrationOutput``)."""
    wanted = spectrum.ids()
    got = [v.style for v in output.variants]
    problems = [f"variants: missing style {s!r}" for s in wanted if s not in got]
    problems += [
        f"variants: style {s!r} is not in the spectrum {wanted}" for s in got if s not in wanted
    ]
    return problems


def ordered(output: CalibrationOutput, spectrum: Spectrum) -> CalibrationOutput:
    """``output`` with its variants in spectrum order (call after :func:`spectrum_problems`
    found none)."""
    rank = {s: i for i, s in enumerate(spectrum.ids())}
    variants = sorted(output.variants, key=lambda v: rank.get(v.style, len(rank)))
    return output.model_copy(update={"variants": variants})
