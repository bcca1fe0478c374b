"""The ``openai`` question engine and judge on hand-written answers at the bounds (break9,
issue 27), through the fake OpenAI-compatible server as llama.cpp and as OpenAI: question
texts of 9/10/300/301 characters (unicode), notes of 2/3 and 9/10/400/401 characters, one to
five questions, empty strings, a NUL, an extra field; verdicts with no, duplicated or every
reason code, explanations of 800/801 characters. The flow must end in a state (asking or
escalated), never raise, with the contract's verdict on the schema (``QuestionSet``,
``JudgeAnswer``), and whatever the grammar schema admits the contract accepts."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import fake_openai_server
import jsonschema
import pytest
from fake_openai_server import FakeOpenAIServer, content
from pydantic import ValidationError
from test_clarification_judge import REQUEST, T0, Router
from test_clarification_openai import GOOD, q

from inference.judge import OpenAIJudge
from inference.questions import OpenAIQuestionEngine
from processors.clarification.flow import Clarifier
from processors.clarification.judge import (
    JUDGE_GRAMMAR_SCHEMA,
    JUDGE_SCHEMA_NAME,
    JudgeAnswer,
)
from processors.clarification.local_questions import LocalQuestionEngine
from processors.clarification.question_harness import QUESTIONS_GRAMMAR_SCHEMA
from processors.engines.local import LocalEngine
from schemas.clarification import RULE_REASONS, EscalationReason, Outcome, QuestionSet
from schemas.policy import PolicyBundle

fake_openai = fake_openai_server.fake_openai


def _text(n: int) -> str:
    """A question of exactly ``n`` characters (unicode), ending in a question mark."""
    return ("Quel poème veux-tu, pour qui" + " ü" * n)[: n - 1] + "?"


def _set(**change: Any) -> dict[str, Any]:
    first = {**q("What is the poem for, and who will read it?"), **change}
    return {"questions": [first, GOOD[1]]}


QUESTIONS: dict[str, Any] = {
    "text-9": _set(question_text=_text(9)),
    "text-10": _set(question_text=_text(10)),
    "text-300": _set(question_text=_text(300)),
    "text-301": _set(question_text=_text(301)),
    "target-2": _set(target_ambiguity="ab"),
    "target-3": _set(target_ambiguity="abc"),
    "guardrail-9": _set(safety_guardrail="x" * 9),
    "guardrail-400": _set(safety_guardrail="é" * 400),
    "guardrail-401": _set(safety_guardrail="é" * 401),
    "one": {"questions": GOOD[:1]},
    "four": {"questions": GOOD * 2},
    "five": {"questions": [*GOOD * 2, GOOD[0]]},
    "empty-text": _set(question_text=""),
    "nul": _set(question_text="What is the poem\u0000 for?"),
    "extra-field": _set(priority=1),
    "not-a-list": {"questions": GOOD[0]},
}


def _accepts(model: Any, data: Any) -> bool:
    try:
        model.model_validate_json(json.dumps(data))
    except ValidationError:
        return False
    return True


def _open(server: FakeOpenAIServer, bundle: PolicyBundle, kind: str, judge: bool) -> Any:
    client = server.client(api_key="sk-test-BOUNDS-0123456789")
    questions: Any = (
        LocalQuestionEngine() if judge else OpenAIQuestionEngine(client, "q", server=kind)
    )
    judged = OpenAIJudge(client, "j", server=kind) if judge else None
    clarifier = Clarifier(LocalEngine(), questions, {"default": bundle}, judged)

    async def go() -> Any:
        try:
            return await clarifier.open(REQUEST, T0)
        finally:
            await client.close()

    return asyncio.run(go())


@pytest.mark.parametrize("kind", ["llama.cpp", "openai"])
@pytest.mark.parametrize("case", list(QUESTIONS))
def test_a_question_set_at_the_bounds_ends_in_a_state_with_the_contracts_verdict(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle, case: str, kind: str
) -> None:
    data = QUESTIONS[case]
    fake_openai.script(content(json.dumps(data)), content(json.dumps(data)))
    state = _open(fake_openai, example_bundle, kind, judge=False).state  # never raises
    accepted = _accepts(QuestionSet, data)
    assert state.outcome in (Outcome.asking, Outcome.escalated)
    invalid = state.escalation_reason == EscalationReason.invalid_questions
    assert invalid == (not accepted), (state.outcome, state.escalation_reason)
    if jsonschema.Draft202012Validator(QUESTIONS_GRAMMAR_SCHEMA).is_valid(data):
        assert accepted, case


R = list(RULE_REASONS)
VERDICTS: dict[str, Any] = {
    "pass": {"verdict": "pass", "reasons": [], "explanation": "Open questions."},
    "pass-with-reason": {"verdict": "pass", "reasons": R[:1], "explanation": "Open."},
    "reject-no-reason": {"verdict": "reject", "reasons": [], "explanation": "Leading."},
    "reject-duplicate": {"verdict": "reject", "reasons": [R[0], R[0]], "explanation": "x"},
    "reject-every": {"verdict": "reject", "reasons": R, "explanation": "All of them."},
    "reject-every-and-one": {"verdict": "reject", "reasons": [*R, R[0]], "explanation": "x"},
    "explanation-800": {"verdict": "pass", "reasons": [], "explanation": "é" * 800},
    "explanation-801": {"verdict": "pass", "reasons": [], "explanation": "é" * 801},
    "explanation-empty": {"verdict": "pass", "reasons": [], "explanation": ""},
    "unknown-verdict": {"verdict": "maybe", "reasons": [], "explanation": "Unsure."},
}


@pytest.mark.parametrize("kind", ["llama.cpp", "openai"])
@pytest.mark.parametrize("case", list(VERDICTS))
def test_a_verdict_at_the_bounds_ends_in_a_state_with_the_contracts_verdict(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle, case: str, kind: str
) -> None:
    router = Router()
    fake_openai.fallback = router
    data = VERDICTS[case]
    router.queues[JUDGE_SCHEMA_NAME].extend([content(json.dumps(data))] * 2)
    state = _open(fake_openai, example_bundle, kind, judge=True).state  # never raises
    accepted = _accepts(JudgeAnswer, data)
    assert state.judge is not None
    assert (state.judge.verdict == "failed") == (not accepted), state.judge
    if accepted:
        assert state.judge.verdict == data["verdict"]
        assert list(state.judge.reasons) == data["reasons"]
    if jsonschema.Draft202012Validator(JUDGE_GRAMMAR_SCHEMA).is_valid(data):
        # the verdict-reasons rule (reject: some, pass: none) is not in the schema
        assert accepted or case in ("reject-no-reason", "pass-with-reason"), case
