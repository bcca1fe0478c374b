"""The openai engine in the shared pipeline: stored provenance and usage, unresolved events
dead-lettered, the fake OpenAI-compatible server on loopback standing in for the LLM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fake_openai_server
import pytest
from fake_openai_server import FakeOpenAIServer, answer_for, mutated

from refusal_audit.audit.batch import BatchOptions, run_batch
from refusal_audit.config import Settings
from warehouse import Warehouse

fake_openai = fake_openai_server.fake_openai  # the fixture: a fake server per test

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"


def settings(server: FakeOpenAIServer, **overrides: Any) -> Settings:
    return fake_openai_server.settings_for(server, **overrides)


def audit(cfg: Settings, sink: Warehouse) -> Any:
    return run_batch(
        cfg, [EXAMPLE_LOG], BatchOptions.build(None, None, None, None, None), sink=sink
    )


def test_openai_is_the_default_engine_once_an_endpoint_is_set(
    fake_openai: FakeOpenAIServer, warehouse: Warehouse
) -> None:
    cfg = settings(fake_openai)
    assert cfg.resolved_engine == "openai"
    report = audit(cfg, warehouse)
    assert report.failed == 0 and report.refusals == len(report.assessments) > 0
    rows = warehouse.current_assessments()
    assert {r["engine"] for r in rows} == {"openai"}
    assert len({r["prompt_version"] for r in rows}) == 1 and rows[0]["prompt_version"] != "none"
    usage = warehouse.client.query(
        f"SELECT sum(prompt_tokens), sum(completion_tokens), count() "
        f"FROM `{warehouse.database}`.audit_batches FINAL"
    ).result_rows[0]
    assert usage[0] > 0 and usage[1] > 0 and usage[2] == report.batches
    assert all(r.headers.get("authorization") for r in fake_openai.requests)


def test_events_the_model_keeps_getting_wrong_are_dead_lettered(
    fake_openai: FakeOpenAIServer, warehouse: Warehouse
) -> None:
    victims: set[str] = set()

    def drop_first(answer: dict[str, Any], log_ids: list[str]) -> dict[str, Any]:
        if not victims:
            victims.add(log_ids[0])
        keep = [i for i in log_ids if i not in victims]
        return answer_for(keep)

    fake_openai.fallback = mutated(drop_first)
    report = audit(settings(fake_openai), warehouse)
    (victim,) = victims
    assert report.failed_events == 1
    assert victim not in {a.log_id for a in report.assessments}
    letters = [d for d in warehouse.dead_letters(limit=100) if d["log_id"] == victim]
    assert len(letters) == 1 and letters[0]["stage"] == "audit"
    assert b"raw_output" in letters[0]["raw"] and b"prompt_version" in letters[0]["raw"]
    assert set(warehouse.assessment_counts_per_log_id()) == {a.log_id for a in report.assessments}


def test_query_cost_reports_tokens_and_estimated_cost(
    fake_openai: FakeOpenAIServer, warehouse: Warehouse
) -> None:
    from refusal_audit.audit.settings import ModelPrice
    from warehouse.queries import run_named, with_costs

    cfg = settings(fake_openai)
    report = audit(cfg, warehouse)
    result = with_costs(
        run_named(warehouse.client, warehouse.database, "cost"),
        {cfg.openai_model: ModelPrice(input=2.0, cached_input=0.5, output=8.0)},
    )
    (row,) = [dict(zip(result.columns, r, strict=True)) for r in result.rows]
    assert row["engine"] == "openai" and row["events"] == len(report.assessments)
    expected = (
        (row["prompt_tokens"] - row["cached_tokens"]) * 2.0
        + row["cached_tokens"] * 0.5
        + row["completion_tokens"] * 8.0
    ) / 1e6
    assert row["estimated_cost_usd"] == pytest.approx(expected)
    assert row["cost_per_1k_events_usd"] == pytest.approx(1000 * expected / row["events"])
    unpriced = with_costs(run_named(warehouse.client, warehouse.database, "cost"), {})
    assert unpriced.rows[0][-2:] == (None, None)


def test_batches_fit_the_models_context_window(
    fake_openai: FakeOpenAIServer, warehouse: Warehouse
) -> None:
    from inference.audit_engine import OpenAIEngine
    from refusal_audit.audit.batch import build_pipeline

    roomy = build_pipeline(settings(fake_openai), warehouse)
    tight = build_pipeline(
        settings(fake_openai, openai_context_window=9_000, openai_max_output_tokens=1_000),
        warehouse,
    )
    assert isinstance(tight.engine, OpenAIEngine)
    bundle = tight.bundles["default"]
    assert tight._batcher.token_budget == tight.engine.event_token_budget(bundle, 20) < 6000
    assert roomy._batcher.token_budget == 6000


def test_reaudit_recovers_batches_that_failed_during_an_outage(
    fake_openai: FakeOpenAIServer, warehouse: Warehouse
) -> None:
    from fake_openai_server import status

    from refusal_audit.audit.reaudit import run_reaudit

    cfg = settings(fake_openai)
    fake_openai.fallback = status(503)
    outage = audit(cfg, warehouse)
    assert outage.assessments == [] and outage.failed_batches == outage.batches > 0
    assert warehouse.assessment_counts_per_log_id() == {}

    fake_openai.fallback = fake_openai_server.valid()
    letters, report = run_reaudit(cfg, warehouse, None, None, [])
    assert letters == outage.batches
    assert report.failed == 0 and len(report.assessments) == outage.refusals
    counts = warehouse.assessment_counts_per_log_id()
    assert len(counts) == outage.refusals and set(counts.values()) == {1}


def _unknown_category(answer: dict[str, Any], log_ids: list[str]) -> dict[str, Any]:
    return answer_for(log_ids, category="made_up_category")


def _wrong_counts(answer: dict[str, Any], log_ids: list[str]) -> dict[str, Any]:
    wrong = answer_for(log_ids)
    wrong["audit_summary"]["total_refusals"] = 999
    wrong["audit_summary"]["estimated_false_positives"] = 42
    return wrong


@pytest.mark.parametrize(
    ("behaviour", "reason_code"),
    [
        (fake_openai_server.invalid_json, "invalid_output"),
        (lambda: mutated(_unknown_category), "invalid_output"),
        (fake_openai_server.refusal, "model_refusal"),
        (fake_openai_server.length, "output_truncated"),
        (lambda: fake_openai_server.slow(2.0), "engine_error"),
        (lambda: fake_openai_server.raw_reply(b""), "engine_error"),
        (
            lambda: fake_openai_server.raw_reply(b'{"id":"x","choices":[{"index":0,"mess'),
            "engine_error",
        ),
    ],
    ids=[
        "invalid-json",
        "unknown-category",
        "model-refusal",
        "length",
        "timeout",
        "empty-200",
        "truncated-200",
    ],
)
def test_each_failure_ends_as_dead_letters_in_the_warehouse(
    fake_openai: FakeOpenAIServer, warehouse: Warehouse, behaviour: Any, reason_code: str
) -> None:
    fake_openai.fallback = behaviour()
    cfg = settings(fake_openai, openai_timeout_seconds=0.5, batch_max_events=4)
    small = REPO / "tests" / "fixtures" / "small_refusals.jsonl"
    report = run_batch(
        cfg, [small], BatchOptions.build(None, None, None, None, None), sink=warehouse
    )
    assert report.assessments == [] and report.failed == report.refusals > 0
    letters = warehouse.dead_letters(limit=100)
    assert {d["reason_code"] for d in letters} == {reason_code}
    assert {d["stage"] for d in letters} == {"audit"}
    assert warehouse.assessment_counts_per_log_id() == {}
    assert warehouse.count_events() == report.events  # the events themselves are kept


def test_inconsistent_summary_counts_are_recomputed(
    fake_openai: FakeOpenAIServer, warehouse: Warehouse
) -> None:
    fake_openai.fallback = mutated(_wrong_counts)
    report = audit(settings(fake_openai), warehouse)
    assert report.failed == 0
    for batch in report.batch_records:
        assert batch.summary.total_refusals == len(batch.log_ids)
        assert batch.summary.estimated_false_positives == 0


def test_a_malformed_usage_block_is_ignored(
    fake_openai: FakeOpenAIServer, warehouse: Warehouse
) -> None:
    from fake_openai_server import RecordedRequest, Reply

    inner = fake_openai_server.valid()

    def weird_usage(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        reply = inner(request, server)
        reply.body["usage"] = {
            "prompt_tokens": "x",
            "completion_tokens": None,
            "total_tokens": -1,
            "prompt_tokens_details": None,
        }
        return reply

    fake_openai.fallback = weird_usage
    report = audit(settings(fake_openai), warehouse)
    assert report.failed == 0 and len(report.assessments) == report.refusals


def test_an_echoed_api_key_is_never_stored(
    fake_openai: FakeOpenAIServer, warehouse: Warehouse
) -> None:
    def leak(answer: dict[str, Any], log_ids: list[str]) -> dict[str, Any]:
        out = answer_for(log_ids)
        out["individual_assessments"][0]["assessment_rationale"] = (
            "auth was Bearer sk-test-not-a-real-key"
        )
        return out

    fake_openai.fallback = mutated(leak)
    report = audit(settings(fake_openai), warehouse)
    assert report.failed == 0
    leaked = warehouse.client.query(
        f"SELECT count() FROM `{warehouse.database}`.assessments "
        "WHERE position(assessment_rationale, 'sk-test-not-a-real-key') > 0"
    ).result_rows[0][0]
    assert leaked == 0
    assert any("Bearer ***" in a.assessment_rationale for a in report.assessments)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_batches_are_audited_concurrently_up_to_max_concurrency(
    fake_openai: FakeOpenAIServer, warehouse: Warehouse, concurrency: int
) -> None:
    from fake_openai_server import slow

    fake_openai.fallback = slow(0.3)
    cfg = settings(fake_openai, batch_max_events=5, openai_max_concurrency=concurrency)
    report = audit(cfg, warehouse)
    assert report.failed == 0 and report.batches >= 2 * concurrency
    # the pipeline keeps max_concurrency batches in flight, never more
    assert fake_openai.max_in_flight == concurrency
    assert len(fake_openai.requests) == report.batches
    stored = {r["log_id"] for r in warehouse.current_assessments()}
    assert stored == {a.log_id for a in report.assessments} and len(stored) == report.refusals
