"""Trend lines for an audit batch summary, computed from counts (never from model free text).

``trend_lines`` compares a batch's rates with the baseline the drift detectors use for the
batch's policy bundle (``processors.drift_detection.WindowCounts`` pooled over the trailing
windows), each rate with its Wilson 95% interval, e.g.
``over-refusal rate 0.41 [0.36, 0.47] (n=25) vs baseline 0.08 [0.05, 0.12] (n=1200)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from processors.drift_detection import WindowCounts, rate_estimate
from schemas.audit import IndividualAssessment


def _fmt(successes: int, trials: int) -> str:
    r = rate_estimate(successes, trials)
    return f"{r.rate:.2f} [{r.low:.2f}, {r.high:.2f}] (n={trials})"


def _separated(k1: int, n1: int, k0: int, n0: int) -> bool:
    a, b = rate_estimate(k1, n1), rate_estimate(k0, n0)
    return a.low > b.high or a.high < b.low


def trend_lines(
    assessments: Sequence[IndividualAssessment], baseline: WindowCounts | None
) -> list[str]:
    """The batch's over-refusal and review-flag rates against ``baseline``, plus every
    category whose share's interval does not overlap the baseline's.

    Without a baseline (None or no refusals) the batch's own rates are given and the line
    says so. An empty batch gives no lines.
    """
    n = len(assessments)
    if n == 0:
        return []
    fp = sum(a.is_estimated_false_positive for a in assessments)
    review = sum(a.requires_human_review for a in assessments)
    if baseline is None or baseline.refusals == 0:
        return [
            f"over-refusal rate {_fmt(fp, n)}; no baseline yet",
            f"human-review flag rate {_fmt(review, n)}; no baseline yet",
        ]
    b = baseline
    lines = [
        f"over-refusal rate {_fmt(fp, n)} vs baseline {_fmt(b.false_positives, b.refusals)}",
        f"human-review flag rate {_fmt(review, n)} vs baseline {_fmt(b.review_flags, b.refusals)}",
    ]
    for category, k in sorted(Counter(a.category for a in assessments).items()):
        k0 = b.categories.get(category, 0)
        if _separated(k, n, k0, b.refusals):
            lines.append(
                f"category {category} share {_fmt(k, n)} vs baseline {_fmt(k0, b.refusals)}"
            )
    return lines
