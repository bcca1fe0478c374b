"""``refusal-audit review clarification-labels``: the clarification review's verdicts as
labelled question sets for the circumvention model (``refusal-audit train --with-verdicts``).

One JSON line per reviewed conversation in the ``datasets/circumvention`` format, built by
:func:`processors.clarification.verdict_sets.verdict_set` (the label rule is there: the newest
revision with verdicts is exported, and it is rejected when at least half of the reviewers'
newest verdicts on that revision say the questions were not neutral). The reviewers' notes
are redacted as the audit redacts events.
A conversation nobody reviewed is not exported; a reviewed one whose judged step holds no
question (its set was rejected before it was asked), is missing from the trail or cannot
be read is counted in :attr:`ClarificationLabels.skipped`, never dropped silently.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from pydantic import ValidationError

from processors.clarification.verdict_sets import verdict_set
from processors.redaction import Redactor
from schemas.clarification import ConversationState
from warehouse.clarification import reviewed_conversations
from warehouse.private import private_opener
from warehouse.store import Warehouse

NO_QUESTIONS = "no question asked"
"""Skip reason: the judged step holds no question (the set never reached the user)."""
NO_STEP = "judged step missing from the trail"
"""Skip reason: the trail has no step of the judged revision."""
BAD_STATE = "stored state unreadable"
"""Skip reason: the judged step's state is not a ``ConversationState`` this code reads."""


@dataclass
class ClarificationLabels:
    """The export: ``lines`` (JSON, no newline), ``labels`` (label -> sets) and ``skipped``
    (reason -> reviewed conversations not exported)."""

    lines: list[bytes] = field(default_factory=list)
    labels: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)


def clarification_labels(store: Warehouse, redactor: Redactor | None) -> ClarificationLabels:
    """The labelled question sets of every reviewed clarification conversation, ordered by
    conversation id (the request, refusal and questions are the stored, redacted texts; the
    reviewers' notes, stored as typed, are redacted here with ``redactor``, the audit's
    (``refusal_audit.audit.engine_setup.configured_redactor``; None: redaction is off), before
    they enter the ``rationale``). Raises ``WarehouseError``."""
    out = ClarificationLabels()
    for item in reviewed_conversations(store):
        if item["state"] is None:
            out.skipped[NO_STEP] += 1
            continue
        try:
            state = ConversationState.model_validate_json(item["state"])
        except ValidationError:
            out.skipped[BAD_STATE] += 1
            continue
        verdicts = item["verdicts"]
        if redactor is not None:
            verdicts = [{**v, "note": redactor.redact(str(v["note"])).text} for v in verdicts]
        record = verdict_set(state, verdicts)
        if record is None:
            out.skipped[NO_QUESTIONS] += 1
            continue
        out.labels[record["label"]] += 1
        out.lines.append(orjson.dumps(record))
    return out


def write_private_lines(lines: list[bytes], path: Path) -> None:
    """Write ``lines`` as JSON Lines to ``path``, mode 0600 whether the file is new or not
    (it holds the logged texts; ``warehouse.private.private_opener``), as ``review export``
    does. Raises ``OSError``."""
    with open(path, "wb", opener=private_opener) as f:
        f.writelines(line + b"\n" for line in lines)
