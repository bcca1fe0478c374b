"""The circumvention corpus as the training reads it (``datasets/circumvention``): where the
dev and the frozen held-out files are, and :class:`DevSet` rows loaded from either. The
model's training (:mod:`refusal_audit.training.circumvention`) and the reviewers' verdict
files (:mod:`refusal_audit.training.verdict_files`) share it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DEV_PATH = Path(__file__).resolve().parents[2] / "datasets" / "circumvention" / "dev.jsonl"
HELDOUT_PATH = DEV_PATH.with_name("heldout.jsonl")
"""The frozen held-out corpus: never trained on (datasets/circumvention/README.md)."""


@dataclass(frozen=True)
class DevSet:
    """One dev set: domain, texts and label (True: ``reject``)."""

    set_id: str
    domain: str
    request: str
    refusal: str
    questions: list[str]
    reject: bool


def load_dev(path: Path = DEV_PATH) -> list[DevSet]:
    """The sets of a corpus file (``datasets/circumvention`` format). Raises ``OSError``,
    ``ValueError`` (bad JSON) or ``KeyError`` (a missing field) for a bad file."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            out.append(
                DevSet(
                    r["set_id"], r["domain"], r["request"], r["refusal"],
                    [q["question_text"] for q in r["questions"]], r["label"] == "reject",
                )
            )  # fmt: skip
    return out
