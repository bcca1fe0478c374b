"""Harness validation of engine results: every rule, and summary recomputation."""

from __future__ import annotations

import pytest

from processors.validation import (
    AuditValidationError,
    find_issues,
    recompute_summary,
    validate_result,
)
from schemas.audit import AuditResult, AuditSummary, IndividualAssessment, PolicyGapFlag
from schemas.policy import Clause, PolicyBundle, TaxonomyCode

BUNDLE = PolicyBundle(
    name="t",
    version="v",
    allowed_use_markdown="",
    product_safety_markdown="",
    taxonomy_markdown="",
    clauses=(
        Clause(clause_id="AUP-1.1", document="allowed_use", number="1.1", text="education"),
        Clause(clause_id="AUP-2.1", document="allowed_use", number="2.1", text="weapons"),
    ),
    taxonomy=(
        TaxonomyCode(code="over_refusal", definition="d"),
        TaxonomyCode(code="genuine_safety_refusal", definition="d"),
        TaxonomyCode(code="weapons", definition="d", parent="genuine_safety_refusal"),
    ),
)


def item(log_id: str, category: str = "weapons", fp: bool = False, clause: str | None = "AUP-2.1",
         review: bool = False) -> IndividualAssessment:
    return IndividualAssessment(log_id=log_id, category=category, is_estimated_false_positive=fp,
                                policy_clause_cited=clause, assessment_rationale="because",
                                requires_human_review=review)


def result(items: list[IndividualAssessment], gaps: list[PolicyGapFlag] | None = None,
           claimed_total: int = 999) -> AuditResult:
    summary = AuditSummary(total_refusals=claimed_total, categorization={"made_up": 7},
                           estimated_false_positives=42, policy_gap_flags=gaps or [],
                           trends_identified=["t"])
    return AuditResult(audit_summary=summary, individual_assessments=items)


def codes(r: AuditResult, ids: list[str]) -> list[str]:
    return sorted(i.code for i in find_issues(r, ids, BUNDLE))


def test_valid_result_gets_recomputed_summary_in_batch_order() -> None:
    r = result([item("b"), item("a", "over_refusal", fp=True, clause="AUP-1.1", review=True)])
    checked = validate_result(r, ["a", "b"], BUNDLE)
    assert [x.log_id for x in checked.individual_assessments] == ["a", "b"]
    s = checked.audit_summary
    assert s.total_refusals == 2
    assert s.categorization == {"over_refusal": 1, "weapons": 1}
    assert s.estimated_false_positives == 1
    assert s.trends_identified == ["t"]


def test_missing_unknown_and_duplicate_ids() -> None:
    r = result([item("a"), item("a"), item("zzz")])
    assert codes(r, ["a", "b"]) == ["duplicate_assessment", "missing_assessment", "unknown_log_id"]


def test_unknown_category_and_clause() -> None:
    r = result([item("a", category="vibes"), item("b", clause="AUP-9.9")])
    assert codes(r, ["a", "b"]) == ["unknown_category", "unknown_clause"]


def test_null_clause_is_allowed() -> None:
    assert codes(result([item("a", clause=None)]), ["a"]) == []


def test_false_positive_and_gap_need_review() -> None:
    gap = PolicyGapFlag(description="uncovered", example_log_ids=["b", "ghost"])
    r = result([item("a", "over_refusal", fp=True, clause=None), item("b")], [gap])
    assert codes(r, ["a", "b"]) == [
        "false_positive_without_review", "gap_without_review", "unknown_gap_example"
    ]


def test_validate_raises_with_all_issues() -> None:
    with pytest.raises(AuditValidationError) as info:
        validate_result(result([item("x", category="nope")]), ["a"], BUNDLE)
    assert {i.code for i in info.value.issues} == {
        "missing_assessment", "unknown_log_id", "unknown_category"
    }


def test_flags_with_one_description_become_one_flag_holding_all_its_refusals() -> None:
    """A run's summary gathers its batches' flags: one gap flagged by several batches is
    listed once, with every log id once, in order; other flags keep their place."""
    flags = [
        PolicyGapFlag(description="zoning minutes", example_log_ids=["a", "b"]),
        PolicyGapFlag(description="tenancy law", example_log_ids=["c"]),
        PolicyGapFlag(description="zoning minutes", example_log_ids=["b", "d"]),
    ]
    summary = recompute_summary([item("a"), item("b"), item("c"), item("d")], flags, [])
    assert summary.policy_gap_flags == [
        PolicyGapFlag(description="zoning minutes", example_log_ids=["a", "b", "d"]),
        PolicyGapFlag(description="tenancy law", example_log_ids=["c"]),
    ]
