"""Harness-side validation of any engine's audit result.

The harness never trusts an engine (an LLM least of all): it checks the result against the
batch and the policy bundle and recomputes every summary count from the individual
assessments. Rules:

- every input log_id is assessed exactly once, and no unknown log_id appears;
- every category is a code of the bundle's taxonomy;
- a cited clause exists in the bundle (or the citation is null);
- an estimated false positive, and every example of a policy gap, requires human review;
- policy-gap flags cite only log ids of the batch;
- ``audit_summary`` counts are recomputed, never taken from the engine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from schemas.audit import AuditResult, AuditSummary, IndividualAssessment, PolicyGapFlag
from schemas.policy import PolicyBundle


@dataclass(frozen=True)
class ValidationIssue:
    """One broken rule. ``log_id`` names the assessment concerned (None for batch-level)."""

    code: str
    message: str
    log_id: str | None = None


class AuditValidationError(ValueError):
    """Raised by ``validate_result`` when a result breaks any rule; ``issues`` lists them all."""

    def __init__(self, issues: Sequence[ValidationIssue]) -> None:
        self.issues = list(issues)
        super().__init__("; ".join(f"{i.code}: {i.message}" for i in self.issues))


def find_issues(
    result: AuditResult, batch_log_ids: Sequence[str], bundle: PolicyBundle
) -> list[ValidationIssue]:
    """Return every rule ``result`` breaks for a batch of ``batch_log_ids`` (empty when valid)."""
    issues: list[ValidationIssue] = []
    expected = set(batch_log_ids)
    seen = Counter(a.log_id for a in result.individual_assessments)
    for log_id in batch_log_ids:
        if seen[log_id] == 0:
            issues.append(
                ValidationIssue("missing_assessment", f"no assessment for {log_id!r}", log_id)
            )
    for log_id, n in seen.items():
        if log_id not in expected:
            issues.append(
                ValidationIssue("unknown_log_id", f"{log_id!r} is not in the batch", log_id)
            )
        elif n > 1:
            issues.append(
                ValidationIssue("duplicate_assessment", f"{log_id!r} assessed {n} times", log_id)
            )
    codes = bundle.category_codes()
    gap_ids = {i for f in result.audit_summary.policy_gap_flags for i in f.example_log_ids}
    for a in result.individual_assessments:
        issues.extend(_assessment_issues(a, codes, bundle, a.log_id in gap_ids))
    for flag in result.audit_summary.policy_gap_flags:
        for log_id in flag.example_log_ids:
            if log_id not in expected:
                issues.append(
                    ValidationIssue(
                        "unknown_gap_example",
                        f"policy gap cites {log_id!r}, not in the batch",
                        log_id,
                    )
                )
    return issues


def _assessment_issues(
    a: IndividualAssessment, codes: frozenset[str], bundle: PolicyBundle, in_gap: bool
) -> list[ValidationIssue]:
    issues: list[ValidationIssue] = []
    if a.category not in codes:
        issues.append(
            ValidationIssue(
                "unknown_category", f"category {a.category!r} is not in the taxonomy", a.log_id
            )
        )
    if a.policy_clause_cited is not None and bundle.clause(a.policy_clause_cited) is None:
        issues.append(
            ValidationIssue(
                "unknown_clause", f"clause {a.policy_clause_cited!r} is not in the bundle", a.log_id
            )
        )
    if a.is_estimated_false_positive and not a.requires_human_review:
        issues.append(
            ValidationIssue(
                "false_positive_without_review",
                "a false positive must require human review",
                a.log_id,
            )
        )
    if in_gap and not a.requires_human_review:
        issues.append(
            ValidationIssue(
                "gap_without_review", "a policy-gap example must require human review", a.log_id
            )
        )
    return issues


def recompute_summary(
    assessments: Sequence[IndividualAssessment],
    policy_gap_flags: Sequence[PolicyGapFlag],
    trends: Sequence[str],
) -> AuditSummary:
    """The summary implied by ``assessments``: totals, category counts and false positives.

    Trend lines are carried over (they are not counts). Gap flags are carried over too, except
    that flags with the same description (e.g. one gap flagged by several batches of a run)
    become one flag, at the first one's place, with their example log ids merged (each once,
    in order), so a description is listed once and its flag holds all its refusals.
    """
    merged: dict[str, list[str]] = {}
    for flag in policy_gap_flags:
        merged.setdefault(flag.description, []).extend(flag.example_log_ids)
    return AuditSummary(
        total_refusals=len(assessments),
        categorization=dict(sorted(Counter(a.category for a in assessments).items())),
        estimated_false_positives=sum(a.is_estimated_false_positive for a in assessments),
        policy_gap_flags=[
            PolicyGapFlag(description=d, example_log_ids=list(dict.fromkeys(ids)))
            for d, ids in merged.items()
        ],
        trends_identified=list(trends),
    )


def validate_result(
    result: AuditResult, batch_log_ids: Sequence[str], bundle: PolicyBundle
) -> AuditResult:
    """Validate ``result`` and return it with a recomputed summary and assessments in batch order.

    Raises ``AuditValidationError`` listing every broken rule.
    """
    issues = find_issues(result, batch_log_ids, bundle)
    if issues:
        raise AuditValidationError(issues)
    by_id = {a.log_id: a for a in result.individual_assessments}
    ordered = [by_id[i] for i in batch_log_ids]
    summary = recompute_summary(
        ordered, result.audit_summary.policy_gap_flags, result.audit_summary.trends_identified
    )
    return AuditResult(audit_summary=summary, individual_assessments=ordered)
