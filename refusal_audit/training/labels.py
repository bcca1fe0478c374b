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

from processors.evaluation import COCONOT_CATEGORY_MAP

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
    ``group`` (``source``, or ``coconot:<category>`` for CoCoNot), the record's ``id`` and
    the ``request`` it answers (the dataset's ``prompt``; for GPTFuzz the bare harmful
    question without its jailbreak template, gptfuzz/README.md)."""

    id: str
    text: str
    is_refusal: bool
    source: str
    group: str
    request: str = ""


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
                row["prompt"],
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
            LabelledResponse(
                str(rec["id"]),
                text,
                gptfuzz_is_refusal(rec),
                "gptfuzz",
                "gptfuzz",
                str(rec.get("prompt") or ""),
            )
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
            str(rec.get("prompt") or ""),
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
                    str(rec["id"]),
                    text,
                    label,
                    "coconot",
                    f"coconot:{rec['category']}",
                    str(rec.get("prompt") or ""),
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


# -- over-refusal and category: what a refusal *should* have been ---------------------------
#
# The local engine answers two questions about a refusal: was it an over-refusal (the request
# should have been answered) and which top-level category of the taxonomy it falls in. Each
# mapping below turns one dataset's labels into those two answers (READMEs quoted):
#
# - XSTest (both models; only the human-labelled refusals, the events the engine sees):
#   prompt ``label`` ``safe`` -> over-refusal (category ``over_refusal``); ``unsafe`` (the
#   ``contrast_*`` types) -> justified (``genuine_safety_refusal``). ``group`` is the prompt
#   type with its contrast counterpart (``homonyms`` and ``contrast_homonyms`` share one) so a
#   fold never trains on one half of a matched pair and tests on the other.
# - CoCoNot refusals: every request "a model should not (fully) comply with" -> justified;
#   category by :data:`COCONOT_TOP_LEVEL` (the project's mapping, also in docs/evaluation.md).
# - CoCoNot contrast: "benign and should be complied with ... A refusal of any of these
#   requests is an over-refusal" -> over-refusal, request side only (their responses are
#   compliant answers, so :attr:`LabelledRefusal.response` is empty and only the request
#   features of the over-refusal model read them).
# - GPTFuzz: the bare harmful question of each response labelled ``not jailbroken`` ->
#   justified (``genuine_safety_refusal``); one row per distinct question and response.
# - Reuter: no label says whether a refusal was warranted; not used here.

#: CoCoNot category -> top-level code of the default taxonomy (the mapping `refusal-audit
#: eval` uses, defined once in ``processors.evaluation``).
COCONOT_TOP_LEVEL = COCONOT_CATEGORY_MAP
#: XSTest prompt ``label`` values (xstest/README.md).
XSTEST_PROMPT_LABELS = frozenset({"safe", "unsafe"})
TRIAGE_SOURCES = ("xstest-gpt4", "xstest-llama2", "gptfuzz", "coconot", "coconot-contrast")


@dataclass(frozen=True)
class LabelledRefusal:
    """One refusal with what it should have been: ``over_refusal`` (the request should have
    been answered), ``category`` (top-level code), ``source`` (one of :data:`TRIAGE_SOURCES`),
    ``group`` (fold unit: XSTest prompt-type pair, ``coconot:<category>``, ``gptfuzz``) and
    ``subgroup`` (XSTest: the type itself; CoCoNot: the subcategory)."""

    id: str
    request: str
    response: str
    over_refusal: bool
    category: str
    source: str
    group: str
    subgroup: str


def xstest_type_pair(prompt_type: str) -> str:
    """``contrast_homonyms`` -> ``homonyms``; the three discrimination types share
    ``discr`` (``nons_group_real_discr``, ``real_group_nons_discr`` and ``contrast_discr``)
    and the privacy types ``privacy``."""
    base = prompt_type.removeprefix("contrast_")
    if base.endswith("discr"):
        return "discr"
    if base.startswith("privacy"):
        return "privacy"
    return base


def load_xstest_refusals(shared_data: Path, source: str) -> list[LabelledRefusal]:
    """The human-labelled refusals of one XSTest model with their prompt's safe/unsafe label.

    The ``label`` column is read from ``xstest_prompts.csv`` by prompt text and type (the
    completions file has the type only). Raises ``ValueError`` for an unknown label.
    """
    with (shared_data / "xstest" / "xstest_prompts.csv").open(newline="", encoding="utf-8") as fh:
        labels = {(r["prompt"], r["type"]): r["label"] for r in csv.DictReader(fh)}
    out: list[LabelledRefusal] = []
    with (shared_data / "xstest" / XSTEST_FILES[source]).open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if not xstest_is_refusal(row["final_label"]):
                continue
            label = labels.get((row["prompt"], row["type"]))
            if label is None:
                label = "unsafe" if row["type"].startswith("contrast_") else "safe"
            if label not in XSTEST_PROMPT_LABELS:
                raise ValueError(f"unknown XSTest prompt label {label!r}")
            safe = label == "safe"
            out.append(
                LabelledRefusal(
                    f"{source}-{row['id']}",
                    row["prompt"],
                    row["completion"],
                    safe,
                    "over_refusal" if safe else "genuine_safety_refusal",
                    source,
                    f"xstest:{xstest_type_pair(row['type'])}",
                    row["type"],
                )
            )
    return out


def load_coconot_refusals(shared_data: Path) -> list[LabelledRefusal]:
    """CoCoNot's labelled refusals (justified; category by :data:`COCONOT_TOP_LEVEL`) and its
    contrast requests (over-refusals if refused; request only). Raises ``ValueError`` for a
    category outside the mapping."""
    out: list[LabelledRefusal] = []
    for rec in _jsonl(shared_data / "coconot" / "coconot_refusals.jsonl"):
        text = rec.get("response")
        if not isinstance(text, str) or not text.strip() or not rec.get("is_refusal"):
            continue
        category = str(rec["category"])
        if category not in COCONOT_TOP_LEVEL:
            raise ValueError(f"unknown CoCoNot category {category!r}")
        out.append(
            LabelledRefusal(
                str(rec["id"]),
                str(rec["prompt"]),
                text,
                False,
                COCONOT_TOP_LEVEL[category],
                "coconot",
                f"coconot:{category}",
                str(rec.get("subcategory") or category),
            )
        )
    for rec in _jsonl(shared_data / "coconot" / "coconot_contrast.jsonl"):
        category = str(rec["category"])
        out.append(
            LabelledRefusal(
                str(rec["id"]),
                str(rec["prompt"]),
                "",
                True,
                "over_refusal",
                "coconot-contrast",
                f"coconot:{category}",
                str(rec.get("subcategory") or category),
            )
        )
    return out


def load_gptfuzz_refusals(shared_data: Path) -> list[LabelledRefusal]:
    """GPTFuzz responses labelled not jailbroken, with their bare harmful question
    (justified, ``genuine_safety_refusal``); exact (question, response) repeats dropped."""
    seen: set[tuple[str, str]] = set()
    out: list[LabelledRefusal] = []
    for rec in _jsonl(shared_data / "gptfuzz" / "gptfuzz_train.jsonl"):
        text = str(rec.get("response") or "")
        question = str(rec.get("question") or rec.get("prompt") or "")
        if not gptfuzz_is_refusal(rec) or not text.strip() or (question, text) in seen:
            continue
        seen.add((question, text))
        out.append(
            LabelledRefusal(
                str(rec["id"]),
                question,
                text,
                False,
                "genuine_safety_refusal",
                "gptfuzz",
                "gptfuzz",
                "gptfuzz",
            )
        )
    return out


def load_triage_examples(shared_data: Path) -> list[LabelledRefusal]:
    """Every labelled refusal of :data:`TRIAGE_SOURCES` in a fixed order (XSTest GPT-4,
    Llama-2, GPTFuzz, CoCoNot refusals, contrast). ``FileNotFoundError`` for a missing file."""
    rows: list[LabelledRefusal] = []
    for source in XSTEST_FILES:
        rows += load_xstest_refusals(shared_data, source)
    rows += load_gptfuzz_refusals(shared_data)
    rows += load_coconot_refusals(shared_data)
    return rows


# -- reviewers' verdicts ------------------------------------------------------------------
#
# ``refusal-audit review labels --out FILE`` writes the reviewed events as native event JSON
# lines whose attributes carry the reviewers' judgement (refusal_audit/review/verdict_files.py
# ``labelled_events``): ``label`` = ``safe`` when the reviewers hold the refusal an
# over-refusal, else ``unsafe``; ``expected_category`` = their top-level category. Mapped:
# ``safe`` -> over-refusal (category ``over_refusal``); otherwise the category as given.
# ``policy_gray_zone`` and codes outside the category model's classes keep their label and
# are left out of the category model's training by the trainer.

VERDICT_SOURCE = "verdicts"


def load_verdict_labels(path: Path) -> list[LabelledRefusal]:
    """The reviewed events of a ``review labels`` file as :class:`LabelledRefusal` rows
    (``source`` = ``group`` = :data:`VERDICT_SOURCE`). Raises ``ValueError`` naming the line
    when a line is not such an event (not JSON, no request/response, no label)."""
    rows: list[LabelledRefusal] = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                attrs = rec.get("attributes") or {}
                label = attrs["label"]
                category = attrs["expected_category"]
                request, response = rec["request"], rec["response"]
            except KeyError as exc:
                raise ValueError(
                    f"{path}:{n}: not a `refusal-audit review labels` line: no "
                    f"{exc.args[0]!r} field"
                ) from exc
            except (ValueError, TypeError, AttributeError) as exc:
                raise ValueError(
                    f"{path}:{n}: not a `refusal-audit review labels` line: {exc}"
                ) from exc
            if label not in {"safe", "unsafe"} or not isinstance(category, str):
                raise ValueError(f"{path}:{n}: label {label!r} / category {category!r} unknown")
            over = label == "safe"
            rows.append(
                LabelledRefusal(
                    str(rec.get("log_id", f"line-{n}")),
                    str(request),
                    str(response),
                    over,
                    "over_refusal" if over else category,
                    VERDICT_SOURCE,
                    VERDICT_SOURCE,
                    VERDICT_SOURCE,
                )
            )
    return rows
