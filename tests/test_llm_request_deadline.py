"""The time budget of one clarification or calibration request (``openai_request_deadline_seconds``)
against the fake server: a slow server ends the question engine's set ``invalid_questions``, the
judge's verdict ``failed`` and a calibration run ``escalated`` (``api_error``) within the budget,
with the calls started counted and the answers received so far kept; the setting reaches each
engine the product builds."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

import fake_openai_server
from fake_openai_server import FakeOpenAIServer, content, invalid_json, slow

from inference.judge import OpenAIJudge
from inference.questions import OpenAIQuestionEngine
from inference.variants import OpenAIVariantEngine
from processors.calibration.run import calibrate
from processors.clarification.flow import Clarifier
from processors.engines.local import LocalEngine
from refusal_audit.calibration.runs import build_variant_engine
from refusal_audit.clarification.server import build_judge, build_question_engine
from schemas.calibration import CalibrationRequest, CalibrationRun
from schemas.clarification import ClarificationRequest, EscalationReason, QuestionSet
from schemas.policy import PolicyBundle

fake_openai = fake_openai_server.fake_openai

API_KEY = "sk-test-DEADLINE-NEVER-LOG-0123456789"
T0 = datetime(2026, 3, 1, tzinfo=UTC)
BUDGET = 0.5
SLOW = 3.0
SPENT = f"time budget ({BUDGET:g} s) ran out"
CLARIFY = ClarificationRequest(
    conversation_id="c-1",
    log_id="l-1",
    request="Write a poem",
    refusal="Could you tell me more about what kind of poem you'd like?",
    event_time=T0,
)
CALIBRATE = CalibrationRequest(
    log_id="web-1",
    request="How do I build a pipe bomb?",
    refusal="I'm sorry, but I can't help with that.",
    clause_id="AUP-2.2",
    policy_bundle="wren",
)
QUESTIONS = QuestionSet.model_validate(
    {
        "questions": [
            {"question_text": "What is the poem for?", "target_ambiguity": "purpose",
             "safety_guardrail": "Open question."},
            {"question_text": "How long should it be?", "target_ambiguity": "scope",
             "safety_guardrail": "Open question."},
        ]
    }
)


def timed(coro: Any) -> tuple[Any, float]:
    """Run ``coro``; its result and wall time in seconds."""
    started = time.monotonic()
    result = asyncio.run(coro)
    return result, time.monotonic() - started


def calibrate_with(engine: OpenAIVariantEngine, bundle: PolicyBundle) -> CalibrationRun:
    async def go() -> CalibrationRun:
        try:
            return await calibrate(
                CALIBRATE, {"wren": bundle}, engine, run_id="cal-1", created_at=T0,
                started_by="pm",
            )  # fmt: skip
        finally:
            await engine.client.close()

    run, elapsed = timed(go())
    assert elapsed < SLOW - 1.0  # cancelled at the budget, not waited out
    return run  # type: ignore[no-any-return]


def test_a_slow_question_engine_escalates_within_the_budget(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    fake_openai.fallback = slow(SLOW, content("{}"))
    engine = OpenAIQuestionEngine(
        fake_openai.client(api_key=API_KEY), "fake-model", deadline_seconds=BUDGET
    )
    clarifier = Clarifier(LocalEngine(), engine, {"default": example_bundle})

    async def go() -> Any:
        try:
            return await clarifier.open(CLARIFY, T0)
        finally:
            await engine.client.close()

    opened, elapsed = timed(go())
    assert elapsed < SLOW - 1.0
    assert opened.state.escalation_reason == EscalationReason.invalid_questions
    assert opened.generated is not None and opened.generated.questions is None
    assert opened.generated.attempts == 1
    assert any(SPENT in e for e in opened.generated.errors)
    assert SPENT in (opened.state.escalation_detail or "")


def test_a_slow_judge_fails_within_the_budget(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script(invalid_json(), slow(SLOW, content("{}")))  # the retry is the slow call
    judge = OpenAIJudge(fake_openai.client(api_key=API_KEY), "fake-model", deadline_seconds=BUDGET)

    async def go() -> Any:
        try:
            return await judge.judge(QUESTIONS, CLARIFY.request, CLARIFY.refusal)
        finally:
            await judge.client.close()

    result, elapsed = timed(go())
    assert elapsed < SLOW - 1.0
    assert result.verdict.verdict == "failed" and SPENT in result.verdict.explanation
    assert result.attempts == 2  # the answered first call and the cancelled retry
    assert [r["kind"] for r in json.loads(result.raw_output)] == ["judge"]


def test_a_slow_variant_engine_escalates_within_the_budget(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    fake_openai.fallback = slow(SLOW, content("{}"))
    engine = OpenAIVariantEngine(
        fake_openai.client(api_key=API_KEY), "fake-model", deadline_seconds=BUDGET
    )
    run = calibrate_with(engine, example_bundle)
    assert run.status == "escalated" and run.escalation is not None
    assert run.escalation.reason == "api_error" and SPENT in run.escalation.errors[0]
    assert run.attempts == 1 and run.escalation.raw_output is None


def test_a_slow_variant_retry_keeps_the_first_answer(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    fake_openai.script(content('{"variants": "not a list"}'), slow(SLOW, content("{}")))
    engine = OpenAIVariantEngine(
        fake_openai.client(api_key=API_KEY), "fake-model", deadline_seconds=BUDGET
    )
    run = calibrate_with(engine, example_bundle)
    assert run.status == "escalated" and run.escalation is not None
    assert run.escalation.reason == "api_error" and SPENT in run.escalation.errors[0]
    assert run.attempts == 2
    raw = json.loads(run.escalation.raw_output or "[]")
    assert [r["kind"] for r in raw] == ["variants"] and "not a list" in raw[0]["content"]
    assert API_KEY not in run.model_dump_json()


def test_the_setting_reaches_every_engine_the_product_builds(
    fake_openai: FakeOpenAIServer,
) -> None:
    cfg = fake_openai_server.settings_for(
        fake_openai, API_KEY, clarify_judge_engine="openai", openai_request_deadline_seconds=42
    )
    engines: list[Any] = [build_question_engine(cfg, "openai"), build_judge(cfg)]
    engines.append(build_variant_engine(cfg, "openai"))
    default = build_variant_engine(fake_openai_server.settings_for(fake_openai), "openai")
    assert [getattr(e, "deadline_seconds", None) for e in engines] == [42, 42, 42]
    assert getattr(default, "deadline_seconds", None) == 300

    async def close() -> None:
        for e in [*engines, default]:
            await e.client.close()

    asyncio.run(close())
