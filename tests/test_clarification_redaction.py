"""Personal data in the clarification service: an e-mail address and a phone number in the
request, the refusal, an answer and a re-evaluation refusal never reach an LLM engine (the
classifier, the question engine, the judge: the fake server's request log) and are never
stored (state store, audit trail rows, the service's outputs)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fake_openai_server
import pytest
from fake_openai_server import FakeOpenAIServer, content
from test_clarification_judge import GOOD, Router, judge_requests, schema_name, verdict

from inference.audit_engine import OpenAIEngine
from inference.judge import OpenAIJudge
from inference.questions import OpenAIQuestionEngine
from processors.clarification.flow import Clarifier
from processors.clarification.judge import JUDGE_SCHEMA_NAME
from processors.clarification.question_harness import QUESTIONS_SCHEMA_NAME
from processors.clarification.trail import step_row
from processors.redaction import Redactor
from refusal_audit.audit.engine_setup import configured_redactor
from refusal_audit.clarification.service import ClarifyService, StepResult
from refusal_audit.clarification.store import SqliteStore
from refusal_audit.config import Settings
from schemas.clarification import (
    ClarificationAnswer,
    ClarificationRequest,
    ConversationState,
    EscalationReason,
    Outcome,
    ReevaluationOutcome,
)
from schemas.policy import PolicyBundle

fake_openai = fake_openai_server.fake_openai

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
REQUEST_EMAIL = "jane.doe@example.com"
REQUEST_PHONE = "(415) 555-0123"
ANSWER_EMAIL = "bob.smith@example.org"
ANSWER_PHONE = "+44 20 7946 0958"
PII = (REQUEST_EMAIL, REQUEST_PHONE, ANSWER_EMAIL, ANSWER_PHONE, "555-0123", "7946 0958")

REQUEST = ClarificationRequest(
    conversation_id="c-pii",
    log_id="l-pii",
    request=f"Write a poem for my mother Jane ({REQUEST_EMAIL}, {REQUEST_PHONE})",
    refusal=f"Could you tell me more about the poem for {REQUEST_EMAIL}?",
    event_time=T0,
)


def answer(round_: int) -> ClarificationAnswer:
    return ClarificationAnswer.model_validate_json(
        json.dumps(
            {"conversation_id": "c-pii", "round": round_, "answered_at": "2026-02-01T09:01:00Z",
             "answers": [
                 {"question_index": 0, "text": f"Her birthday; she reads mail at {ANSWER_EMAIL}"},
                 {"question_index": 1, "text": f"Four lines; text me at {ANSWER_PHONE}"},
             ]}
        )
    )  # fmt: skip


REFUSED_AGAIN = ReevaluationOutcome.model_validate_json(
    json.dumps(
        {"conversation_id": "c-pii", "round": 1, "outcome": "refused_again",
         "refusal": f"I can't write to {ANSWER_EMAIL}.", "decided_at": "2026-02-01T09:02:00Z"}
    )
)  # fmt: skip


def service_for(
    server: FakeOpenAIServer, bundle: PolicyBundle, store_path: Path, redactor: Redactor | None
) -> tuple[ClarifyService, list[ConversationState], Any]:
    client = server.client(api_key="sk-test-redaction-0123456789")
    clarifier = Clarifier(
        OpenAIEngine(client, "fake-classifier"),
        OpenAIQuestionEngine(client, "fake-questions"),
        {"default": bundle},
        OpenAIJudge(client, "fake-judge"),
    )
    stored: list[ConversationState] = []
    service = ClarifyService(
        clarifier, SqliteStore(store_path), clock=lambda: T0, on_change=stored.append,
        redactor=redactor,
    )  # fmt: skip
    return service, stored, client


def run_conversation(
    server: FakeOpenAIServer, bundle: PolicyBundle, tmp_path: Path, redactor: Redactor | None
) -> tuple[list[ConversationState], list[str], bytes]:
    router = Router()
    router.queues[QUESTIONS_SCHEMA_NAME].append(content(json.dumps({"questions": GOOD})))
    router.queues[JUDGE_SCHEMA_NAME].append(verdict("pass", []))
    server.fallback = router
    path = tmp_path / "clarify.sqlite3"
    service, stored, client = service_for(server, bundle, path, redactor)
    outputs: list[str] = []

    async def go() -> None:
        try:
            response, _ = await service.open(REQUEST)
            assert response.outcome == Outcome.asking, response
            outputs.append(response.model_dump_json())
            answered: StepResult = await service.answer("c-pii", answer(1))
            assert answered.clarified_request is not None
            outputs.append(json.dumps(answered.body()))
            # a redelivered answer is recognised as the same one (redaction is deterministic)
            again = await service.answer("c-pii", answer(1))
            assert again.body() == answered.body()
            escalated = await service.outcome("c-pii", REFUSED_AGAIN)
            assert escalated.escalation is not None
            outputs.append(json.dumps(escalated.body()))
            outputs.append(service.get("c-pii").model_dump_json())
        finally:
            await client.close()

    asyncio.run(go())
    service.store.close()
    return stored, outputs, path.read_bytes()


def test_personal_data_never_reaches_an_llm_nor_the_stored_state(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle, tmp_path: Path
) -> None:
    stored, outputs, store_bytes = run_conversation(
        fake_openai, example_bundle, tmp_path, Redactor()
    )
    # every engine was asked: the classifier, the question engine and the judge
    names = [schema_name(r) for r in fake_openai.requests]
    assert QUESTIONS_SCHEMA_NAME in names and JUDGE_SCHEMA_NAME in names
    assert len(names) == 3
    for request in fake_openai.requests:
        body = json.dumps(request.body)
        for value in PII:
            assert value not in body, (schema_name(request), value)
        assert "<EMAIL>" in body and "<PHONE>" in body  # what was there is still said
    judge_user = judge_requests(fake_openai)[0].messages[1]["content"]
    assert "<EMAIL>" in judge_user

    last = stored[-1]
    assert last.outcome == Outcome.escalated
    assert last.escalation_reason == EscalationReason.refused_again
    rows = [step_row(s, T0) for s in stored]
    assert [r["step"] for r in rows] == ["opened", "answered", "escalated"]
    for text in [json.dumps(r, default=str) for r in rows] + outputs:
        for value in PII:
            assert value not in text, value
    for value in PII:
        assert value.encode() not in store_bytes, value
    assert "<EMAIL>" in last.request and "<PHONE>" in last.request
    assert "<EMAIL>" in last.refusal
    assert last.rounds[0].answers[0].text == "Her birthday; she reads mail at <EMAIL>"
    assert last.rounds[0].answers[1].text == "Four lines; text me at <PHONE>"
    assert last.rounds[0].reevaluation_refusal == "I can't write to <EMAIL>."
    clarified = json.loads(outputs[1])["clarified_request"]
    assert clarified["request"] == last.request
    # the application puts its own copy back by round and question index
    assert [(a["round"], a["question_index"]) for a in clarified["answers"]] == [(1, 0), (1, 1)]


def test_redaction_off_keeps_the_texts(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle, tmp_path: Path
) -> None:
    stored, _, _ = run_conversation(fake_openai, example_bundle, tmp_path, None)
    assert REQUEST_EMAIL in stored[-1].request
    assert any(REQUEST_EMAIL in json.dumps(r.body) for r in fake_openai.requests)


@pytest.mark.parametrize(
    ("overrides", "email", "phone"),
    [({}, True, True), ({"redaction_kinds": ("email",)}, True, False),
     ({"redaction_enabled": False}, False, False)],
)  # fmt: skip
def test_the_service_redacts_with_the_audit_settings(
    overrides: dict[str, Any], email: bool, phone: bool
) -> None:
    redactor = configured_redactor(Settings(**overrides))
    text = f"mail {REQUEST_EMAIL} or call {REQUEST_PHONE}"
    out = redactor.redact(text).text if redactor is not None else text
    assert (REQUEST_EMAIL not in out) == email
    assert (REQUEST_PHONE not in out) == phone
