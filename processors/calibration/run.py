"""One calibration run: resolve the clause and spectrum, generate, check every variant, record.

Pure apart from the engine call: the caller gives the run id, the time and who started it
(``refusal_audit.calibration.runs`` makes them), so the same inputs make the same record.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime

from processors.calibration.base import CalibrationContext, CalibrationInputError, VariantEngine
from processors.calibration.regression import CheckContext, check_variant, with_suite
from processors.calibration.spectrum import SpectrumParseError, bundle_spectrum
from processors.engines.base import EngineError
from processors.engines.local import LocalEngine
from schemas.calibration import (
    CalibrationEscalation,
    CalibrationRequest,
    CalibrationRun,
    Spectrum,
    SuiteVerdict,
    VariantValidation,
)
from schemas.policy import PolicyBundle


def resolve(
    request: CalibrationRequest,
    bundles: Mapping[str, PolicyBundle],
    spectrum: Spectrum | None = None,
) -> CalibrationContext:
    """The engine context of ``request``: its bundle (by name), the triggered clause, and
    the spectrum (``spectrum`` if given, else the request's, else the bundle's, else the
    default). Raises :class:`CalibrationInputError` for an unknown bundle or clause or a
    malformed bundle spectrum."""
    bundle = bundles.get(request.policy_bundle)
    if bundle is None:
        raise CalibrationInputError(
            f"unknown policy bundle {request.policy_bundle!r} (configured: {sorted(bundles)})"
        )
    clause = bundle.clause(request.clause_id)
    if clause is None:
        raise CalibrationInputError(
            f"clause {request.clause_id!r} is not in bundle {request.policy_bundle!r}"
        )
    chosen = spectrum or request.spectrum
    if chosen is not None and chosen.source != "request":  # the caller cannot claim the source
        chosen = chosen.model_copy(update={"source": "request"})
    if chosen is None:
        try:
            chosen = bundle_spectrum(bundle)
        except SpectrumParseError as exc:
            raise CalibrationInputError(f"bundle {bundle.name!r}: {exc}") from exc
    return CalibrationContext(request.request, request.refusal, clause, bundle, chosen)


def _status(validations: Sequence[VariantValidation], escalated: bool) -> str:
    if escalated:
        return "escalated"
    return "passed" if all(v.passed for v in validations) else "failed_checks"


async def calibrate(
    request: CalibrationRequest,
    bundles: Mapping[str, PolicyBundle],
    engine: VariantEngine,
    *,
    run_id: str,
    created_at: datetime,
    started_by: str | None = None,
    spectrum: Spectrum | None = None,
    auditor: LocalEngine | None = None,
) -> CalibrationRun:
    """Run ``engine`` on ``request`` and check every variant (``regression.check_variant``).

    Returns the ``CalibrationRun``: ``escalated`` when the engine gave up (or its API
    failed: reason ``api_error``), else ``passed`` or ``failed_checks``; every variant of
    the output keeps its validation. Raises :class:`CalibrationInputError` (see
    :func:`resolve`).
    """
    context = resolve(request, bundles, spectrum)
    judge = auditor if auditor is not None else LocalEngine()
    escalation: CalibrationEscalation | None
    try:
        generated = await engine.generate(context)
        output, escalation = generated.output, generated.escalation
        attempts, usage = generated.attempts, generated.usage
    except EngineError as exc:
        output, attempts = None, 0
        escalation = CalibrationEscalation(reason="api_error", errors=[str(exc)[:1000]])
        usage = None
    validations: list[VariantValidation] = []
    if output is not None:
        c = context
        check = CheckContext(c.clause, c.bundle, c.request, c.refusal, judge)
        for variant in output.variants:
            style = context.spectrum.get(variant.style)
            if style is None:  # an engine's escalated output may hold a style out of spectrum
                continue
            validations.append(check_variant(variant, style, check))
        if len(validations) != len(output.variants):
            keep = {v.style for v in validations}
            output = output.model_copy(
                update={"variants": [v for v in output.variants if v.style in keep]}
            )
            if not output.variants:
                output = None
    digest = (
        hashlib.sha256(request.request.encode("utf-8")).hexdigest()
        if request.request is not None
        else None
    )
    data: dict[str, object] = {
        "calibration_run_id": run_id,
        "created_at": created_at,
        "started_by": started_by or request.requested_by,
        "log_id": request.log_id,
        "request_sha256": digest,
        "refusal": request.refusal,
        "policy_bundle": context.bundle.name,
        "bundle_version": context.bundle.version,
        "clause_id": context.clause.clause_id,
        "clause_title": context.clause.title,
        "spectrum": context.spectrum,
        "engine": engine.name,
        "engine_model": engine.model,
        "engine_version": engine.version,
        "prompt_version": engine.prompt_version,
        "status": _status(validations, escalation is not None),
        "output": output,
        "validations": validations,
        "escalation": escalation,
        "attempts": attempts,
    }
    if usage is not None:
        data["usage"] = usage
    return CalibrationRun.model_validate(data)


def apply_suite(
    run: CalibrationRun, answers: Sequence[tuple[SuiteVerdict | None, str | None]]
) -> CalibrationRun:
    """``run`` with a team suite's answers, one ``(verdict, error)`` per validation in
    order (``regression.with_suite``), and its status recomputed (an escalated run stays
    escalated). Raises ``ValueError`` when the number of answers differs."""
    if len(answers) != len(run.validations):
        raise ValueError(f"{len(answers)} suite answers for {len(run.validations)} variants")
    validations = [
        with_suite(v, verdict, error)
        for v, (verdict, error) in zip(run.validations, answers, strict=True)
    ]
    status = _status(validations, run.escalation is not None)
    return CalibrationRun.model_validate(
        {**run.model_dump(), "validations": validations, "status": status}
    )
