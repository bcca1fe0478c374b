"""The output schemas sent to llama.cpp (which compiles a schema into a decoding grammar):
the question set's and the verdict's carry the contract's bounds, so a small model cannot
fill a string to the output cap; every other server gets the shared strict-mode schema."""

from __future__ import annotations

from typing import Any

import jsonschema
import openai
import pytest
from pydantic import ValidationError

from inference.judge import OpenAIJudge
from inference.questions import OpenAIQuestionEngine
from processors.clarification.judge import JUDGE_GRAMMAR_SCHEMA, JUDGE_JSON_SCHEMA, JudgeAnswer
from processors.clarification.question_harness import (
    QUESTIONS_GRAMMAR_SCHEMA,
    QUESTIONS_JSON_SCHEMA,
)
from schemas.clarification import (
    MAX_QUESTIONS,
    NOTE_MAX_CHARS,
    QUESTION_MAX_CHARS,
    RULE_REASONS,
    QuestionSet,
)


def question(text: str = "What is the project you are working on?") -> dict[str, str]:
    return {
        "question_text": text,
        "target_ambiguity": "the purpose",
        "safety_guardrail": "Asks about intent only, never about methods.",
    }


def questions(*items: dict[str, str]) -> dict[str, Any]:
    return {"questions": list(items)}


def verdict(reasons: list[str], explanation: str = "Open questions.") -> dict[str, Any]:
    return {"verdict": "reject" if reasons else "pass", "reasons": reasons,
            "explanation": explanation}  # fmt: skip


CASES = [
    (QUESTIONS_GRAMMAR_SCHEMA, QuestionSet, questions(question(), question()), True),
    (QUESTIONS_GRAMMAR_SCHEMA, QuestionSet, questions(question()), False),  # too few
    (QUESTIONS_GRAMMAR_SCHEMA, QuestionSet, questions(*[question()] * (MAX_QUESTIONS + 1)), False),
    (QUESTIONS_GRAMMAR_SCHEMA, QuestionSet,
     questions(question(), question("Why? " * QUESTION_MAX_CHARS)), False),  # runaway text
    (QUESTIONS_GRAMMAR_SCHEMA, QuestionSet, questions(question(), question("Why?")), False),
    (JUDGE_GRAMMAR_SCHEMA, JudgeAnswer, verdict([]), True),
    (JUDGE_GRAMMAR_SCHEMA, JudgeAnswer, verdict([RULE_REASONS[0]]), True),
    (JUDGE_GRAMMAR_SCHEMA, JudgeAnswer, verdict([], "x" * (NOTE_MAX_CHARS * 2 + 1)), False),
    (JUDGE_GRAMMAR_SCHEMA, JudgeAnswer, verdict(list(RULE_REASONS) * 2), False),
]  # fmt: skip


@pytest.mark.parametrize(("schema", "model", "data", "valid"), CASES)
def test_the_grammar_schema_takes_what_the_contract_takes(
    schema: dict[str, Any], model: Any, data: dict[str, Any], valid: bool
) -> None:
    """The grammar schema and the pydantic contract agree on each answer (the grammar may
    not let a model write what the contract then refuses, nor forbid what it accepts)."""
    try:
        model.model_validate(data)
        contract = True
    except ValidationError:
        contract = False
    try:
        jsonschema.validate(data, schema)
        grammar = True
    except jsonschema.ValidationError:
        grammar = False
    assert (contract, grammar) == (valid, valid)


@pytest.mark.parametrize(
    ("engine", "shared", "bounded"),
    [(OpenAIQuestionEngine, QUESTIONS_JSON_SCHEMA, QUESTIONS_GRAMMAR_SCHEMA),
     (OpenAIJudge, JUDGE_JSON_SCHEMA, JUDGE_GRAMMAR_SCHEMA)],
)  # fmt: skip
def test_llama_cpp_gets_the_bounded_schema_and_other_servers_the_shared_one(
    engine: Any, shared: dict[str, Any], bounded: dict[str, Any]
) -> None:
    client = openai.AsyncOpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1")
    sent = {
        server: engine(client, "m", server=server).response_format_param()["json_schema"]["schema"]
        for server in ("llama.cpp", "vllm", "unknown")
    }
    assert sent == {"llama.cpp": bounded, "vllm": shared, "unknown": shared}
    assert bounded != shared
    as_object = engine(client, "m", server="llama.cpp", response_format="json_object")
    assert as_object.response_format_param() == {"type": "json_object"}
