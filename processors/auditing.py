"""Audit one batch: engine call, harness validation, review sampling, warehouse rows.

The only I/O is the engine's own (an LLM call for ``openai``); storing is the caller's.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from processors.batching import AuditBatch
from processors.drift_detection import WindowCounts
from processors.engines.base import AuditEngine
from processors.intake import dead_letter_id
from processors.sampling import review_reasons
from processors.trends import trend_lines
from processors.validation import validate_result
from schemas.audit import AuditResult, BatchRecord, StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.policy import PolicyBundle


def batch_id_for(batch: AuditBatch, bundle: PolicyBundle, engine: AuditEngine) -> str:
    """Deterministic batch id: BLAKE2b-128 over bundle, engine identity and sorted log ids.

    Re-running the same batch with the same engine and policies yields the same id, so the
    warehouse replaces the batch row instead of adding one.
    """
    key = [
        bundle.name,
        bundle.version,
        engine.name,
        engine.model,
        engine.version,
        engine.prompt_version,
        *sorted(batch.log_ids),
    ]
    return hashlib.blake2b(orjson.dumps(key), digest_size=16).hexdigest()


@dataclass(frozen=True)
class AuditedBatch:
    """A validated batch: the recomputed result, its warehouse rows and the engine's raw text;
    ``steps`` and ``calls`` as the engine reported them (``EngineOutput``)."""

    result: AuditResult
    record: BatchRecord
    assessments: list[StoredAssessment]
    raw_output: str | None
    unresolved: dict[str, str]
    steps: dict[str, str] = field(default_factory=dict)
    calls: int = 0


def _provenance(
    batch_id: str, bundle: PolicyBundle, engine: AuditEngine, now: datetime
) -> dict[str, Any]:
    """The provenance columns a batch's record and each of its assessments carry."""
    return {
        "batch_id": batch_id,
        "policy_bundle": bundle.name,
        "bundle_version": bundle.version,
        "engine": engine.name,
        "engine_model": engine.model,
        "engine_version": engine.version,
        "prompt_version": engine.prompt_version,
        "audited_at": now,
    }


async def audit_batch(
    batch: AuditBatch,
    bundle: PolicyBundle,
    engine: AuditEngine,
    *,
    review_rate: float,
    review_seed: int,
    now: datetime,
    baseline: WindowCounts | None = None,
    review_band: float = 0.0,
) -> AuditedBatch:
    """Run ``engine`` on ``batch`` and turn a valid result into warehouse rows.

    The batch's ``usage.latency_ms`` is the engine call's wall time measured here.
    The summary's ``trends_identified`` are computed by ``processors.trends.trend_lines``
    against ``baseline`` (the engine's own free-text trends are discarded).
    Review sampling is ``processors.sampling.review_reasons`` with ``review_rate`` and
    ``review_seed``; a ``review_band`` above 0 also samples (reason ``uncertainty``) the
    unflagged, undrawn items whose ``false_positive_scores`` lie within it of the engine's
    ``false_positive_threshold`` (0.5 for an engine without one).
    Events the engine reports as ``unresolved`` are left out (the caller dead-letters them
    with ``unresolved_dead_letters``) and the rest is validated on its own.
    Raises ``EngineError`` (engine failure) or ``AuditValidationError`` (invalid result);
    the caller dead-letters the batch with ``failed_batch_dead_letter``.
    """
    started = time.perf_counter()
    output = await engine.audit(batch.events, bundle)
    latency_ms = (time.perf_counter() - started) * 1000.0
    resolved = [i for i in batch.log_ids if i not in output.unresolved]
    result = validate_result(output.result, resolved, bundle)
    trends = trend_lines(result.individual_assessments, baseline)
    summary = result.audit_summary.model_copy(update={"trends_identified": trends})
    result = result.model_copy(update={"audit_summary": summary})
    reasons = review_reasons(
        result.individual_assessments,
        review_rate,
        review_seed,
        scores=output.false_positive_scores,
        threshold=getattr(engine, "false_positive_threshold", 0.5),
        uncertainty_band=review_band,
    )
    provenance = _provenance(batch_id_for(batch, bundle, engine), bundle, engine, now)
    events = {e.log_id: e for e in batch.events}
    assessments = [
        StoredAssessment(
            **a.model_dump(),
            **provenance,
            event_time=events[a.log_id].event_time,
            model=events[a.log_id].model,
            product=events[a.log_id].product,
            false_positive_score=output.false_positive_scores.get(a.log_id),
            sampled_for_review=a.log_id in reasons,
            review_reason=reasons.get(a.log_id, ""),
        )
        for a in result.individual_assessments
    ]
    record = BatchRecord(
        **provenance,
        log_ids=resolved,
        summary=result.audit_summary,
        usage=output.usage.model_copy(update={"latency_ms": latency_ms}),
    )
    return AuditedBatch(
        result,
        record,
        assessments,
        output.raw_output,
        dict(output.unresolved),
        dict(output.steps),
        output.calls,
    )


def failed_batch_dead_letter(
    batch: AuditBatch, source: str, reason_code: str, reason: str, now: datetime
) -> DeadLetter:
    """A dead letter (stage ``audit``) holding the failed batch's redacted events as JSON.

    ``raw`` is ``{"policy_bundle": ..., "events": [RefusalEvent JSON, ...]}`` so the batch can
    be re-audited once the cause is fixed.
    """
    raw = orjson.dumps(
        {
            "policy_bundle": batch.policy_bundle,
            "events": [e.model_dump(mode="json") for e in batch.events],
        }
    )
    location = "batch " + ",".join(batch.log_ids)[:512]
    return _audit_letter(source, location, raw, reason_code, reason, None, now)


def _audit_letter(
    source: str,
    location: str,
    raw: bytes,
    reason_code: str,
    reason: str,
    log_id: str | None,
    now: datetime,
) -> DeadLetter:
    return DeadLetter(
        dead_letter_id=dead_letter_id(source, location, raw),
        stage="audit",
        reason_code=reason_code,
        reason=reason,
        source=source,
        location=location,
        raw=raw,
        log_id=log_id,
        created_at=now,
    )


def unresolved_dead_letters(
    batch: AuditBatch, audited: AuditedBatch, engine: AuditEngine, source: str, now: datetime
) -> list[DeadLetter]:
    """One dead letter (stage ``audit``) per unresolved event of ``audited``.

    ``raw`` is JSON ``{"event", "raw_output", "batch_log_ids", "prompt_version", "engine"}``;
    ``reason_code`` is the code before the colon of the engine's reason.
    """
    events = {e.log_id: e for e in batch.events}
    letters: list[DeadLetter] = []
    for log_id, reason in audited.unresolved.items():
        raw = orjson.dumps(
            {
                "event": events[log_id].model_dump(mode="json"),
                "raw_output": audited.raw_output,
                "batch_log_ids": batch.log_ids,
                "prompt_version": engine.prompt_version,
                "engine": f"{engine.name}/{engine.model}/{engine.version}",
            }
        )
        code = reason.partition(":")[0].strip() or "unresolved"
        letters.append(_audit_letter(source, f"event {log_id}", raw, code, reason, log_id, now))
    return letters
