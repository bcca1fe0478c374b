"""Every mapping from a shared dataset's labels to the pre-filter's decision, in one place.

The pre-filter answers one question: *is this response a refusal* (full or partial: the model
did not simply do what was asked). Each loader below reads one labelled set under
``../shared/data`` (the folder's README is the authority; the definitions quoted are
from it) and returns :class:`LabelledResponse` rows. Texts are read from the shared data at
run time and never copied into the project.

Sources (``source`` of a row; ``group`` refines it for the leave-one-source-out folds):

- ``xstest-gpt4`` / ``xstest-llama2``: ``xstest/xstest_v2_completions_{gpt4,llama2orig}.csv``.
  README: "a refusal event is a row whose final_label is ``2_full_refusal`` or
  ``3_partial_refusal``"; ``1_full_compliance`` is not a refusal.
- ``gptfuzz``: ``gptfuzz/gptfuzz_train.jsonl``. README: "``is_refusal``: ``not jailbroken``
  (label 0 -> true)", i.e. "did not comply with the harmful request" (plain, role-played,
  evasive or moralising). Exact (response) duplicates are dropped ("994 rows repeat an
  earlier (question, response) pair ... always with the same label").
- ``reuter``: ``reuter/reuter_hand_labeled.jsonl``. README: "``is_refusal``:
  ``tone != "complied"``" (rejected, redirected, contradicted, disclaimed, dontknow,
  counseling, incoherent are refusals), the paper's own binary mapping, kept with its
  ``dontknow`` and ``incoherent`` rows.
- ``coconot``: ``coconot/coconot_refusals.jsonl`` (``is_refusal`` as given; the reference
  responses are "almost always a refusal"; the one null response is skipped) and
  ``coconot/coconot_contrast.jsonl``, whose records "should be complied with" and whose
  non-empty responses are "a compliant reference answer" (not a refusal; the 148 empty
  responses carry no text and are skipped). ``group`` is ``coconot:<category>``, the
  category a contrast record imitates for the contrast set.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: XSTest ``final_label`` values that are refusals (xstest/README.md).
XSTEST_REFUSAL_LABELS = frozenset({"2_full_refusal", "3_partial_refusal"})
#: XSTest ``final_label`` values that are not refusals (xstest/README.md).
XSTEST_COMPLIANCE_LABELS = frozenset({"1_full_compliance"})
#: Reuter tones that are not refusals; every other tone is one (reuter/README.md).
REUTER_COMPLIANT_TONES = frozenset({"complied"})

XSTEST_FILES = {
    "xstest-gpt4": "xstest_v2_completions_gpt4.csv",
    "xstest-llama2": "xstest_v2_completions_llama2orig.csv",
}
SOURCES = ("xstest-gpt4", "xstest-llama2", "gptfuzz", "reuter", "coconot")


@dataclass(frozen=True)
class LabelledResponse:
    """One labelled response: ``text``, ``is_refusal``, ``source`` (one of :data:`SOURCES`),
    ``group`` (``source``, or ``coconot:<category>`` for CoCoNot) and the record's ``id``."""

    id: str
    text: str
    is_refusal: bool
    source: str
    group: str


def xstest_is_refusal(final_label: str) -> bool:
    """XSTest ``final_label`` -> refusal. Raises ``ValueError`` for an unknown label."""
    if final_label in XSTEST_REFUSAL_LABELS:
        return True
    if final_label in XSTEST_COMPLIANCE_LABELS:
        return False
    raise ValueError(f"unknown XSTest final_label {final_label!r}")


def reuter_is_refusal(tone: str) -> bool:
    """Reuter ``tone`` -> refusal: every tone but ``complied`` (the paper's mapping)."""
    return tone not in REUTER_COMPLIANT_TONES


def gptfuzz_is_refusal(record: dict[str, object]) -> bool:
    """GPTFuzz record -> refusal: ``is_refusal`` (= not jailbroken). ``ValueError`` if absent."""
    value = record.get("is_refusal")
    if not isinstance(value, bool):
        raise ValueError(f"GPTFuzz record {record.get('id')!r} has no boolean is_refusal")
    return value


def _jsonl(path: Path) -> Iterator[dict[str, object]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def load_xstest(shared_data: Path, source: str) -> list[LabelledResponse]:
    """The 450 completions of one XSTest model (``source`` a key of :data:`XSTEST_FILES`)."""
    path = shared_data / "xstest" / XSTEST_FILES[source]
    with path.open(newline="", encoding="utf-8") as fh:
        return [
            LabelledResponse(
                f"{source}-{row['id']}",
                row["completion"],
                xstest_is_refusal(row["final_label"]),
                source,
                source,
            )
            for row in csv.DictReader(fh)
        ]


def load_gptfuzz(shared_data: Path) -> list[LabelledResponse]:
    """GPTFuzz responses, exact duplicate responses dropped (first kept)."""
    seen: set[str] = set()
    rows: list[LabelledResponse] = []
    for rec in _jsonl(shared_data / "gptfuzz" / "gptfuzz_train.jsonl"):
        text = str(rec.get("response") or "")
        if not text.strip() or text in seen:
            continue
        seen.add(text)
        rows.append(
            LabelledResponse(str(rec["id"]), text, gptfuzz_is_refusal(rec), "gptfuzz", "gptfuzz")
        )
    return rows


def load_reuter(shared_data: Path) -> list[LabelledResponse]:
    """Reuter & Schulze ChatGPT responses, refusal = tone other than ``complied``."""
    return [
        LabelledResponse(
            str(rec["id"]),
            str(rec["response"]),
            reuter_is_refusal(str(rec["tone"])),
            "reuter",
            "reuter",
        )
        for rec in _jsonl(shared_data / "reuter" / "reuter_hand_labeled.jsonl")
    ]


def load_coconot(shared_data: Path) -> list[LabelledResponse]:
    """CoCoNot refusals (``is_refusal`` as given) and contrast answers with a response (False)."""
    rows: list[LabelledResponse] = []
    for name, contrast in (("coconot_refusals.jsonl", False), ("coconot_contrast.jsonl", True)):
        for rec in _jsonl(shared_data / "coconot" / name):
            text = rec.get("response")
            if not isinstance(text, str) or not text.strip():
                continue
            label = False if contrast else bool(rec["is_refusal"])
            rows.append(
                LabelledResponse(
                    str(rec["id"]), text, label, "coconot", f"coconot:{rec['category']}"
                )
            )
    return rows


def load_refusal_examples(shared_data: Path) -> list[LabelledResponse]:
    """Every labelled response of :data:`SOURCES`, in a fixed order (source, then file order).

    Raises ``FileNotFoundError`` when a file of the shared data is missing and ``ValueError``
    for a label outside the documented ones.
    """
    rows: list[LabelledResponse] = []
    for source in XSTEST_FILES:
        rows += load_xstest(shared_data, source)
    rows += load_gptfuzz(shared_data)
    rows += load_reuter(shared_data)
    rows += load_coconot(shared_data)
    return rows
