"""Generate the JSON Schema files under ``schemas/json/`` from the pydantic models.

Run ``python -m schemas.export`` after changing a model; ``tests/test_schema_files.py``
fails while the files and the models disagree.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from schemas.alerts import Alert
from schemas.audit import AuditResult, BatchRecord, StoredAssessment
from schemas.calibration import (
    ABEventEnvelope,
    CalibrationOutput,
    CalibrationRequest,
    CalibrationRun,
    ExperimentPlan,
    Spectrum,
    SuiteInput,
    SuiteVerdict,
)
from schemas.clarification import (
    ClarificationAnswer,
    ClarificationRequest,
    ClarificationResponse,
    ClarifiedRequest,
    ConversationState,
    Escalation,
    QuestionSet,
    ReevaluationOutcome,
)
from schemas.events import RefusalEvent

JSON_DIR = Path(__file__).parent / "json"

PUBLISHED: dict[str, type[BaseModel]] = {
    "refusal_event": RefusalEvent,
    "audit_result": AuditResult,
    "stored_assessment": StoredAssessment,
    "batch_record": BatchRecord,
    "alert": Alert,
    "clarification_request": ClarificationRequest,
    "clarification_response": ClarificationResponse,
    "question_set": QuestionSet,
    "clarification_answer": ClarificationAnswer,
    "clarified_request": ClarifiedRequest,
    "reevaluation_outcome": ReevaluationOutcome,
    "conversation_state": ConversationState,
    "escalation": Escalation,
    "calibration_request": CalibrationRequest,
    "calibration_spectrum": Spectrum,
    "calibration_output": CalibrationOutput,
    "calibration_run": CalibrationRun,
    "calibration_suite_input": SuiteInput,
    "calibration_suite_verdict": SuiteVerdict,
    "ab_event": ABEventEnvelope,
    "ab_experiment_plan": ExperimentPlan,
}


def render(model: type[BaseModel]) -> str:
    """Return the model's JSON Schema (serialization mode) as stable, indented JSON text."""
    schema = model.model_json_schema(mode="serialization")
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def expected_files() -> dict[Path, str]:
    """Map each published schema file path to the text it should contain."""
    return {JSON_DIR / f"{name}.schema.json": render(m) for name, m in PUBLISHED.items()}


def main() -> None:
    """Write every published schema file."""
    JSON_DIR.mkdir(exist_ok=True)
    for path, text in expected_files().items():
        path.write_text(text, encoding="utf-8")
        print(path)


if __name__ == "__main__":
    main()
