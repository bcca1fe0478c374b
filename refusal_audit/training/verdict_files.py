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

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from processors.clarification.verdict_sets import (
    MAX_SET_QUESTIONS,
    VERDICT_DOMAIN,
    SetIndex,
    normalised_text,
)
from refusal_audit.training.circumvention_corpus import DEV_PATH, HELDOUT_PATH, DevSet

REVIEW_LABELS = "review labels"
CLARIFICATION_LABELS = "review clarification-labels"
"""The kinds, named by the command that writes them."""
MAX_VERDICT_WEIGHT = 1000.0
"""Largest ``--verdict-weight``: one verdict counting as 1,000 corpus rows or sets already
drowns the corpus; beyond it (and for ``inf``/``nan``) the class weights overflow."""


def check_verdict_weight(weight: float) -> float:
    """``weight`` as the weight of one verdict: finite, in ``[0, MAX_VERDICT_WEIGHT]``, and
    ``-0`` read as ``0``. Raises ``ValueError`` otherwise."""
    if not math.isfinite(weight) or not 0.0 <= weight <= MAX_VERDICT_WEIGHT:
        raise ValueError(
            f"the verdict weight must be a finite number from 0 to {MAX_VERDICT_WEIGHT:g}, "
            f"not {weight!r}"
        )
    return weight + 0.0  # -0.0 + 0.0 == +0.0


def json_lines(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` for each non-blank line of the JSON Lines file ``path``
    (``where`` = ``path:line``). Raises ``ValueError`` naming the line for bytes that are not
    UTF-8 or a line that is not JSON (nesting deeper than orjson's 1,024 levels included,
    never a ``RecursionError``); ``OSError``."""
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, start=1):
            where = f"{path}:{n}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(
                    f"{where}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at column "
                    f"{exc.start + 1})"
                ) from None
            if not text.strip():
                continue
            try:
                record = orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"{where}: not JSON: {exc}") from None
            yield where, record


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
    ``path``. Raises ``ValueError`` naming the first line that is not UTF-8 JSON
    (:func:`json_lines`), of neither kind or of another kind than the first line, and for a
    file without a line; ``OSError``."""
    kind: str | None = None
    for where, record in json_lines(path):
        this = _kind_of(record)
        if this is None:
            raise ValueError(
                f"{where}: neither a `refusal-audit {REVIEW_LABELS}` line (attributes."
                f"label) nor a `refusal-audit {CLARIFICATION_LABELS}` line (questions)"
            )
        if kind is not None and this != kind:
            raise ValueError(
                f"{where}: a `{this}` line in a file of `{kind}` lines: one kind per file"
            )
        kind = this
    if kind is None:
        raise ValueError(f"no verdicts in {path}")
    return kind


def corpus_index(path: Path) -> SetIndex:
    """The sets of a corpus file (``datasets/circumvention`` format) by content
    (:class:`~processors.clarification.verdict_sets.SetIndex`). Raises ``ValueError`` naming
    the line of a bad line, ``OSError``."""
    sets = []
    for where, r in json_lines(path):
        try:
            sets.append((r["set_id"], r["request"], [q["question_text"] for q in r["questions"]]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{where}: not a question set: {exc!r}") from None
    return SetIndex(sets)


def heldout_sets_in(path: Path, heldout: Path = HELDOUT_PATH) -> None:
    """Refuse a training corpus ``path`` (``--circumvention-dev``) that holds a set of the
    frozen ``heldout`` file: by set id, or by content (the same request with its questions,
    reordered, reformatted or a subset, among a held-out set's:
    :class:`~processors.clarification.verdict_sets.SetIndex`). Raises ``ValueError`` naming
    the line and the held-out set, or a bad line; ``OSError``."""
    held = corpus_index(heldout)
    for where, r in json_lines(path):
        try:
            twin = held.match(
                r["set_id"], r["request"], [q["question_text"] for q in r["questions"]]
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{where}: not a question set: {exc!r}") from None
        if twin is not None:
            raise ValueError(
                f"{where}: set {twin} of the held-out file {heldout.name}, which is never "
                "trained on (datasets/circumvention/README.md)"
            )


def load_verdict_sets(
    path: Path, heldout: Path = HELDOUT_PATH, dev: Path | None = DEV_PATH
) -> list[DevSet]:
    """The question sets of a ``review clarification-labels`` file, each with the domain
    :data:`~processors.clarification.verdict_sets.VERDICT_DOMAIN` whatever the line says
    (the reviewers' sets are a fold of their own). Raises ``ValueError`` naming the line for
    a line that is not such a set (not UTF-8 JSON, a field missing or of the wrong type, a
    label other than ``acceptable``/``reject``, no question, an empty question, more than
    :data:`~processors.clarification.verdict_sets.MAX_SET_QUESTIONS` questions)
    or that is a set of the frozen ``heldout`` file: that file is never trained on; or a set
    of the ``dev`` corpus the model is trained on anyway (it would count twice, and its
    "verdict" figures would be in-sample). Both are matched by set id or by content (the
    same request, the questions compared case-, space- and edge-punctuation-blind as a set,
    a subset of one corpus set's included:
    :class:`~processors.clarification.verdict_sets.SetIndex`). ``OSError`` when a file
    cannot be read."""
    held = corpus_index(heldout)
    known = corpus_index(dev) if dev is not None and dev.is_file() else SetIndex()
    out = []
    for where, r in json_lines(path):
        try:
            texts = [q["question_text"] for q in r["questions"]]
            fields = (r["set_id"], r["request"], r["refusal"], *texts)
            label = r["label"]
        except KeyError as exc:
            raise ValueError(f"{where}: not a question set: no {exc.args[0]!r} field") from None
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{where}: not a question set: {exc}") from None
        if not all(isinstance(f, str) for f in fields) or not texts:
            raise ValueError(f"{where}: set id, request, refusal and questions must be text")
        if label not in ("acceptable", "reject"):
            raise ValueError(f"{where}: label {label!r} is neither acceptable nor reject")
        empty = [i for i, t in enumerate(texts, start=1) if not normalised_text(t)]
        if empty:
            raise ValueError(f"{where}: question {empty[0]} is empty")
        if len(texts) > MAX_SET_QUESTIONS:
            raise ValueError(
                f"{where}: {len(texts)} questions; a conversation asks at most "
                f"{MAX_SET_QUESTIONS} (two rounds of at most four)"
            )
        twin = held.match(r["set_id"], r["request"], texts)
        if twin is not None:
            raise ValueError(
                f"{where}: set {twin} of the held-out file {heldout.name}, which is never "
                "trained on"
            )
        same = known.match(r["set_id"], r["request"], texts)
        if same is not None:
            raise ValueError(
                f"{where}: set {same} of the dev corpus {dev}, which the model is trained on "
                "already: reviewers' verdicts come from `refusal-audit review "
                "clarification-labels`"
            )
        out.append(
            DevSet(r["set_id"], VERDICT_DOMAIN, r["request"], r["refusal"], texts,
                   label == "reject")
        )  # fmt: skip
    return out
