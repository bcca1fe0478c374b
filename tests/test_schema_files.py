"""The published JSON Schema files must match the pydantic models."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from schemas.events import RefusalEvent
from schemas.export import PUBLISHED, expected_files, render


def test_json_schema_files_match_models() -> None:
    stale = [
        str(path)
        for path, text in expected_files().items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"regenerate with `python -m schemas.export`: {stale}"


def test_rendering_changes_when_a_model_changes() -> None:
    # The drift check above is only meaningful if a model change changes the rendering.
    from pydantic import create_model

    changed = create_model("RefusalEvent", __base__=RefusalEvent, extra_field=(int, 0))
    assert render(changed) != render(PUBLISHED["refusal_event"])


def test_event_schema_requires_core_fields() -> None:
    schema = json.loads(render(RefusalEvent))
    assert {"log_id", "event_time", "request", "response", "model"} <= set(schema["required"])
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize(
    "bad",
    [
        {"event_time": "2026-01-01T00:00:00"},  # naive time
        {"log_id": ""},
        {"unexpected": "x"},
        {"classifier": {"score": 1.5}},
    ],
)
def test_event_contract_rejects(bad: dict[str, object]) -> None:
    base: dict[str, object] = {
        "log_id": "a",
        "event_time": "2026-01-01T00:00:00Z",
        "request": "q",
        "response": "r",
        "model": "m",
    }
    with pytest.raises(ValidationError):
        RefusalEvent.model_validate({**base, **bad})


def test_event_round_trips_rfc3339() -> None:
    event = RefusalEvent.model_validate(
        {"log_id": "a", "event_time": "2026-01-01T01:00:00+01:00", "request": "q",
         "response": "r", "model": "m"}
    )
    wire = event.model_dump_json()
    assert '"2026-01-01T01:00:00+01:00"' in wire
    assert RefusalEvent.model_validate_json(wire) == event
