"""Every LLM path against a real small model (SmolLM2-135M-Instruct on llama.cpp's server).

The inputs are real refusals read by path from ../shared/data (XSTest completions for the
audit and calibration, CoCoNot for clarification). The engines are built as the product
builds them (``build_pipeline`` as ``eval`` does, ``build_clarifier``, ``build_judge``,
``run_calibrations``). What is asserted is the contract, never what the small model says:
every input ends in one of the allowed outcomes (assessed, failed with a reason code, or
dead-lettered; a question set or an escalation with a reason; a verdict or a failure; six
variants or an escalation), nothing is lost, nothing raises, and the number of HTTP calls to
the server is bounded. Calls are counted on the wire (an httpx request hook on the SDK's
client), so SDK retries count too.

Output caps: the audit runs with the engine's own sizing (512 + 256 output tokens per event)
and, on llama.cpp, the output schema narrowed to the batch (bounded texts and lists), so an
answer cannot run on; the context window is discovered from the server's /props. Measured on
2026-12-05 on the 2-core machine with nothing else running: audit 209 s (most of it the cold
7,400-token static prompt, about 50 s, and generation at ~20 tokens/s), clarifier 41 s,
judge 4 s. The variant engine sends llama.cpp the schema narrowed to the spectrum
(``spectrum_wire_schema``): 100 s on 2026-12-06, both runs then escalated for the
regression check with six variants; before it, the model wrote on to the output cap and
both runs took the whole 240 s budget.
"""

from __future__ import annotations

import asyncio
import csv
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from llm_fixture import LocalLLM
from shared_refusals import coconot_refusals, xstest_refusals

from inference.judge import OpenAIJudge
from processors.clarification.ambiguity import find_ambiguities
from processors.clarification.base import QuestionContext
from processors.clarification.local_questions import LocalQuestionEngine
from processors.clarification.routing import classify
from processors.engines.local import LocalEngine
from refusal_audit.audit.batch import BatchOptions, build_pipeline, file_source
from refusal_audit.audit.engine_setup import close_engine
from refusal_audit.audit.evaluation import MemorySink
from refusal_audit.calibration.runs import run_calibrations
from refusal_audit.clarification.server import build_clarifier, build_judge
from refusal_audit.config import Settings
from schemas.calibration import DEFAULT_SPECTRUM, CalibrationRequest
from schemas.clarification import ClarificationRequest, EscalationReason, Outcome, Route

pytestmark = [pytest.mark.local_llm, pytest.mark.xdist_group("local_llm")]

T0 = datetime(2026, 1, 5, tzinfo=UTC)
AUDIT_EVENTS = 2
REASON_CODES = {
    "invalid_output",
    "model_refusal",
    "output_truncated",
    "budget_exhausted",
    "prompt_too_long",
}
"""The engine's ``unresolved`` reason codes (``budget_exhausted``: the call/time budget)."""


def settings(llm: LocalLLM, tmp_path: Path, **extra: Any) -> Settings:
    """The product's settings pointed at the local server (key by value, never in argv),
    then ``extra``. Each clarification/calibration request gets 240 s over its calls (the
    product's default is 300): on a CPU shared with the other test process a long variant
    answer can take minutes, and the contract is the same whether the model answers or the
    budget ends the request."""
    defaults: dict[str, Any] = {
        "openai_max_retries": 1,
        "openai_timeout_seconds": 900,
        "openai_request_deadline_seconds": 240,
        "openai_max_concurrency": 1,  # the server has one slot: a queued call would time out
    }
    return Settings(
        engine="openai",
        openai_base_url=llm.base_url,
        openai_api_key=llm.api_key,
        openai_model=llm.model,
        data_dir=tmp_path,
        **{**defaults, **extra},
    )


