"""``refusal-audit eval``: run the pipeline over labelled files in memory and score it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any

from processors.evaluation import EvalItem, evaluate, labels_from_attributes
from processors.prefilter import TextScorer, detect_refusal_texts
from refusal_audit.audit.batch import BatchOptions, build_pipeline, file_source
from refusal_audit.audit.engine_setup import close_engine
from refusal_audit.audit.pipeline import RunReport
from refusal_audit.config import Settings
from schemas.audit import BatchRecord, StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent, StoredIdentity


@dataclass
class MemorySink:
    """A ``Sink`` that keeps everything in memory (evaluation stores nothing)."""

    events: list[StoredEvent] = field(default_factory=list)
    assessments: list[StoredAssessment] = field(default_factory=list)
    batches: list[BatchRecord] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)

    def insert_events(self, events: Sequence[StoredEvent]) -> None:
        """Keep the stored events."""
        self.events.extend(events)

    def insert_assessments(self, items: Sequence[StoredAssessment]) -> None:
        """Keep the assessments."""
        self.assessments.extend(items)

    def insert_batches(self, batches: Sequence[BatchRecord]) -> None:
        """Keep the batch records."""
        self.batches.extend(batches)

    def insert_dead_letters(self, items: Sequence[DeadLetter]) -> None:
        """Keep the dead letters."""
        self.dead_letters.extend(items)

    def stored_identities(self, keys: Sequence[tuple[str, str]]) -> dict[str, StoredIdentity]:
        """Nothing was stored before an evaluation: every log id is new."""
        return {}


def eval_item(
    stored: StoredEvent,
    assessment: StoredAssessment | None,
    top_level: str | None,
    model: TextScorer | None = None,
) -> EvalItem:
    """The ``EvalItem`` of one stored event and its assessment (None when not audited).

    ``top_level`` is the assessment's category at the taxonomy's top level. Labels come from
    the event's attributes; when they carry no refusal label but the event's
    ``classifier.is_refusal`` does (a label mapped there with ``--map``), that verdict is the
    label, and since the pipeline trusted it, the item is scored with the text pre-filter's
    decision alone (``label_in_classifier``: the stored ``detected_is_refusal``, or, when the
    pre-filter was off, the trained ``model`` if the pipeline uses one, else the cue scorer).
    A classifier verdict that is not the label is kept beside our detection's
    (``classifier_refusal``, ``detector_refusal``) for the classifier-vs-detector figures.
    """
    labels = labels_from_attributes(stored.event.attributes)
    detected = stored.is_refusal
    in_classifier = False
    classifier = stored.event.classifier
    verdict = classifier.is_refusal if classifier is not None else None
    ours = stored.detected_is_refusal
    if verdict is not None and ours is None:  # the pre-filter was off: read it now
        ours = detect_refusal_texts([stored.event.response], model)[0].is_refusal
    if labels.is_refusal is None and verdict is not None:
        labels = replace(labels, is_refusal=verdict)
        detected = bool(ours)
        in_classifier = True
    return EvalItem(
        labels=labels,
        detected_refusal=detected,
        category=top_level,
        estimated_fp=assessment.is_estimated_false_positive if assessment else None,
        fp_score=assessment.false_positive_score if assessment else None,
        label_in_classifier=in_classifier,
        classifier_refusal=verdict if not in_classifier else None,
        detector_refusal=ours if not in_classifier else None,
    )


def run_eval(
    cfg: Settings,
    files: Sequence[Path],
    options: BatchOptions,
    engine_name: str | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """Audit ``files`` with the configured pipeline into memory and return agreement figures.

    The figures are ``processors.evaluation.evaluate``'s, plus ``engine``, the run's counts
    (``records`` read, ``rejected`` records, ``duplicates``, ``failed_batches``,
    ``failed_events``), ``failures`` (source, location, reason_code and reason of every
    record or batch that failed, as ``audit`` lists them), ``engine_calls`` (model calls)
    and ``engine_steps`` (events per step that resolved them, ``RunReport.engine_steps``;
    both 0/empty with the local engine) and, with the refusal cascade on, ``encoder_decided``
    (events its encoder head decided, ``RunReport.encoder_decided``). Categories are compared at the
    taxonomy's top level. ``limit``: read only the first ``limit`` records of each file (a
    quick look with a slow engine; None: all). Raises ``ConfigError`` for bad configuration
    or input options, ``ValueError`` for a ``limit`` below 1.
    """
    if limit is not None and limit < 1:
        raise ValueError("limit must be >= 1")
    sink = MemorySink()
    pipeline = build_pipeline(cfg, sink, engine_name)
    sources = [file_source(path, options, cfg) for path in files]
    if limit is not None:
        sources = [replace(s, records=islice(s.records, limit)) for s in sources]

    async def main() -> RunReport:
        try:
            return await pipeline.run(sources)
        finally:
            await close_engine(pipeline.engine)

    report = asyncio.run(main())
    by_id = {a.log_id: a for a in sink.assessments}
    items: list[EvalItem] = []
    for stored in sink.events:
        assessment = by_id.get(stored.event.log_id)
        bundle = pipeline.bundles[stored.event.policy_bundle]
        top_level = bundle.top_level(assessment.category) if assessment else None
        items.append(eval_item(stored, assessment, top_level, pipeline.intake.refusal_model))
    figures = evaluate(items)
    figures["engine"] = {
        "name": pipeline.engine.name,
        "model": pipeline.engine.model,
        "version": pipeline.engine.version,
        "prompt_version": pipeline.engine.prompt_version,
    }
    for attribute in ("server", "context_window", "context_source", "response_format"):
        value = getattr(pipeline.engine, attribute, None)  # an LLM engine's server settings
        if value is not None:
            figures["engine"][attribute] = value
    figures["records"] = report.records
    figures["rejected"] = report.rejected
    figures["duplicates"] = report.duplicates
    figures["failed_batches"] = report.failed_batches
    figures["failed_events"] = report.failed_events
    figures["failures"] = [asdict(f) for f in report.failures]
    figures["engine_calls"] = report.engine_calls
    figures["engine_steps"] = dict(sorted(report.engine_steps.items()))
    if report.cascade:
        figures["encoder_decided"] = report.encoder_decided
    return figures
