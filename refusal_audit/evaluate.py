"""``refusal-audit eval``: run the pipeline over labelled files in memory and score it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from processors.evaluation import EvalItem, evaluate, labels_from_attributes
from refusal_audit.batch import BatchOptions, build_pipeline, file_source
from refusal_audit.config import Settings
from refusal_audit.engines import close_engine
from refusal_audit.pipeline import RunReport
from schemas.audit import BatchRecord, StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent


@dataclass
class MemorySink:
    """A ``Sink`` that keeps everything in memory (evaluation stores nothing)."""

    events: list[StoredEvent] = field(default_factory=list)
    assessments: list[StoredAssessment] = field(default_factory=list)
    batches: list[BatchRecord] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)

    def insert_events(self, events: Sequence[StoredEvent]) -> None:
        self.events.extend(events)

    def insert_assessments(self, items: Sequence[StoredAssessment]) -> None:
        self.assessments.extend(items)

    def insert_batches(self, batches: Sequence[BatchRecord]) -> None:
        self.batches.extend(batches)

    def insert_dead_letters(self, items: Sequence[DeadLetter]) -> None:
        self.dead_letters.extend(items)


def run_eval(
    cfg: Settings, files: Sequence[Path], options: BatchOptions, engine_name: str | None = None
) -> dict[str, Any]:
    """Audit ``files`` with the configured pipeline into memory and return agreement figures.

    Categories are compared at the taxonomy's top level. Raises ``ConfigError`` for bad
    configuration or input options.
    """
    sink = MemorySink()
    pipeline = build_pipeline(cfg, sink, engine_name)
    sources = [file_source(path, options, cfg) for path in files]

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
        items.append(
            EvalItem(
                labels=labels_from_attributes(stored.event.attributes),
                detected_refusal=stored.is_refusal,
                category=bundle.top_level(assessment.category) if assessment else None,
                estimated_fp=assessment.is_estimated_false_positive if assessment else None,
                fp_score=assessment.false_positive_score if assessment else None,
            )
        )
    figures = evaluate(items)
    figures["engine"] = {
        "name": pipeline.engine.name,
        "model": pipeline.engine.model,
        "version": pipeline.engine.version,
        "prompt_version": pipeline.engine.prompt_version,
    }
    figures["records"] = report.records
    figures["rejected"] = report.rejected
    figures["failed_batches"] = report.failed_batches
    return figures
