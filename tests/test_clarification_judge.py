"""The optional LLM circumvention judge against the fake OpenAI-compatible server: it runs only
after the deterministic rules passed, a pass surfaces the set, a reject or a failure
escalates it with the reasons, and a judge that is off is never asked."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any

import fake_openai_server
import pytest
from fake_openai_server import (
    Behaviour,
    FakeOpenAIServer,
    RecordedRequest,
    Reply,
    content,
    invalid_json,
    valid,
)
from test_clarification_openai import GOOD, REQUEST, T0

from inference.judge import OpenAIJudge
from inference.questions import OpenAIQuestionEngine
from processors.clarification.circumvention import REASON_CODES
from processors.clarification.flow import Clarifier, Opened
from processors.clarification.judge import (
    JUDGE_JSON_SCHEMA,
    JUDGE_SCHEMA_NAME,
    RETRY_CONSTRAINT,
)
from processors.clarification.local_questions import LocalQuestionEngine
from processors.clarification.question_harness import QUESTIONS_SCHEMA_NAME
from processors.clarification.trail import checks_of, judge_of, step_row
from processors.engines.local import LocalEngine
from prompts.clarification import JUDGE_PLACEHOLDERS, load_judge_template
from refusal_audit.clarification.server import build_judge
from refusal_audit.config import Settings
from schemas.clarification import (
    RULE_REASONS,
    EscalationReason,
    Outcome,
)
from schemas.policy import PolicyBundle

fake_openai = fake_openai_server.fake_openai

API_KEY = "sk-test-JUDGE-NEVER-LOG-0123456789"


def verdict(v: str, reasons: list[str], explanation: str = "Neutral, open questions.") -> Any:
    return content(json.dumps({"verdict": v, "reasons": reasons, "explanation": explanation}))


class Router:
    """Answers each task from its own queue, by the request's output schema name: the audit
    classifier (no json_schema name of ours) gets the fake's valid audit answer."""

    def __init__(self) -> None:
        self.queues: dict[str, deque[Behaviour]] = {
            JUDGE_SCHEMA_NAME: deque(),
            QUESTIONS_SCHEMA_NAME: deque(),
        }

    def __call__(self, request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        queue = self.queues.get(schema_name(request))
        if queue is None:
            return valid()(request, server)
        return queue.popleft()(request, server) if queue else content("{}")(request, server)


def schema_name(request: RecordedRequest) -> str:
    fmt = request.body.get("response_format") or {}
    return str((fmt.get("json_schema") or {}).get("name", ""))


def judge_requests(server: FakeOpenAIServer) -> list[RecordedRequest]:
    return [r for r in server.requests if schema_name(r) == JUDGE_SCHEMA_NAME]


def open_with(
    server: FakeOpenAIServer, bundle: PolicyBundle, judge: bool, openai_questions: bool = False
) -> Opened:
    client = server.client(api_key=API_KEY)
    questions: Any = (
        OpenAIQuestionEngine(client, "fake-questions")
        if openai_questions
        else LocalQuestionEngine()
    )
    judge_engine = OpenAIJudge(client, "fake-judge") if judge else None
    clarifier = Clarifier(LocalEngine(), questions, {"default": bundle}, judge_engine)

    async def go() -> Opened:
        try:
            return await clarifier.open(REQUEST, T0)
        finally:
            await client.close()

    return asyncio.run(go())


@pytest.fixture
def router(fake_openai: FakeOpenAIServer) -> Router:
    r = Router()
    fake_openai.fallback = r
    return r


def test_the_judge_prompt_and_schema_share_the_rules_vocabulary() -> None:
    prompt = load_judge_template()
    assert prompt.schema == JUDGE_JSON_SCHEMA
    assert JUDGE_JSON_SCHEMA["properties"]["reasons"]["items"]["enum"] == list(REASON_CODES)
    assert REASON_CODES == RULE_REASONS
    for code in REASON_CODES:
        assert code in prompt.system
    for name in JUDGE_PLACEHOLDERS:
        assert f"{{{{{name}}}}}" in prompt.user_template


def test_judge_passes_and_the_set_is_surfaced(
    fake_openai: FakeOpenAIServer, router: Router, example_bundle: PolicyBundle
) -> None:
    router.queues[JUDGE_SCHEMA_NAME].append(verdict("pass", []))
    opened = open_with(fake_openai, example_bundle, judge=True)
    state = opened.state
    assert state.outcome == Outcome.asking and state.rounds
    assert state.judge is not None and state.judge.verdict == "pass"
    assert state.judge.model == "fake-judge" and state.judge.prompt_version
    [call] = judge_requests(fake_openai)
    assert call.body["response_format"]["json_schema"]["schema"] == JUDGE_JSON_SCHEMA
    user = call.messages[1]["content"]
    for q in state.rounds[0].questions:  # the judge sees the questions the user would see
        assert q.question_text.replace("</", "<\\/") in user
    assert "Write a poem" in user
    row = step_row(state, T0)
    assert row["circumvention_judge"] == "passed" and row["circumvention"] == "passed"
    assert opened.judged is not None and opened.judged.attempts == 1


def test_judge_rejects_and_the_set_is_escalated_with_its_reasons(
    fake_openai: FakeOpenAIServer, router: Router, example_bundle: PolicyBundle
) -> None:
    router.queues[JUDGE_SCHEMA_NAME].append(
        verdict("reject", ["leading_question", "asks_method"], "Question 2 offers a purpose.")
    )
    state = open_with(fake_openai, example_bundle, judge=True).state
    assert state.outcome == Outcome.escalated
    assert state.escalation_reason == EscalationReason.circumvention
    assert state.rounds == [] and state.round == 0  # nothing surfaced
    assert state.judge is not None and state.judge.verdict == "reject"
    assert state.judge.reasons == ["leading_question", "asks_method"]
    assert state.escalation_detail is not None
    assert "leading_question" in state.escalation_detail
    assert "asks_method" in state.escalation_detail
    assert "offers a purpose" in state.escalation_detail
    assert len(judge_requests(fake_openai)) == 1  # a verdict is final: no retry
    row = step_row(state, T0)
    # the rules passed the set; the judge rejected it
    assert (row["validation"], row["circumvention"]) == ("valid", "passed")
    assert row["circumvention_judge"] == "rejected" and row["escalated"]


@pytest.mark.parametrize(
    "bad",
    [invalid_json(), verdict("reject", []), verdict("pass", ["not_a_code"])],
    ids=["invalid-json", "reject-without-reason", "unknown-code"],
)
def test_an_invalid_verdict_is_retried_once_then_escalated(
    fake_openai: FakeOpenAIServer, router: Router, example_bundle: PolicyBundle, bad: Any
) -> None:
    router.queues[JUDGE_SCHEMA_NAME].extend([bad, bad])
    opened = open_with(fake_openai, example_bundle, judge=True)
    state = opened.state
    calls = judge_requests(fake_openai)
    assert len(calls) == 2  # one retry, with the error and the stronger constraint
    retry = calls[1].messages
    assert [m["role"] for m in retry] == ["system", "user", "assistant", "user"]
    assert RETRY_CONSTRAINT in retry[3]["content"] and "rejected" in retry[3]["content"]
    assert state.outcome == Outcome.escalated and state.rounds == []
    assert state.escalation_reason == EscalationReason.judge_failed
    assert state.judge is not None and state.judge.verdict == "failed"
    assert judge_of(state) == "failed" and checks_of(state) == ("valid", "passed")
    assert opened.judged is not None and opened.judged.attempts == 2
    assert API_KEY not in (opened.judged.raw_output or "")


def test_an_invalid_verdict_then_a_valid_one_surfaces(
    fake_openai: FakeOpenAIServer, router: Router, example_bundle: PolicyBundle
) -> None:
    router.queues[JUDGE_SCHEMA_NAME].extend([invalid_json(), verdict("pass", [])])
    state = open_with(fake_openai, example_bundle, judge=True).state
    assert state.outcome == Outcome.asking
    assert state.judge is not None and state.judge.verdict == "pass"


def test_a_judge_api_failure_escalates_without_leaking_the_key(
    fake_openai: FakeOpenAIServer, router: Router, example_bundle: PolicyBundle
) -> None:
    router.queues[JUDGE_SCHEMA_NAME].append(fake_openai_server.echo_authorization())
    state = open_with(fake_openai, example_bundle, judge=True).state
    assert state.escalation_reason == EscalationReason.judge_failed and state.rounds == []
    assert API_KEY not in state.model_dump_json()


def test_the_judge_is_not_asked_when_the_rules_reject(
    fake_openai: FakeOpenAIServer, router: Router, example_bundle: PolicyBundle
) -> None:
    teaching = [GOOD[0], {**GOOD[1], "question_text": "You could ask for a birthday poem, right?"}]
    router.queues[QUESTIONS_SCHEMA_NAME].extend([content(json.dumps({"questions": teaching}))] * 2)
    state = open_with(fake_openai, example_bundle, judge=True, openai_questions=True).state
    assert state.escalation_reason == EscalationReason.circumvention
    assert judge_requests(fake_openai) == [] and state.judge is None
    assert judge_of(state) == "" and checks_of(state) == ("valid", "rejected")


def test_a_judge_that_is_off_is_never_asked(
    fake_openai: FakeOpenAIServer, router: Router, example_bundle: PolicyBundle
) -> None:
    router.queues[QUESTIONS_SCHEMA_NAME].append(content(json.dumps({"questions": GOOD})))
    state = open_with(fake_openai, example_bundle, judge=False, openai_questions=True).state
    assert state.outcome == Outcome.asking and state.judge is None
    assert len(fake_openai.requests) == 1  # the question engine only
    assert judge_requests(fake_openai) == []
    assert step_row(state, T0)["circumvention_judge"] == ""


def test_judge_settings(fake_openai: FakeOpenAIServer) -> None:
    base = {"openai_base_url": fake_openai.base_url, "openai_model": "m-audit"}
    assert Settings(**base).clarify_judge_engine == "off"
    assert build_judge(Settings(**base)) is None
    judge = build_judge(Settings(**base, clarify_judge_engine="openai"))
    assert isinstance(judge, OpenAIJudge) and judge.model == "m-audit"
    judge = build_judge(
        Settings(**base, clarify_judge_engine="openai", clarify_question_model="m-q",
                 clarify_judge_model="m-judge")
    )  # fmt: skip
    assert isinstance(judge, OpenAIJudge) and judge.model == "m-judge"
