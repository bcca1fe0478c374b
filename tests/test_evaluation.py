"""Agreement figures: labels read from attributes, confusion counts and rates, and how
``eval`` prints them."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from rich.console import Console

from processors.evaluation import (
    EvalItem,
    Labels,
    binary_agreement,
    evaluate,
    labels_from_attributes,
)
from refusal_audit.audit.evaluation import eval_item
from refusal_audit.audit.run_report import print_eval
from schemas.events import ClassifierSignal, RefusalEvent, StoredEvent


def test_labels_from_xstest_and_coconot_attributes() -> None:
    xs = labels_from_attributes({"final_label": "3_partial_refusal", "type": "contrast_homonyms"})
    assert xs == Labels(is_refusal=True, is_over_refusal=False, category=None)
    safe = labels_from_attributes({"final_label": "1_full_compliance", "type": "homonyms"})
    assert safe == Labels(is_refusal=False, is_over_refusal=True, category=None)
    co = labels_from_attributes({"is_refusal": "true", "category": "Unsupported requests"})
    assert co == Labels(is_refusal=True, is_over_refusal=None, category="capability_boundary")
    assert labels_from_attributes({}) == Labels(None, None, None)


def test_binary_agreement_counts_and_rates() -> None:
    truth = [True, True, True, False, False, False, False, True]
    pred = [True, True, False, False, True, False, False, True]
    r = binary_agreement(truth, pred)
    assert (r["tp"], r["fp"], r["fn"], r["tn"]) == (3, 1, 1, 3)
    assert r["precision"]["value"] == pytest.approx(3 / 4)
    assert r["recall"]["value"] == pytest.approx(3 / 4)
    assert r["balanced_accuracy"] == pytest.approx((3 / 4 + 3 / 4) / 2)
    assert r["precision"]["low"] < 0.75 < r["precision"]["high"]
    with pytest.raises(ValueError):
        binary_agreement([True], [])


def test_evaluate_sections_follow_the_labels() -> None:
    items = [
        EvalItem(Labels(True, True, None), True, "over_refusal", True, 0.9),
        EvalItem(Labels(True, False, None), True, "genuine_safety_refusal", False, 0.2),
        EvalItem(Labels(True, True, None), True, "policy_gray_zone", False, 0.6),
        EvalItem(Labels(False, None, None), False),
        EvalItem(Labels(True, None, "capability_boundary"), True, "capability_boundary", False),
    ]
    report = evaluate(items)
    assert report["refusal_detection"]["recall"]["value"] == 1.0
    fp = report["false_positive_detection"]
    assert (fp["tp"], fp["fn"], fp["tn"]) == (1, 1, 1)
    assert fp["roc_auc"] == pytest.approx(1.0)
    assert report["category_agreement"]["agreement"]["value"] == 1.0
    assert "category_agreement" not in evaluate(items[:4])


def test_a_refusal_label_in_the_classifier_is_scored_with_the_text_prefilter_alone() -> None:
    # the pipeline trusted the mapped label, so its decision would equal the label: the items
    # are scored with the text pre-filter's own decision, apart from attribute labels
    items = [
        EvalItem(
            Labels(True, None, "clarification_needed"),
            False,
            "clarification_needed",
            label_in_classifier=True,
        ),
        EvalItem(
            Labels(True, None, "genuine_safety_refusal"),
            True,
            "over_refusal",
            label_in_classifier=True,
        ),
        EvalItem(Labels(False, None, None), False, label_in_classifier=True),
    ]
    report = evaluate(items)
    assert report["refusal_label_in_classifier"] == 3
    assert "refusal_detection" not in report
    text = report["text_prefilter_detection"]
    assert (text["tp"], text["fn"], text["tn"], text["fp"]) == (1, 1, 1, 0)
    assert report["category_agreement"]["agreement"]["k"] == 1
    mixed = evaluate([*items, EvalItem(Labels(True, None, None), True)])
    assert mixed["refusal_detection"]["n"] == 1 and mixed["text_prefilter_detection"]["n"] == 3


def test_over_refusal_and_category_sections_state_their_denominators() -> None:
    items = [
        EvalItem(Labels(True, True, "over_refusal"), True, "over_refusal", True, 0.9),
        EvalItem(Labels(True, False, "over_refusal"), True, "policy_gray_zone", False, 0.2),
        EvalItem(Labels(True, True, "over_refusal"), False),  # a refusal the pre-filter missed
        EvalItem(Labels(False, True, None), True, "over_refusal", True, 0.8),  # not a refusal
    ]
    fp = evaluate(items)["false_positive_detection"]
    assert fp["n"] == 2  # audited refusals only
    assert (fp["labelled_refusals"], fp["labelled_over_refusals"]) == (3, 2)
    categories = evaluate(items)["category_agreement"]
    assert categories["agreement"]["n"] == 2 and categories["labelled"] == 3


def _stored(response: str, attributes: dict[str, str], verdict: bool | None) -> StoredEvent:
    event = RefusalEvent(
        log_id="e1",
        event_time=datetime(2026, 1, 5, tzinfo=UTC),
        request="Tell me about the book.",
        response=response,
        model="m",
        attributes=attributes,
        classifier=ClassifierSignal(is_refusal=verdict) if verdict is not None else None,
    )
    return StoredEvent(
        event=event,
        is_refusal=True if verdict is None else verdict,
        refusal_kind="full",
        refusal_score=1.0,
        source="test",
        ingested_at=datetime(2026, 1, 5, tzinfo=UTC),
    )


def test_eval_item_takes_the_classifier_label_and_the_text_prefilter_decision() -> None:
    question = "Which book do you mean? Could you tell me its title or author?"
    item = eval_item(_stored(question, {"category": "Incomplete requests"}, True), None, None)
    assert item.label_in_classifier
    assert item.labels.is_refusal is True
    assert item.labels.category == "clarification_needed"
    assert item.detected_refusal is False  # the text pre-filter does not read it as a refusal
    # a refusal label in the attributes wins: the pipeline's decision is scored against it
    labelled = eval_item(_stored(question, {"is_refusal": "false"}, True), None, None)
    assert not labelled.label_in_classifier and labelled.detected_refusal is True
    assert labelled.labels.is_refusal is False
    plain = eval_item(_stored("I can't help with that.", {}, None), None, None)
    assert not plain.label_in_classifier and plain.labels.is_refusal is None


def _figures(**extra: object) -> dict[str, object]:
    return {
        "engine": {"name": "local", "model": "m", "version": "v", "prompt_version": "p"},
        "records": 3,
        "rejected": 1,
        "duplicates": 0,
        "failed_batches": 0,
        "failed_events": 0,
        "failures": [
            {
                "source": "data/coconot.jsonl",
                "location": "line 167",
                "reason_code": "missing_field",
                "reason": "source field 'response' is null",
            }
        ],
        **extra,
    }


def _printed(figures: dict[str, object]) -> str:
    console = Console(file=io.StringIO(), width=200)
    print_eval(figures, console)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return " ".join(str(out).split())


def test_print_eval_says_why_nothing_is_measured_and_lists_rejected_records() -> None:
    items = [EvalItem(Labels(None, None, "capability_boundary"), True, "capability_boundary")]
    figures = _figures(**evaluate(items))
    out = _printed(figures)
    assert "Agreement with the labels: nothing to measure" in out
    assert "Refusal detection: not measured" in out and "Over-refusal" in out
    assert "3 records read, 1 event evaluated; 1 rejected record" in out
    for cell in ("data/coconot.jsonl", "line 167", "missing_field", "source field 'response'"):
        assert cell in out


def test_print_eval_explains_a_label_mapped_into_the_classifier() -> None:
    items = [
        EvalItem(
            Labels(True, None, "capability_boundary"),
            False,
            "capability_boundary",
            label_in_classifier=True,
        ),
        EvalItem(
            Labels(True, None, "capability_boundary"),
            True,
            "over_refusal",
            label_in_classifier=True,
        ),
    ]
    out = _printed(_figures(**evaluate(items)))
    assert "refusal detection, text pre-filter alone" in out
    assert "The refusal label of 2 events was mapped into the classifier" in out
    assert "nothing to measure there" in out
    assert "over the 2 audited events of the 2 with a category label" in out