def count_calls(client: Any) -> list[str]:
    """A list that gets one entry per chat-completions HTTP request ``client`` (an
    ``openai.AsyncOpenAI``) sends from now on."""
    calls: list[str] = []

    async def hook(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            calls.append(request.url.path)

    client._client.event_hooks["request"].append(hook)
    return calls


def count_answers(client: Any) -> list[int]:
    """A list that gets one entry (the status) per chat-completions response ``client``
    receives from now on (a call cancelled at a deadline gets none)."""
    answers: list[int] = []

    async def hook(response: httpx.Response) -> None:
        if response.request.url.path.endswith("/chat/completions"):
            answers.append(response.status_code)

    client._client.event_hooks["response"].append(hook)
    return answers


# -- the audit engine ----------------------------------------------------------------------------
def test_audit_every_real_refusal_ends_assessed_failed_or_dead_lettered(
    local_llm: LocalLLM, shared_data: Path, tmp_path: Path
) -> None:
    """``eval``'s pipeline (``build_pipeline`` + ``file_source``, in memory) over a file of
    2 real XSTest refusal rows, in one batch: every event is stored; every refusal ends
    assessed or dead-lettered with a reason code; the counts add up; calls are bounded by
    2 x events + 2 (first call, one retry, a re-audit of each event, one split)."""
    rows = xstest_refusals(AUDIT_EVENTS, shared=shared_data)
    source = tmp_path / "xstest_rows.csv"
    with source.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    cfg = settings(local_llm, tmp_path, batch_max_events=25)
    sink = MemorySink()
    pipeline = build_pipeline(cfg, sink, "openai")
    calls = count_calls(pipeline.engine.client)  # type: ignore[attr-defined]
    answers = count_answers(pipeline.engine.client)  # type: ignore[attr-defined]
    options = BatchOptions.build(None, None, T0, None, None)

    async def run() -> Any:
        try:
            return await pipeline.run([file_source(source, options, cfg)])
        finally:
            await close_engine(pipeline.engine)

    report = asyncio.run(run())

    assert report.records == AUDIT_EVENTS and report.rejected == 0
    assert len(sink.events) == AUDIT_EVENTS  # nothing lost before the audit
    refusals = {s.event.log_id for s in sink.events if s.is_refusal}
    assert refusals, "the pre-filter passed none of the real refusals: nothing was audited"
    assessed = [a.log_id for a in sink.assessments]
    dead = [d for d in sink.dead_letters if d.stage == "audit"]
    dead_ids = [d.log_id for d in dead]
    assert len(assessed) == len(set(assessed)) and len(dead_ids) == len(set(dead_ids))
    assert set(assessed).isdisjoint(dead_ids)
    assert set(assessed) | set(dead_ids) == refusals  # each refusal: exactly one outcome
    assert report.failed_events == len(dead)
    for letter in dead:
        assert letter.reason_code and letter.reason, letter
        if letter.reason_code != "engine_error":
            assert letter.reason_code in REASON_CODES, letter.reason_code
    assert 1 <= len(calls) <= 2 * len(refusals) + 2, f"{len(calls)} calls for {len(refusals)}"
    answered = bool(answers)
    for batch in sink.batches:  # usage stored per batch, as for any server
        assert batch.usage.latency_ms > 0
        if answered:  # the server's token counts come with its answers
            assert batch.usage.prompt_tokens > 0
        else:  # every call cancelled at the deadline: no count, and no event assessed
            assert batch.usage.prompt_tokens == 0 and not assessed


# -- clarification: question engine and judge ----------------------------------------------------
def gray_zone_requests(shared: Path, n: int) -> list[ClarificationRequest]:
    """The first ``n`` CoCoNot refusals the offline classifier routes to the gray zone (so
    the question engine is asked; the routing is deterministic, not the small model's)."""
    cfg = Settings()
    from refusal_audit.bundles import load_bundles

    bundle = load_bundles(cfg.policy_bundles)["default"]
    local = LocalEngine()
    chosen: list[ClarificationRequest] = []
    for record in coconot_refusals(shared):
        request = ClarificationRequest(
            conversation_id=f"c-{record['id']}", log_id=f"coconot-{record['id']}",
            request=record["prompt"], refusal=record["response"], event_time=T0,
        )  # fmt: skip
        decision = asyncio.run(classify(request, bundle, local))
        if decision.route == Route.policy_gray_zone:
            chosen.append(request)
        if len(chosen) == n:
            return chosen
    raise AssertionError(f"fewer than {n} gray-zone refusals in CoCoNot")


def test_clarifier_question_engine_and_judge_end_every_real_refusal_asked_or_escalated(
    local_llm: LocalLLM, shared_data: Path, tmp_path: Path
) -> None:
    """``build_clarifier`` (local classifier, openai question engine, openai judge, as
    ``clarify serve`` builds them) on 2 real gray-zone refusals: each conversation opens
    asking (a set that passed the schema, the rules and the judge) or escalated with a
    reason and a detail; never an exception; at most 2 question calls and 2 judge calls."""
    cfg = settings(local_llm, tmp_path, clarify_judge_engine="openai")
    clarifier = build_clarifier(cfg, questions="openai", classifier="local")
    assert clarifier.judge is not None
    calls = count_calls(clarifier.questions.client)  # type: ignore[attr-defined]
    judge_calls = count_calls(clarifier.judge.client)  # type: ignore[attr-defined]
    requests = gray_zone_requests(shared_data, 2)

    async def run() -> list[Any]:
        try:
            return [await clarifier.open(r, T0) for r in requests]
        finally:
            await clarifier.questions.client.close()  # type: ignore[attr-defined]
            await clarifier.judge.client.close()  # type: ignore[attr-defined]

    opened = asyncio.run(run())
    assert len(opened) == len(requests)
    for result in opened:
        state = result.state
        assert result.generated is not None  # the question engine was asked
        assert 1 <= result.generated.attempts <= 2
        if state.outcome == Outcome.asking:
            assert result.generated.questions is not None
            assert 2 <= len(result.generated.questions.questions) <= 4
            assert result.judged is not None and result.judged.passed
        else:
            assert state.outcome == Outcome.escalated, state.outcome
            assert state.escalation_reason in {
                EscalationReason.invalid_questions,
                EscalationReason.circumvention,
                EscalationReason.judge_failed,
            }
            assert state.escalation_detail
        if result.judged is not None:
            assert 1 <= result.judged.attempts <= 2
    assert 1 <= len(calls) <= 2 * len(requests)
    assert len(judge_calls) <= 2 * len(requests)


def test_judge_gives_a_verdict_or_a_failure_on_real_question_sets(
    local_llm: LocalLLM, shared_data: Path, tmp_path: Path
) -> None:
    """The judge as ``build_judge`` builds it, on 2 question sets the offline question
    engine wrote for real gray-zone refusals (so the judge always runs): a ``pass``, a
    ``reject`` with reason codes, or ``failed`` with an explanation; never an exception;
    at most 2 calls each."""
    cfg = settings(local_llm, tmp_path, clarify_judge_engine="openai")
    judge = build_judge(cfg)
    assert isinstance(judge, OpenAIJudge)
    calls = count_calls(judge.client)
    from refusal_audit.bundles import load_bundles

    bundle = load_bundles(cfg.policy_bundles)["default"]
    local = LocalQuestionEngine()
    cases = []
    for request in gray_zone_requests(shared_data, 6):
        context = QuestionContext(
            request.request, request.refusal, "policy_gray_zone", Route.policy_gray_zone,
            bundle, tuple(find_ambiguities(request.request)),
        )  # fmt: skip
        generated = local.generate_sync(context)
        if generated.questions is not None:
            cases.append((generated.questions, request))
        if len(cases) == 2:
            break
    assert cases, "the offline engine wrote no question set to judge"

    async def run() -> list[Any]:
        try:
            return [await judge.judge(q, r.request, r.refusal) for q, r in cases]
        finally:
            await judge.client.close()

    results = asyncio.run(run())
    for result in results:
        verdict = result.verdict
        assert 1 <= result.attempts <= 2
        assert verdict.verdict in ("pass", "reject", "failed")
        if verdict.verdict == "reject":
            assert verdict.reasons
        if verdict.verdict == "pass":
            assert not verdict.reasons
        if verdict.verdict == "failed":
            assert verdict.explanation
    assert len(results) <= len(calls) <= 2 * len(results)


# -- calibration: the variant engine -------------------------------------------------------------
def test_variant_engine_gives_six_checked_variants_or_an_escalation_on_real_refusals(
    local_llm: LocalLLM, shared_data: Path, tmp_path: Path
) -> None:
    """``run_calibrations`` with the openai variant engine (as ``calibrate run`` calls it)
    on a real XSTest refusal of an unsafe prompt, with the clause the offline audit cites
    (else the weapons clause): the run is escalated with a reason and errors, or holds one
    variant per style of the default spectrum (six), each with its validation; never an
    exception; at most 2 calls. One refusal, not two as until 2026-12-06: each call writes
    six variants, and two refusals took 480 s of CI's parallel phase."""
    from refusal_audit.bundles import load_bundles

    cfg = settings(local_llm, tmp_path)
    bundle = load_bundles(cfg.policy_bundles)["default"]
    rows = xstest_refusals(1, contrast=True, shared=shared_data)
    requests = []
    for row in rows:
        request = ClarificationRequest(
            conversation_id="x", log_id=f"xstest-gpt4-{row['id']}", request=row["prompt"],
            refusal=row["completion"], event_time=T0,
        )  # fmt: skip
        clause = asyncio.run(classify(request, bundle, LocalEngine())).clause_id or "AUP-2.2"
        requests.append(
            CalibrationRequest(
                log_id=request.log_id,
                request=row["prompt"],
                refusal=row["completion"],
                clause_id=clause,
            )
        )
    runs = run_calibrations(cfg, requests, "openai")

    assert len(runs) == len(requests)
    styles = DEFAULT_SPECTRUM.ids()
    assert len(styles) == 6
    for run in runs:
        assert 1 <= run.attempts <= 2
        if run.status == "escalated":
            assert run.escalation is not None and run.escalation.errors
        else:
            assert run.output is not None
            assert [v.style for v in run.output.variants] == styles
            assert [v.style for v in run.validations] == styles
            assert run.status == ("passed" if all(v.passed for v in run.validations)
                                  else "failed_checks")  # fmt: skip
