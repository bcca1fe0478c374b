"""Personal data out of the clarification service: its inputs redacted before any use.

The service (``refusal_audit.clarification.service``) passes every input through these functions
first, with the audit's redactor (``processors.redaction.Redactor``, settings
``redaction_enabled``/``redaction_kinds``), so the classifier, the question engine and the
LLM judge only ever see redacted text, and the state store, the audit trail and every Kafka
output hold it: nothing downstream keeps an original. Redacted, like the audit's
``redact_event``: the user's request, the refusal, every answer and the application's
re-evaluation refusal; kept as they are: ids, names of the bundle, model and product, times.
Redaction is deterministic and idempotent, so a redelivered input is redacted to the same
text and recognised as a repeat.
"""

from __future__ import annotations

from processors.redaction import Redactor
from schemas.clarification import ClarificationAnswer, ClarificationRequest, ReevaluationOutcome


def redact_request(request: ClarificationRequest, redactor: Redactor) -> ClarificationRequest:
    """``request`` with its ``request`` and ``refusal`` texts redacted (a copy)."""
    return request.model_copy(
        update={
            "request": redactor.redact(request.request).text,
            "refusal": redactor.redact(request.refusal).text,
        }
    )


def redact_answer(answer: ClarificationAnswer, redactor: Redactor) -> ClarificationAnswer:
    """``answer`` with every answer text redacted (a copy)."""
    items = [a.model_copy(update={"text": redactor.redact(a.text).text}) for a in answer.answers]
    return answer.model_copy(update={"answers": items})


def redact_outcome(outcome: ReevaluationOutcome, redactor: Redactor) -> ReevaluationOutcome:
    """``outcome`` with its ``refusal`` text (when given) redacted (a copy)."""
    if outcome.refusal is None:
        return outcome
    return outcome.model_copy(update={"refusal": redactor.redact(outcome.refusal).text})
