"""The SQL fragments of the human-review counts (``review_agreement``,
``verified_false_positive_rate``, the review panels, and the daily review aggregates of
migration 0028, ``warehouse.daily``'s ``agreements`` and ``reviews``).

Kept apart from ``warehouse.review_queries`` (which re-exports them) so that
``warehouse.daily`` can build its aggregates from them while the named queries read
``warehouse.daily``'s markers.
"""

from __future__ import annotations

__all__ = [
    "AGREEMENT_COUNTS",
    "AGREEMENT_KEYS",
    "REVIEW_COUNTS",
    "VERIFIED_COUNTS",
    "judged_verdicts",
    "voted_assessments",
]

AGREEMENT_COUNTS = """count() AS compared,
       countIf(model_false_positive AND human_fp) AS fp_yes_yes,
       countIf(model_false_positive AND NOT human_fp) AS fp_yes_no,
       countIf(NOT model_false_positive AND human_fp) AS fp_no_yes,
       countIf(NOT model_false_positive AND NOT human_fp) AS fp_no_no,
       countIf(human_category = model_category) AS category_agreed"""
"""The SELECT columns of a review-agreement group over ``judged_verdicts`` rows: items
compared, the 2x2 table of the false-positive judgement (first: the model's, second: the
reviewer's) and exact category agreements (also used by the Grafana review panel)."""


def judged_verdicts(verdicts: str) -> str:
    """A subquery of the verdicts table ``verdicts`` (an SQL table expression) with the
    reviewer's judgement: ``human_fp`` and ``human_category`` are the correction where one
    was given, else the model's own (an Agree verdict)."""
    return f"""(
    SELECT *, ifNull(corrected_false_positive, model_false_positive) AS human_fp,
           ifNull(corrected_category, model_category) AS human_category
    FROM {verdicts}
)"""


VERIFIED_COUNTS = """count() AS assessed,
       countIf(is_estimated_false_positive) AS model_fp,
       countIf(requires_human_review) AS flagged,
       countIf(requires_human_review AND votes > 0) AS flagged_reviewed,
       countIf(requires_human_review AND votes > 0 AND human_fp) AS flagged_human_fp,
       countIf(NOT requires_human_review) AS unflagged,
       countIf(NOT requires_human_review AND review_reason = 'random_sample' AND votes > 0)
           AS sample_reviewed,
       countIf(NOT requires_human_review AND review_reason = 'random_sample' AND votes > 0
               AND human_fp) AS sample_human_fp"""
"""The SELECT columns of a verified-false-positive group over ``voted_assessments`` rows:
assessments, the model's false positives, and per stratum (flagged; unflagged and its
reviewed random sample) its size, reviewed items and the reviewers' false positives. The
random stratum is ``review_reason = 'random_sample'`` only, never ``'uncertainty'``. Also
used by the Grafana review panel, whose SQL holds no ``--`` comment (the ClickHouse plugin
strips comments before expanding its macros)."""


def voted_assessments(assessments: str, verdicts: str) -> str:
    """A subquery of the current assessments ``assessments`` (an SQL table expression) with
    the reviewers' current verdicts ``verdicts`` on each: ``votes`` (0 without a verdict)
    and ``human_fp``, the majority's false-positive judgement (a tie keeps the model's)."""
    return f"""(
    SELECT a.*, r.votes AS votes,
           (2 * r.fp_votes > r.votes)
           OR (2 * r.fp_votes = r.votes AND a.is_estimated_false_positive) AS human_fp
    FROM {assessments} AS a
    LEFT JOIN (
        SELECT policy_bundle, log_id, assessment_audited_at, count() AS votes,
               sum(ifNull(corrected_false_positive, model_false_positive)) AS fp_votes
        FROM {verdicts}
        GROUP BY policy_bundle, log_id, assessment_audited_at
    ) AS r
    ON r.policy_bundle = a.policy_bundle AND r.log_id = a.log_id
       AND r.assessment_audited_at = a.audited_at
)"""


AGREEMENT_KEYS = ("week", "policy_bundle", "model", "product", "engine", "prompt_version")
"""The keys of the daily ``agreements`` aggregate after ``day``: ``week`` (``toMonday`` of the
event time, as the former query grouped: it differs from the day's Monday for an event time
outside the Date range, which ``toDate`` wraps) and the verdict's own columns."""

REVIEW_COUNTS = """count() AS assessments,
       countIf(is_estimated_false_positive) AS estimated_false_positives,
       countIf(requires_human_review) AS flagged,
       countIf(requires_human_review OR sampled_for_review) AS queued,
       countIf((requires_human_review OR sampled_for_review) AND votes > 0) AS queued_reviewed,
       countIf(requires_human_review AND votes > 0) AS flagged_reviewed,
       countIf(requires_human_review AND votes > 0 AND human_fp) AS flagged_human_fp,
       countIf(NOT requires_human_review AND review_reason = 'random_sample' AND votes > 0)
           AS sample_reviewed,
       countIf(NOT requires_human_review AND review_reason = 'random_sample' AND votes > 0
               AND human_fp) AS sample_human_fp"""
"""The SELECT columns of the daily ``reviews`` aggregate over ``voted_assessments`` rows: the
assessments, the model's false positives and the flagged ones (as ``VERIFIED_COUNTS``; kept
here beside a ``week`` key, so an event time outside ClickHouse's Date range keeps its former
week), the review queue (flagged or sampled assessments, ``queued``, and those with a verdict
on them, ``queued_reviewed``: the "Review queue progress" panel) and ``VERIFIED_COUNTS``' reviewed
counts per stratum (unflagged = assessments - flagged)."""
