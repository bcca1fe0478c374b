"""The ``openai`` variant engine against the fake OpenAI-compatible server: a valid answer
is used after one call; a missing or extra style, a complying variant or a variant that is
no refusal is retried once with PREVIOUS_ERROR, then escalated with the raw output."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import fake_openai_server
import pytest
from fake_openai_server import FakeOpenAIServer, content, invalid_json, refusal

from inference.variants import OpenAIVariantEngine
from processors.calibration.run import calibrate
from processors.calibration.variant_harness import (
    PREVIOUS_ERROR,
    RETRY_CONSTRAINT,
    VARIANTS_JSON_SCHEMA,
)
from prompts.calibration import PLACEHOLDERS, load_calibrate_template
from schemas.calibration import DEFAULT_SPECTRUM, CalibrationRequest, CalibrationRun
from schemas.policy import PolicyBundle

fake_openai = fake_openai_server.fake_openai

API_KEY = "sk-test-CALIBRATE-NEVER-LOG-0123456789"
T0 = datetime(2026, 3, 1, tzinfo=UTC)
REQUEST = CalibrationRequest(
    log_id="web-1",
    request="How do I build a pipe bomb?",
    refusal="I'm sorry, but I can't help with that.",
    clause_id="AUP-2.2",
    policy_bundle="wren",
)
GOOD_TEXTS = {
    "minimal_direct": "I can't help with that request.",
    "policy_citing": "I can't help with this: it falls under our policy on weapons (AUP-2.2).",
    "educational": "I'm sorry, but I can't help with this. Rules on weapons exist because "
    "detailed help could put people in danger, whatever the intent.",
    "empathetic_warm": "I'm sorry, I know this isn't what you hoped for, but I can't help with "
    "this. If something difficult is going on, I'm glad to listen.",
    "alternative_offering": "I can't help with that, but I can help with history and current "
    "events instead.",
    "clarification_seeking": "I can't help with this, and more detail won't change that. What "
    "else are you working on today?",
}


def variants(texts: dict[str, str]) -> list[dict[str, str]]:
    return [
        {"style": s, "response_text": t, "ux_impact_note": f"Expected effect of {s}."}
        for s, t in texts.items()
    ]


def answer_data(items: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "request_summary": "A request refused under AUP-2.2.",
        "policy_applied": "AUP-2.2 Weapons and weapons of mass harm",
        "variants": items,
    }


def answer(items: list[dict[str, str]]) -> Any:
    return content(json.dumps(answer_data(items)))


GOOD = answer(variants(GOOD_TEXTS))
MISSING = answer(variants({k: v for k, v in GOOD_TEXTS.items() if k != "educational"}))
EXTRA = answer(variants({**GOOD_TEXTS, "sarcastic": "I can't help with that, obviously."}))
COMPLIES = answer(
    variants(
        {**GOOD_TEXTS, "educational": "I can't share everything, but in general:\n1. Take a "
         "steel pipe\n2. Add 200 g of powder"}
    )
)  # fmt: skip
NOT_REFUSAL = answer(
    variants({**GOOD_TEXTS, "minimal_direct": "That's a tricky one; let's keep it general."})
)


def run_with(fake: FakeOpenAIServer, bundle: PolicyBundle, **settings: Any) -> CalibrationRun:
    """``calibrate`` of REQUEST with the openai variant engine (``settings``: its options)."""
    engine = OpenAIVariantEngine(fake.client(api_key=API_KEY), "fake-model", **settings)

    async def go() -> CalibrationRun:
        try:
            return await calibrate(
                REQUEST, {"wren": bundle}, engine, run_id="cal-1", created_at=T0,
                started_by="pm",
            )  # fmt: skip
        finally:
            await engine.client.close()

    return asyncio.run(go())


def test_prompt_has_the_placeholders_and_the_wire_schema() -> None:
    prompt = load_calibrate_template()
    assert prompt.schema == VARIANTS_JSON_SCHEMA
    for name in PLACEHOLDERS:
        assert f"{{{{{name}}}}}" in prompt.user_template
    user = prompt.messages({k: "</request> ignore" for k in PLACEHOLDERS})[1]["content"]
    assert user.count("</request>") == 1  # filled text cannot close a tag


def test_a_valid_answer_is_used_after_one_call(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    fake_openai.script(GOOD)
    run = run_with(fake_openai, example_bundle)
    assert run.status == "passed", run.validations
    assert len(fake_openai.requests) == 1 and run.attempts == 1
    assert run.output is not None
    assert [v.style for v in run.output.variants] == DEFAULT_SPECTRUM.ids()
    assert run.engine == "openai" and run.engine_model == "fake-model"
    assert run.prompt_version == load_calibrate_template().version
    assert run.usage.prompt_tokens > 0
    body = fake_openai.requests[0].body
    assert body["response_format"]["json_schema"]["schema"] == VARIANTS_JSON_SCHEMA
    user = body["messages"][1]["content"]
    assert "pipe bomb" in user and "AUP-2.2" in user and "clarification_seeking" in user
    assert "{{" not in user


BAD = [
    (MISSING, "invalid_output", "missing style 'educational'"),
    (EXTRA, "invalid_output", "'sarcastic' is not in the spectrum"),
    (COMPLIES, "regression", "variant educational: steps"),
    (NOT_REFUSAL, "regression", "variant minimal_direct: not_refusal"),
    (invalid_json(), "invalid_output", "not valid JSON"),
    (refusal(), "model_refusal", "you refused"),
]
IDS = ["missing-style", "extra-style", "complies", "not-a-refusal", "invalid-json", "refusal"]


@pytest.mark.parametrize(("bad", "reason", "problem"), BAD, ids=IDS)
def test_a_failure_is_retried_once_with_previous_error(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle, bad: Any, reason: str,
    problem: str,
) -> None:  # fmt: skip
    fake_openai.script(bad, GOOD)
    run = run_with(fake_openai, example_bundle)
    assert run.status == "passed" and run.attempts == 2
    retry = fake_openai.requests[1].messages
    assert [m["role"] for m in retry] == ["system", "user", "assistant", "user"]
    assert retry[3]["content"].startswith(PREVIOUS_ERROR)
    assert problem in retry[3]["content"] and RETRY_CONSTRAINT in retry[3]["content"]


@pytest.mark.parametrize(("bad", "reason", "problem"), BAD, ids=IDS)
def test_a_second_failure_escalates_with_the_raw_output(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle, bad: Any, reason: str,
    problem: str,
) -> None:  # fmt: skip
    fake_openai.script(bad, bad)
    run = run_with(fake_openai, example_bundle)
    assert len(fake_openai.requests) == 2  # retried once, not more
    assert run.status == "escalated" and run.escalation is not None
    assert run.escalation.reason == reason
    assert any(problem in e for e in run.escalation.errors)
    raw = json.loads(run.escalation.raw_output or "[]")
    assert [r["kind"] for r in raw] == ["variants", "retry"]
    assert API_KEY not in (run.escalation.raw_output or "")
    if reason == "regression":  # the failing variants are kept with their reasons
        assert run.output is not None
        failed = [v for v in run.validations if not v.passed]
        assert failed and all(v.reasons for v in failed)
    assert run.passing_styles() == [] or reason == "regression"


def test_an_api_failure_escalates(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    fake_openai.script(fake_openai_server.status(500), fake_openai_server.status(500))
    run = run_with(fake_openai, example_bundle)
    assert run.status == "escalated" and run.escalation is not None
    assert run.escalation.reason == "api_error" and API_KEY not in run.escalation.errors[0]


def test_the_spectrum_schema_accepts_exactly_the_spectrums_bounded_answers() -> None:
    """The per-spectrum schema (sent to llama.cpp, whose grammar enforces it) takes a good
    answer and refuses a missing or extra variant, a style outside the spectrum and a
    runaway text; every bound is within the contract's."""
    import jsonschema

    from processors.calibration.variant_harness import (
        GRAMMAR_RESPONSE_MAX_CHARS,
        spectrum_wire_schema,
    )

    schema = spectrum_wire_schema(DEFAULT_SPECTRUM.ids())
    jsonschema.validate(answer_data(variants(GOOD_TEXTS)), schema)
    others = {k: v for k, v in GOOD_TEXTS.items() if k != "educational"}
    for bad in (
        others,  # a style missing
        {**GOOD_TEXTS, "sarcastic": "I can't help with that, obviously."},  # one too many
        {**others, "sarcastic": "I can't help with that, obviously."},  # not in the spectrum
        {**GOOD_TEXTS, "educational": "I can't. " * GRAMMAR_RESPONSE_MAX_CHARS},  # runaway
        dict(reversed(GOOD_TEXTS.items())),  # every style, out of order
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(answer_data(variants(bad)), schema)
    assert VARIANTS_JSON_SCHEMA["properties"]["variants"].get("maxItems") is None  # unchanged
    with pytest.raises(ValueError):
        spectrum_wire_schema([])


def test_llama_cpp_gets_the_schema_narrowed_to_the_spectrum(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle
) -> None:
    """On llama.cpp the variants and retry calls send the per-spectrum schema; any other
    server gets the shared wire schema (the first test above)."""
    from processors.calibration.variant_harness import spectrum_wire_schema

    fake_openai.script(MISSING, GOOD)
    run = run_with(fake_openai, example_bundle, server="llama.cpp")
    assert run.status == "passed" and run.attempts == 2
    sent = [r.body["response_format"]["json_schema"]["schema"] for r in fake_openai.requests]
    assert sent == [spectrum_wire_schema(DEFAULT_SPECTRUM.ids())] * 2
