"""The shared pipeline end to end on the embedded warehouse (chDB) with the local engine."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from processors.engines.base import EngineError, EngineOutput
from processors.engines.local import LocalEngine
from refusal_audit.audit.batch import BatchOptions, build_pipeline, file_source, run_batch
from refusal_audit.audit.pipeline import AuditPipeline
from refusal_audit.audit.settings import PolicyBundlePaths
from refusal_audit.config import Settings
from schemas.audit import AuditResult
from schemas.events import RefusalEvent
from schemas.policy import PolicyBundle
from warehouse import Warehouse
from warehouse.queries import NAMED_QUERIES, run_named

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"
MALFORMED = REPO / "tests" / "fixtures" / "malformed.jsonl"
T0 = datetime(2026, 1, 5, tzinfo=UTC)
COCONOT_MAP = "request=prompt,response=response,log_id=id"


def settings(**overrides: object) -> Settings:
    base = REPO / "refusal_audit" / "example_policies"
    bundle = PolicyBundlePaths(
        allowed_use=base / "allowed_use_policy.md",
        product_safety=base / "product_safety_policy.md",
        taxonomy=base / "refusal_taxonomy.md",
    )
    return Settings(policy_bundles={"default": bundle}, **overrides)  # type: ignore[arg-type]


def options(mapping: str | None = None, event_time: datetime | None = T0) -> BatchOptions:
    return BatchOptions.build(None, mapping, event_time, None, None)


def audit(files: Sequence[Path], sink: Warehouse, mapping: str | None = None):  # type: ignore[no-untyped-def]
    return run_batch(settings(), files, options(mapping), sink=sink)


def all_queries(store: Warehouse) -> dict[str, object]:
    """Every named query's rows; ``cost`` without its latency column, which measures the run
    (a re-run's batches replace the old ones with their own latency)."""
    results = {}
    for name in NAMED_QUERIES:
        result = run_named(store.client, store.database, name)
        keep = [i for i, c in enumerate(result.columns) if c != "mean_latency_ms"]
        results[name] = [tuple(row[i] for i in keep) for row in result.rows]
    return results


def test_example_log_end_to_end(warehouse: Warehouse) -> None:
    report = audit([EXAMPLE_LOG], warehouse)
    lines = sum(1 for line in EXAMPLE_LOG.read_bytes().splitlines() if line.strip())
    assert report.records == lines
    assert report.failures == [] and report.failed == 0
    assert report.events == lines
    assert report.refusals + report.non_refusals == report.events
    assert report.non_refusals > 0  # the log holds some compliant answers on purpose
    assert warehouse.count_events() == report.events
    per_log = warehouse.assessment_counts_per_log_id()
    assert len(per_log) == report.refusals == len(report.assessments)
    assert set(per_log.values()) == {1}
    summary = report.summary()
    assert summary.total_refusals == report.refusals
    assert sum(summary.categorization.values()) == report.refusals
    # Redaction happened before storage: no raw e-mail address reaches the warehouse.
    rows = warehouse.client.query(
        f"SELECT count() FROM `{warehouse.database}`.refusal_events FINAL "
        "WHERE match(request, '[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\\\.[a-z]{2,}')"
    ).result_rows
    assert rows[0][0] == 0
    assert run_named(warehouse.client, warehouse.database, "false_positive_rate").rows


def test_rerun_over_real_logs_changes_no_query_result(
    warehouse: Warehouse, shared_data: Path
) -> None:
    xstest = sorted((shared_data / "xstest").glob("xstest_v2_completions_*.csv"))
    coconot = shared_data / "coconot" / "coconot_refusals.jsonl"
    first_x = audit(xstest, warehouse)
    first_c = audit([coconot], warehouse, COCONOT_MAP)
    before = all_queries(warehouse)
    events_before = warehouse.count_events()
    second_x = audit(xstest, warehouse)
    second_c = audit([coconot], warehouse, COCONOT_MAP)
    assert all_queries(warehouse) == before
    assert warehouse.count_events() == events_before == 900 + first_c.events
    assert first_x.records == 900 and first_x.events == 900
    # Every CoCoNot record is stored or dead-lettered with its reason; nothing is lost.
    assert first_c.records == 800 and first_c.events + first_c.rejected == 800
    kept = {a.log_id for r in (first_x, first_c) for a in r.assessments}
    per_log = warehouse.assessment_counts_per_log_id()
    assert set(per_log) == kept
    assert set(per_log.values()) == {1}
    # the second run finds every event stored and audited with this configuration already:
    # nothing is audited, batched or written again
    assert second_x.identical_copies == second_x.records == 900
    assert second_x.assessments == [] and second_x.batches == 0
    assert second_c.identical_copies == first_c.events and second_c.batches == 0


def test_malformed_records_are_dead_lettered_and_the_rest_audited(warehouse: Warehouse) -> None:
    report = audit([MALFORMED], warehouse)
    assert report.rejected >= 10
    assert report.identical_copies == 1  # line 18 repeats line 1 byte for byte
    assert report.duplicates == 0
    assert report.events >= 3
    assert report.events + report.rejected + report.identical_copies == report.records
    stored = warehouse.dead_letters(limit=1000)
    assert len(stored) == report.rejected
    codes = {row["reason_code"] for row in stored}
    assert {"not_json", "missing_log_id", "bad_timestamp", "oversized", "encoding"} <= codes
    assert all(row["source"] == str(MALFORMED) and row["location"].startswith("line ")
               for row in stored)
    assert all(row["raw"] for row in stored)
    assert warehouse.count_events() == report.events
    # Running it again stores every dead letter once.
    audit([MALFORMED], warehouse)
    assert len(warehouse.dead_letters(limit=1000)) == len(stored)


class BrokenEngine:
    """An engine that fails or lies, to exercise the pipeline's failure paths."""

    name = "broken"
    model = "none"
    version = "1"
    prompt_version = "none"

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.inner = LocalEngine()

    async def audit(self, events: Sequence[RefusalEvent], bundle: PolicyBundle) -> EngineOutput:
        if self.mode == "raise":
            raise EngineError("upstream timed out")
        out = await self.inner.audit(events, bundle)
        items = list(out.result.individual_assessments)
        items[0] = items[0].model_copy(update={"log_id": "not-in-batch"})
        bad = AuditResult(audit_summary=out.result.audit_summary, individual_assessments=items)
        return EngineOutput(result=bad)


@pytest.mark.parametrize(("mode", "code"), [("raise", "engine_error"), ("lie", "invalid_result")])
def test_failed_batches_become_dead_letters(warehouse: Warehouse, mode: str, code: str) -> None:
    import asyncio

    cfg = settings(batch_max_events=10)
    pipeline: AuditPipeline = build_pipeline(cfg, warehouse)
    pipeline.engine = BrokenEngine(mode)
    source = file_source(EXAMPLE_LOG, options(), cfg)
    report = asyncio.run(pipeline.run([source]))
    assert report.assessments == []
    assert report.failed_batches == report.batches > 0
    assert report.failed_events == report.refusals
    letters = warehouse.dead_letters(limit=1000)
    assert len(letters) == report.batches
    assert {row["reason_code"] for row in letters} == {code}
    assert {row["stage"] for row in letters} == {"audit"}
    # the events themselves are stored, so the batch can be re-audited later
    assert warehouse.count_events() == report.events
