"""The ``openai`` variant engine on hand-written answers at the bounds (break9, issue 27):
800/801 and 2,000/2,001-character ``response_text``, 300/301 and 600/601-character notes,
variants out of order, five or seven, a duplicated style, unicode, empty and blank strings,
a NUL, a lone surrogate escape, wrong types and extra fields, through the fake
OpenAI-compatible server as llama.cpp and as OpenAI. The engine must end in a run (passed,
failed checks or escalated), never raise, and its verdict on the schema must be the
contract's (``CalibrationOutput`` and the spectrum's coverage)."""

from __future__ import annotations

import json
from typing import Any

import fake_openai_server
import jsonschema
import pytest
from fake_openai_server import FakeOpenAIServer, content
from pydantic import ValidationError
from test_calibration_openai import GOOD_TEXTS, answer_data, run_with, variants

from processors.calibration.base import spectrum_problems
from processors.calibration.variant_harness import spectrum_wire_schema
from schemas.calibration import DEFAULT_SPECTRUM, CalibrationOutput
from schemas.policy import PolicyBundle

fake_openai = fake_openai_server.fake_openai

REFUSE = "I can't help with that request."


def _text(n: int, start: str = REFUSE) -> str:
    """A refusal of exactly ``n`` characters (padded with a plain sentence)."""
    text = start
    while len(text) < n:
        text += " I'm sorry."
    return text[:n]


def _with(**changes: str) -> dict[str, Any]:
    return answer_data(variants({**GOOD_TEXTS, **changes}))


def _note(n: int) -> dict[str, Any]:
    data = _with()
    data["variants"][0]["ux_impact_note"] = "é" * n
    return data


def _summary(value: Any) -> dict[str, Any]:
    return _with() | {"request_summary": value}


ORDERED = variants(GOOD_TEXTS)
CASES: dict[str, Any] = {
    "response-800": _with(minimal_direct=_text(800)),
    "response-801": _with(minimal_direct=_text(801)),
    "response-2000": _with(minimal_direct=_text(2000)),
    "response-2001": _with(minimal_direct=_text(2001)),
    "note-300": _note(300),
    "note-301": _note(301),
    "note-600": _note(600),
    "note-601": _note(601),
    "out-of-order": answer_data(list(reversed(ORDERED))),
    "five": answer_data(ORDERED[:5]),
    "seven": answer_data([*ORDERED, {**ORDERED[0], "style": "sarcastic"}]),
    "duplicate-style": answer_data([*ORDERED[:5], ORDERED[0]]),
    "unicode": _with(minimal_direct="Je ne peux pas t'aider avec ça. 抱歉 😀 e\u0301"),
    "empty-response": _with(minimal_direct=""),
    "blank-response": _with(minimal_direct="   "),
    "nul": _with(minimal_direct="I can't help\u0000 with that."),
    "empty-summary": _summary(""),
    "summary-601": _summary("s" * 601),
    "number-summary": _summary(7),
    "null-summary": _summary(None),
    "extra-field": _with() | {"confidence": 0.9},
    "no-variants": answer_data([]),
    "variants-object": _with() | {"variants": {"minimal_direct": REFUSE}},
    "style-case": answer_data([{**ORDERED[0], "style": "Minimal_Direct"}, *ORDERED[1:]]),
}
RAW = {
    "lone-surrogate": json.dumps(_with()).replace("request.", "request \\ud800.", 1),
    "top-level-array": json.dumps([_with()]),
    "deep": "[" * 5000 + "]" * 5000,
}


def _contract_accepts(data: Any) -> bool:
    try:
        output = CalibrationOutput.model_validate_json(json.dumps(data))
    except ValidationError:
        return False
    return not spectrum_problems(output, DEFAULT_SPECTRUM)


@pytest.mark.parametrize("server", ["llama.cpp", "openai"])
@pytest.mark.parametrize("case", [*CASES, *RAW])
def test_an_answer_at_the_bounds_ends_in_a_run_with_the_contracts_verdict(
    fake_openai: FakeOpenAIServer, example_bundle: PolicyBundle, case: str, server: str
) -> None:
    raw = RAW.get(case) or json.dumps(CASES[case])
    fake_openai.script(content(raw), content(raw))
    run = run_with(fake_openai, example_bundle, server=server)  # never raises
    assert run.status in ("passed", "failed_checks", "escalated")
    accepted = case in CASES and _contract_accepts(CASES[case])
    schema_failure = run.escalation is not None and run.escalation.reason == "invalid_output"
    assert schema_failure == (not accepted), (run.status, run.escalation)
    grammar = jsonschema.Draft202012Validator(spectrum_wire_schema(DEFAULT_SPECTRUM.ids()))
    if server == "llama.cpp" and case in CASES and grammar.is_valid(CASES[case]):
        assert accepted, case  # what the grammar lets through, the contract accepts
