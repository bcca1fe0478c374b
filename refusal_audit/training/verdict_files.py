"""The two kinds of reviewer-verdict file ``refusal-audit train --with-verdicts`` takes.

- ``review labels`` (:data:`REVIEW_LABELS`): reviewed refusal events, a line with
  ``attributes.label``; they train the category model
  (:func:`refusal_audit.training.labels.load_verdict_labels`).
- ``review clarification-labels`` (:data:`CLARIFICATION_LABELS`): reviewed clarification
  question sets, a line with ``questions``; they train the circumvention model
  (:func:`load_verdict_sets`).

The kind is read from each line (:func:`verdict_file_kind`): one file holds one kind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from processors.clarification.verdict_sets import VERDICT_DOMAIN
from refusal_audit.training.circumvention import DEV_PATH, HELDOUT_PATH, DevSet

REVIEW_LABELS = "review labels"
CLARIFICATION_LABELS = "review clarification-labels"
"""The kinds, named by the command that writes them."""


def _kind_of(record: Any) -> str | None:
    if not isinstance(record, dict):
        return None
    if "questions" in record:
        return CLARIFICATION_LABELS
    attributes = record.get("attributes")
    if isinstance(attributes, dict) and "label" in attributes:
        return REVIEW_LABELS
    return None


def verdict_file_kind(path: Path) -> str:
    """:data:`REVIEW_LABELS` or :data:`CLARIFICATION_LABELS`, read from every line of
    ``path``. Raises ``ValueError`` naming the first line that is not JSON, of neither kind
    or of another kind than the first line, and for a file without a line; ``OSError``."""
    kind: str | None = None
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                this = _kind_of(json.loads(line))
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not JSON: {exc}") from exc
            if this is None:
                raise ValueError(
                    f"{path}:{n}: neither a `refusal-audit {REVIEW_LABELS}` line (attributes."
                    f"label) nor a `refusal-audit {CLARIFICATION_LABELS}` line (questions)"
                )
            if kind is not None and this != kind:
                raise ValueError(
                    f"{path}:{n}: a `{this}` line in a file of `{kind}` lines: one kind per file"
                )
            kind = this
    if kind is None:
        raise ValueError(f"no verdicts in {path}")
    return kind


def _corpus_keys(path: Path) -> dict[tuple[str, tuple[str, ...]], str]:
    keys = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            keys[(r["request"].strip(), tuple(q["question_text"] for q in r["questions"]))] = r[
                "set_id"
            ]
    return keys


def load_verdict_sets(
    path: Path, heldout: Path = HELDOUT_PATH, dev: Path | None = DEV_PATH
) -> list[DevSet]:
    """The question sets of a ``review clarification-labels`` file, each with the domain
    :data:`~processors.clarification.verdict_sets.VERDICT_DOMAIN` whatever the line says
    (the reviewers' sets are a fold of their own). Raises ``ValueError`` naming the line for
    a line that is not such a set (not JSON, a field missing or of the wrong type, a label
    other than ``acceptable``/``reject``, no question) or that is a set of the frozen
    ``heldout`` file (by set id, or by the same request and questions): that file is never
    trained on; or a set of the ``dev`` corpus the model is trained on anyway (it would count
    twice, and its "verdict" figures would be in-sample). ``OSError`` when a file cannot be
    read."""
    held = _corpus_keys(heldout)
    held_ids = set(held.values())
    known = _corpus_keys(dev) if dev is not None and dev.is_file() else {}
    known_ids = set(known.values())
    out = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                r = json.loads(line)
                texts = [q["question_text"] for q in r["questions"]]
                fields = (r["set_id"], r["request"], r["refusal"], *texts)
                label = r["label"]
            except KeyError as exc:
                raise ValueError(f"{where}: not a question set: no {exc.args[0]!r} field") from exc
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{where}: not a question set: {exc}") from exc
            if not all(isinstance(f, str) for f in fields) or not texts:
                raise ValueError(f"{where}: set id, request, refusal and questions must be text")
            if label not in ("acceptable", "reject"):
                raise ValueError(f"{where}: label {label!r} is neither acceptable nor reject")
            twin = held.get((r["request"].strip(), tuple(texts)))
            if r["set_id"] in held_ids or twin is not None:
                raise ValueError(
                    f"{where}: set {twin or r['set_id']} of the held-out file {heldout.name}, "
                    "which is never trained on"
                )
            same = known.get((r["request"].strip(), tuple(texts)))
            if r["set_id"] in known_ids or same is not None:
                raise ValueError(
                    f"{where}: set {same or r['set_id']} of the dev corpus {dev}, which the "
                    "model is trained on already: reviewers' verdicts come from "
                    "`refusal-audit review clarification-labels`"
                )
            out.append(
                DevSet(r["set_id"], VERDICT_DOMAIN, r["request"], r["refusal"], texts,
                       label == "reject")
            )  # fmt: skip
    return out
