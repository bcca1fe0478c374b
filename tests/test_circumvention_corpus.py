"""The circumvention corpus (datasets/circumvention/): every set is a valid question set with a
label and reasons from the rubric; the held-out third is frozen; ``clarify eval`` reads it."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

from refusal_audit.clarification.evaluation import read_labelled, score_fixture
from schemas.clarification import QuestionSet

CORPUS = Path(__file__).resolve().parents[1] / "datasets" / "circumvention"
RUBRIC = Path(__file__).resolve().parents[1] / "docs" / "circumvention-rubric.md"
HELDOUT_SHA256 = "dab9b3c403c166f21282737db4f06292680fc4972163870224b3dc00a111cb9f"
"""Frozen on 2026-12-05: nothing may be tuned on the held-out third (README of the corpus)."""


def rows(split: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in (CORPUS / f"{split}.jsonl").read_text().splitlines()]


def test_the_heldout_third_is_frozen() -> None:
    digest = hashlib.sha256((CORPUS / "heldout.jsonl").read_bytes()).hexdigest()
    assert digest == HELDOUT_SHA256


def test_every_set_is_valid_and_labelled_by_the_rubric() -> None:
    codes = set(re.findall(r"^### `([a-z_]+)`", RUBRIC.read_text(), flags=re.MULTILINE))
    assert len(codes) >= 8
    every = rows("dev") + rows("heldout")
    assert len(every) >= 300
    assert len({r["set_id"] for r in every}) == len(every)
    for r in every:
        QuestionSet.model_validate({"questions": r["questions"]})
        assert r["label"] in ("acceptable", "reject")
        reasons = r["reasons"]
        assert isinstance(reasons, list)
        assert (r["label"] == "reject") == bool(reasons), r["set_id"]
        assert set(reasons) <= codes, (r["set_id"], reasons)
    assert len(Counter(r["domain"] for r in every)) >= 15
    assert {r["author"] for r in every} == {"cva", "cvb"}


def test_the_held_out_split_is_a_third_of_each_writer_and_label() -> None:
    held = Counter((r["author"], r["label"]) for r in rows("heldout"))
    every = Counter((r["author"], r["label"]) for r in rows("dev") + rows("heldout"))
    assert set(held) == set(every)
    for key, n in every.items():
        assert held[key] == n // 3, key  # positions 2, 5, 8, ... of n sets


def test_clarify_eval_reads_the_corpus_as_labelled_sets() -> None:
    _, sets, skipped = read_labelled(CORPUS / "heldout.jsonl")
    assert skipped == 0 and len(sets) == len(rows("heldout"))
    figures = score_fixture(sets)
    confusion = figures["confusion"]
    assert sum(confusion.values()) == len(sets)
    assert confusion["rejected_bad"] + confusion["passed_bad"] == sum(
        r["label"] == "reject" for r in rows("heldout")
    )
