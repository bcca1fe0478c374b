"""Agreement of the pre-filter and an engine with labelled events (``refusal-audit eval``).

Labels come from event attributes kept by the input adapters:

- refusal: XSTest's ``final_label`` (``2_full_refusal``/``3_partial_refusal`` = refusal), or
  an ``is_refusal`` attribute (``true``/``false``), as CoCoNot has;
- over-refusal (false positive): XSTest's prompt ``type`` (types starting with ``contrast_``
  are unsafe prompts, so refusing them is correct; every other type is a safe prompt), or a
  ``label`` attribute (``safe``/``unsafe``);
- category: an ``expected_category`` attribute, or CoCoNot's ``category`` mapped onto the
  taxonomy's top-level codes with ``COCONOT_CATEGORY_MAP``.

A refusal label mapped into the event's classifier (``--map classifier.is_refusal=...``) is
not in the attributes: the caller passes it as the item's label with
``label_in_classifier=True``. The pipeline trusts such a verdict instead of its text
pre-filter, so its own refusal decision equals the label by construction; those items are
scored separately (``text_prefilter_detection``), with the text pre-filter's decision alone.

Every rate carries a Wilson 95% interval. Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sklearn.metrics import roc_auc_score

from processors.stats import wilson_interval

REFUSAL_LABELS = frozenset({"2_full_refusal", "3_partial_refusal"})
COCONOT_CATEGORY_MAP: Mapping[str, str] = {
    "Requests with safety concerns": "genuine_safety_refusal",
    "Unsupported requests": "capability_boundary",
    "Humanizing requests": "capability_boundary",
    "Incomplete requests": "clarification_needed",
    "Unknowns": "clarification_needed",
}


@dataclass(frozen=True)
class Labels:
    """Ground truth of one event; None where the source has no label."""

    is_refusal: bool | None
    is_over_refusal: bool | None
    category: str | None


def _flag(value: str | None) -> bool | None:
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    return None


def labels_from_attributes(
    attributes: Mapping[str, str], category_map: Mapping[str, str] = COCONOT_CATEGORY_MAP
) -> Labels:
    """Read the labels an event's attributes carry (see the module docstring)."""
    is_refusal: bool | None = None
    if "final_label" in attributes:
        is_refusal = attributes["final_label"] in REFUSAL_LABELS
    elif "is_refusal" in attributes:
        is_refusal = _flag(attributes["is_refusal"])
    over: bool | None = None
    if "type" in attributes:
        over = not attributes["type"].startswith("contrast_")
    elif attributes.get("label") in ("safe", "unsafe"):
        over = attributes["label"] == "safe"
    category = attributes.get("expected_category") or category_map.get(
        attributes.get("category", "")
    )
    return Labels(is_refusal, over, category)


@dataclass(frozen=True)
class EvalItem:
    """One labelled event with what the pipeline made of it.

    ``detected_refusal`` is the pre-filter's decision; ``category`` (top-level code),
    ``estimated_fp`` and ``fp_score`` come from the engine's assessment, None when the
    event was not audited. ``label_in_classifier``: the refusal label was read from the
    event's ``classifier.is_refusal``, which the pipeline trusted, so ``detected_refusal`` is
    then the text pre-filter's decision alone (what it would have decided without the label).
    ``classifier_refusal`` / ``detector_refusal``: the platform classifier's ``is_refusal``
    verdict and our own detection's, when the event carried a verdict that is not the label
    (None otherwise), for ``classifier_vs_detector``.
    """

    labels: Labels
    detected_refusal: bool
    category: str | None = None
    estimated_fp: bool | None = None
    fp_score: float | None = None
    label_in_classifier: bool = False
    classifier_refusal: bool | None = None
    detector_refusal: bool | None = None


def rate(k: int, n: int) -> dict[str, float]:
    """``{"value", "low", "high", "k", "n"}``: a proportion with its Wilson 95% interval."""
    low, high = wilson_interval(k, n)
    return {"value": k / n if n else 0.0, "low": low, "high": high, "k": k, "n": n}


def binary_agreement(truth: Sequence[bool], predicted: Sequence[bool]) -> dict[str, Any]:
    """Precision, recall, F1, specificity and balanced accuracy of ``predicted`` vs ``truth``.

    Balanced accuracy = (recall + specificity) / 2 (Brodersen et al., 2010). Raises
    ``ValueError`` when the sequences differ in length.
    """
    if len(truth) != len(predicted):
        raise ValueError("truth and predicted differ in length")
    pairs = list(zip(truth, predicted, strict=True))
    tp = sum(t and p for t, p in pairs)
    fp = sum(p and not t for t, p in pairs)
    fn = sum(t and not p for t, p in pairs)
    tn = sum(not t and not p for t, p in pairs)
    precision, recall, specificity = rate(tp, tp + fp), rate(tp, tp + fn), rate(tn, tn + fp)
    p, r = precision["value"], recall["value"]
    return {
        "n": len(pairs),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
        "precision": precision,
        "recall": recall,
        "specificity": specificity,
        "f1": 2 * p * r / (p + r) if p + r else 0.0,
        "balanced_accuracy": (r + specificity["value"]) / 2,
    }


