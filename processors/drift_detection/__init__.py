"""Drift detectors over tumbling event-time windows: pure functions from counts to findings.

Modules: ``counts`` (``WindowCounts``, pooling, roll-up scopes), ``detectors`` (the tests),
``window`` (one window at one resolution, and the Benjamini-Hochberg ``adjust``), ``series``
(the multi-resolution ``evaluate_series`` of the warehouse path and the worker). Everything
public is importable from this package.

Input is ``WindowCounts`` per ``Scope`` for the evaluated window and for its baseline (the
pooled trailing windows, or a pinned reference period); output is one ``Finding`` per
(detector, scope): an alert, "no change", or "insufficient data". The caller
(``refusal_audit.alerts.drift``) gets the counts from ClickHouse
(``warehouse.drift_assessments``) and publishes the alerts.

Detectors (all tests two-sided, from scipy):

* ``category_mix_drift`` - chi-square test of homogeneity on the 2 x K table of category
  counts (``scipy.stats.chi2_contingency``), categories with an expected count under
  ``min_expected`` (5, Cochran's rule) merged into ``"other"``; effect size: Jensen-Shannon
  distance (base 2, in [0, 1]; ``scipy.spatial.distance.jensenshannon``) between the two
  category distributions. ``moved`` lists the categories whose adjusted standardized
  residual exceeds 2 in absolute value (Agresti, *Categorical Data Analysis*, 3rd ed., 2.4.5).
* ``false_positive_rate_shift``, ``policy_gap_rate_shift``, ``review_rate_shift`` - two-
  proportion test on the 2 x 2 table: Pearson's chi-square without continuity correction
  (equivalent to the two-sided z-test), or Fisher's exact test when an expected cell count is
  under 5 (statistic: the sample odds ratio, 1e300 for an empty cell); effect size: the rate
  difference in percentage points.
* ``volume_anomaly`` - refusal count of the window against the baseline's per-window rate,
  both Poisson: conditional on the total, the window's count is Binomial(total, 1 / (W + 1))
  under equal rates (W baseline windows), tested with ``scipy.stats.binomtest``
  (Przyborowski & Wilenski 1940, the exact test for a ratio of Poisson rates); effect size:
  the rate ratio.
* ``new_category`` - a category absent from the baseline that reaches ``new_category_min``
  refusals in the window (a rule, not a test: it is not part of the multiple-testing family).
* ``classification_drift`` - the same two-proportion test on the share of reviewed
  assessments whose reviewers (most of them) disagree with the model, with the reviewed
  assessments as trials; it alerts only when disagreement rises (agreement drops).

No conclusion from too little data: a tested detector needs ``min_events`` refusals in the
window and in the baseline (``volume_anomaly`` needs them in the baseline only, since a drop
to few events is what it looks for). All p-values of one evaluation (every scope and
detector of one window) are adjusted together with Benjamini-Hochberg
(``scipy.stats.false_discovery_control``); a finding alerts when its adjusted p-value (q) is
at most ``fdr`` and its effect size reaches the detector's threshold. Severity is
``critical`` when q <= fdr / 10 and the effect is at least twice its threshold, else
``warning``.
"""

from __future__ import annotations

from processors.drift_detection.counts import (
    COUNT_FIELDS,
    WindowCounts,
    counts_from_dict,
    counts_to_dict,
    pooled,
    rollup_scopes,
)
from processors.drift_detection.detectors import (
    OTHER,
    RATE_DETECTORS,
    RATE_TRIALS,
    RISE_ONLY,
    TESTED_DETECTORS,
    DetectorSettings,
    Finding,
    Status,
    alpha_for,
    applies,
    category_mix,
    merge_sparse,
    new_categories,
    rate_estimate,
    rate_shift,
    two_sample_test,
    volume,
)
from processors.drift_detection.series import Bounds, CountSeries, evaluate_series, period_bounds
from processors.drift_detection.window import Evaluation, adjust, evaluate

__all__ = [
    "COUNT_FIELDS",
    "OTHER",
    "RATE_DETECTORS",
    "RATE_TRIALS",
    "RISE_ONLY",
    "TESTED_DETECTORS",
    "Bounds",
    "CountSeries",
    "DetectorSettings",
    "Evaluation",
    "Finding",
    "Status",
    "WindowCounts",
    "adjust",
    "alpha_for",
    "applies",
    "category_mix",
    "counts_from_dict",
    "counts_to_dict",
    "evaluate",
    "evaluate_series",
    "merge_sparse",
    "new_categories",
    "period_bounds",
    "pooled",
    "rate_estimate",
    "rate_shift",
    "rollup_scopes",
    "two_sample_test",
    "volume",
]
