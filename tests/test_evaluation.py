"""Agreement figures: labels read from attributes, confusion counts and rates."""

from __future__ import annotations

import pytest

from processors.evaluation import (
    EvalItem,
    Labels,
    binary_agreement,
    evaluate,
    labels_from_attributes,
)


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