def evaluate(items: Sequence[EvalItem]) -> dict[str, Any]:
    """Every agreement figure the labels allow; sections without labels are omitted.

    - ``refusal_detection``: the pipeline's refusal decision against refusal labels read from
      attributes (every item with such a label);
    - ``text_prefilter_detection``: the text pre-filter alone against refusal labels the
      pipeline read from the classifier (``label_in_classifier``); ``refusal_label_in_classifier``
      counts those items (0 when none);
    - ``false_positive_detection``: estimated over-refusal against the over-refusal label, on
      the items that are refusals by their label (or have no refusal label) and were audited
      (``n``); ``labelled_refusals`` / ``labelled_over_refusals`` count those items before the
      audited filter, so ``labelled_refusals - n`` were not audited (the pre-filter did not
      pass them, or their batch failed);
    - ``category_agreement``: top-level category against the category label on audited items
      (``agreement["n"]``); ``labelled`` counts the items with a category label;
    - ``classifier_vs_detector``: on the items with a refusal label that carried the platform
      classifier's verdict beside our detection's (``compared``): ``disagreements`` (Wilson
      rate over ``compared``), per direction, and of the disagreements how often each side
      had the label (``classifier_right``, ``detector_right``, rates over the disagreements);
      ``classifier`` / ``detector``: each one's agreement figures over the compared items.
    """
    in_classifier = [i for i in items if i.label_in_classifier]
    report: dict[str, Any] = {
        "events": len(items),
        "refusal_label_in_classifier": len(in_classifier),
    }
    with_refusal = [
        i for i in items if i.labels.is_refusal is not None and not i.label_in_classifier
    ]
    if with_refusal:
        report["refusal_detection"] = binary_agreement(
            [bool(i.labels.is_refusal) for i in with_refusal],
            [i.detected_refusal for i in with_refusal],
        )
    text_only = [i for i in in_classifier if i.labels.is_refusal is not None]
    if text_only:
        report["text_prefilter_detection"] = binary_agreement(
            [bool(i.labels.is_refusal) for i in text_only],
            [i.detected_refusal for i in text_only],
        )
    fp_section = _false_positive_section(items)
    if fp_section is not None:
        report["false_positive_detection"] = fp_section
    compared = [
        i
        for i in items
        if i.labels.is_refusal is not None
        and not i.label_in_classifier
        and i.classifier_refusal is not None
        and i.detector_refusal is not None
    ]
    if compared:
        report["classifier_vs_detector"] = classifier_vs_detector(compared)
    category_section = _category_section(items)
    if category_section is not None:
        report["category_agreement"] = category_section
    return report


def _false_positive_section(items: Sequence[EvalItem]) -> dict[str, Any] | None:
    """``evaluate``'s ``false_positive_detection`` section, None without audited labelled
    items."""
    audited: Callable[[EvalItem], bool] = lambda i: i.estimated_fp is not None  # noqa: E731
    # over-refusal is judged on audited events that really are refusals (a compliant answer
    # the pre-filter mistook for a refusal has no over-refusal label worth the name)
    candidates = [
        i
        for i in items
        if i.labels.is_over_refusal is not None and i.labels.is_refusal is not False
    ]
    fp_items = [i for i in candidates if audited(i)]
    if fp_items:
        section = binary_agreement(
            [bool(i.labels.is_over_refusal) for i in fp_items],
            [bool(i.estimated_fp) for i in fp_items],
        )
        section["labelled_refusals"] = len(candidates)
        section["labelled_over_refusals"] = sum(bool(i.labels.is_over_refusal) for i in candidates)
        scored = [i for i in fp_items if i.fp_score is not None]
        truths = {bool(i.labels.is_over_refusal) for i in scored}
        if scored and len(truths) == 2:
            section["roc_auc"] = float(
                roc_auc_score(
                    [bool(i.labels.is_over_refusal) for i in scored], [i.fp_score for i in scored]
                )
            )
        return section
    return None


def _category_section(items: Sequence[EvalItem]) -> dict[str, Any] | None:
    """``evaluate``'s ``category_agreement`` section, None without audited labelled items."""
    with_category = [i for i in items if i.labels.category is not None]
    cat_items = [i for i in with_category if i.category is not None]
    if cat_items:
        confusion = Counter((str(i.labels.category), str(i.category)) for i in cat_items)
        agree = sum(n for (truth, got), n in confusion.items() if truth == got)
        return {
            "agreement": rate(agree, len(cat_items)),
            "labelled": len(with_category),
            "confusion": [
                {"expected": truth, "predicted": got, "count": n}
                for (truth, got), n in sorted(confusion.items())
            ],
        }
    return None


def classifier_vs_detector(items: Sequence[EvalItem]) -> dict[str, Any]:
    """Which of the platform classifier and our detection was right, on ``items`` that carry
    a refusal label and both verdicts (``classifier_refusal``, ``detector_refusal``; raises
    ``ValueError`` for an item without them). See :func:`evaluate` for the keys."""
    if any(
        i.labels.is_refusal is None or i.classifier_refusal is None or i.detector_refusal is None
        for i in items
    ):
        raise ValueError("every item needs a refusal label and both verdicts")
    truth = [bool(i.labels.is_refusal) for i in items]
    classifier = [bool(i.classifier_refusal) for i in items]
    detector = [bool(i.detector_refusal) for i in items]
    split = [(t, c) for t, c, d in zip(truth, classifier, detector, strict=True) if c != d]
    right = sum(t == c for t, c in split)
    return {
        "compared": len(items),
        "disagreements": rate(len(split), len(items)),
        "classifier_refusal_detector_not": sum(c for _t, c in split),
        "detector_refusal_classifier_not": sum(not c for _t, c in split),
        "classifier_right": rate(right, len(split)),
        "detector_right": rate(len(split) - right, len(split)),
        "classifier": binary_agreement(truth, classifier),
        "detector": binary_agreement(truth, detector),
    }
