"""``refusal-audit review clarification-labels``: the clarification review's verdicts as
labelled question sets for the circumvention model (``refusal-audit train --with-verdicts``).

One JSON line per reviewed conversation in the ``datasets/circumvention`` format, built by
:func:`processors.clarification.verdict_sets.verdict_set` (the label rule is there: reject
when at least half of the reviewers' newest verdicts say the questions were not neutral).
A conversation nobody reviewed is not exported; a reviewed one whose judged step holds no
question (its set was rejected before it was asked), is missing from the trail or cannot
be read is counted in :attr:`ClarificationLabels.skipped`, never dropped silently.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from pydantic import ValidationError

from processors.clarification.verdict_sets import verdict_set
from schemas.clarification import ConversationState
from warehouse.clarification import reviewed_conversations
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


def clarification_labels(store: Warehouse) -> ClarificationLabels:
    """The labelled question sets of every reviewed clarification conversation, ordered by
    conversation id (texts are the stored, redacted ones). Raises ``WarehouseError``."""
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
        record = verdict_set(state, item["verdicts"])
        if record is None:
            out.skipped[NO_QUESTIONS] += 1
            continue
        out.labels[record["label"]] += 1
        out.lines.append(orjson.dumps(record))
    return out


def write_private_lines(lines: list[bytes], path: Path) -> None:
    """Write ``lines`` as JSON Lines to ``path``; a new file is made mode 0600 (it holds the
    logged texts), as ``review export`` does. Raises ``OSError``."""
    with open(path, "wb", opener=lambda p, flags: os.open(p, flags, 0o600)) as f:
        f.writelines(line + b"\n" for line in lines)
