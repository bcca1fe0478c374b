"""Test data for the drift detectors: XSTest refusals as assessments, synthetic streams.

XSTest rows are read from ../shared/data/xstest by path (never copied). A refusal is a row
whose final_label is a full or partial refusal; its ground-truth false-positive flag comes
from the prompt type (types starting with ``contrast_`` are unsafe prompts, so refusing them
is correct; every other type is an over-refusal), and its category is the prompt type.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from processors.drift_detection import Finding, WindowCounts
from schemas.audit import StoredAssessment
from schemas.events import RefusalEvent, StoredEvent


@dataclass(frozen=True)
class Row:
    """One audited refusal, enough to build warehouse rows or window counts."""

    log_id: str
    category: str
    false_positive: bool
    review: bool = False
    model: str = "m"
    product: str = "p"
    bundle: str = "default"


def xstest_refusals(data_dir: Path, model: str) -> list[Row]:
    """The refusals of ``xstest_v2_completions_<model>.csv`` as rows (log id = model-id)."""
    path = data_dir / "xstest" / f"xstest_v2_completions_{model}.csv"
    with path.open(newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["final_label"] != "1_full_compliance"]
    return [
        Row(
            log_id=f"{model}-{r['id']}",
            category=r["type"],
            false_positive=not r["type"].startswith("contrast_"),
            model=model,
        )
        for r in rows
    ]


def counts_of(rows: list[Row]) -> WindowCounts:
    """Window counts of ``rows`` (all in one scope)."""
    return WindowCounts(
        refusals=len(rows),
        false_positives=sum(r.false_positive for r in rows),
        review_flags=sum(r.review for r in rows),
        categories=dict(Counter(r.category for r in rows)),
    )


def stored_rows(
    rows: list[Row], event_time: datetime, *, arrival_delay: timedelta = timedelta(seconds=1)
) -> tuple[list[StoredEvent], list[StoredAssessment]]:
    """Warehouse rows for ``rows``: every event at ``event_time``, ingested ``arrival_delay``
    later, audited one second after that."""
    events, assessments = [], []
    ingested = event_time + arrival_delay
    for r in rows:
        events.append(
            StoredEvent(
                event=RefusalEvent(
                    log_id=r.log_id,
                    event_time=event_time,
                    request="[synthetic request]",
                    response="I can't help with that.",
                    model=r.model,
                    product=r.product,
                    policy_bundle=r.bundle,
                ),
                is_refusal=True,
                refusal_kind="full",
                refusal_score=0.9,
                source="test",
                ingested_at=ingested,
            )
        )
        assessments.append(
            StoredAssessment(
                log_id=r.log_id,
                category=r.category,
                is_estimated_false_positive=r.false_positive,
                policy_clause_cited=None,
                assessment_rationale="synthetic",
                requires_human_review=r.review,
                batch_id="b",
                policy_bundle=r.bundle,
                bundle_version="v1",
                engine="test",
                engine_model="test",
                engine_version="1",
                prompt_version="none",
                audited_at=ingested + timedelta(seconds=1),
                event_time=event_time,
                model=r.model,
                product=r.product,
            )
        )
    return events, assessments


def by_kind(findings: list[Finding]) -> dict[str, Finding]:
    """Findings by detector kind (for tests that evaluate a single scope)."""
    out: dict[str, Finding] = {}
    for f in findings:
        assert f.kind not in out, f"two {f.kind} findings"
        out[f.kind] = f
    return out
