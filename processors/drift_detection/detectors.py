"""The detectors: one statistical test (or rule) per alert kind, from the counts of one scope to
a ``Finding`` (see the package docstring for each test, its effect size and its sources), with
their thresholds (``DetectorSettings``), the per-test level from a false-alarm budget
(``alpha_for``), rates with Wilson intervals (``rate_estimate``), and the list of two-sample
tests both evaluators run (``TESTED_DETECTORS``, ``applies``, ``two_sample_test``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from processors.drift_detection.counts import WindowCounts
from processors.stats import wilson_interval
from schemas.alerts import AlertKind, RateEstimate, Scope

OTHER = "other"

RATE_DETECTORS: dict[AlertKind, tuple[str, str]] = {
    "false_positive_rate_shift": ("false_positives", "false-positive (over-refusal) rate"),
    "policy_gap_rate_shift": ("policy_gaps", "policy-gap rate"),
    "review_rate_shift": ("review_flags", "human-review flag rate"),
    "classification_drift": ("review_disagreements", "reviewers' disagreement rate"),
}
# what a rate detector's counter is a share of (refusals unless named here)
RATE_TRIALS: dict[AlertKind, str] = {"classification_drift": "reviewed"}
# detectors that alert on a rise only
RISE_ONLY: frozenset[AlertKind] = frozenset({"classification_drift"})


@dataclass(frozen=True)
class DetectorSettings:
    """Thresholds of the detectors (defaults are the configuration's defaults).

    ``min_events`` refusals needed in window and baseline before testing (300: the audit
    design asks for several hundred events before drawing conclusions); ``fdr`` the
    Benjamini-Hochberg false-discovery rate; ``js_threshold`` minimum Jensen-Shannon distance
    for a category-mix alert; ``rate_shift_pp`` minimum absolute rate change in percentage
    points; ``volume_ratio`` minimum rate ratio (or its inverse, for drops); ``new_category_min``
    refusals a new category needs; ``min_expected`` Cochran's minimum expected cell count;
    ``alpha`` the level each test's raw p-value must also reach (set from the false-alarm
    budget per scope and detector, ``alpha_for``: 0.5 false alerts in 28 days of hourly
    evaluations by default).
    """

    min_events: int = 300
    fdr: float = 0.05
    alpha: float = 0.5 / (28 * 24)
    js_threshold: float = 0.1
    rate_shift_pp: float = 5.0
    volume_ratio: float = 1.5
    new_category_min: int = 20
    min_expected: float = 5.0


Status = Literal["alert", "no_change", "insufficient_data"]


@dataclass(frozen=True)
class Finding:
    """One detector's outcome for one scope in one evaluation.

    ``statistic_name``/``statistic``/``p_value`` describe the test (``p_value`` None for
    rules); ``q_value`` is the Benjamini-Hochberg adjusted p-value (set by ``evaluate``);
    ``effect``/``effect_name``/``effect_threshold`` the effect size; ``moved`` what changed;
    ``current_counts``/``baseline_counts`` the counts tested; ``current_rate``/``baseline_rate``
    the rates with Wilson 95% intervals where the detector is about a rate; ``examples`` log
    ids of the window that show the change; ``note`` why a finding is ``insufficient_data``;
    ``severity`` (set when it alerts) as in the module docstring; ``late`` the window's late
    events in this scope; ``resolution`` how many windows the tested period spans (1: the
    evaluated window alone; more: the trailing period ending with it, see
    ``evaluate_series``); ``continued`` marks an alerting finding at a resolution k over 1
    when the evaluation ending less than k windows earlier alerted on the same test (at the
    resolution chosen then, after BH): overlapping evidence, so not a new alert
    (``Evaluation.alerts`` leaves it out).
    """

    kind: AlertKind
    scope: Scope
    status: Status
    statistic_name: str = ""
    statistic: float = 0.0
    p_value: float | None = None
    q_value: float | None = None
    effect: float = 0.0
    effect_name: str = ""
    effect_threshold: float = 0.0
    moved: tuple[str, ...] = ()
    current_counts: Mapping[str, int] = field(default_factory=dict)
    baseline_counts: Mapping[str, int] = field(default_factory=dict)
    current_rate: RateEstimate | None = None
    baseline_rate: RateEstimate | None = None
    examples: tuple[str, ...] = ()
    note: str = ""
    severity: Literal["warning", "critical"] = "warning"
    late: int = 0
    resolution: int = 1
    continued: bool = False


def alpha_for(false_alarms: float, window_seconds: int, period_seconds: int = 28 * 86400) -> float:
    """The per-test level for at most ``false_alarms`` expected false alerts per scope and
    detector in ``period_seconds`` when a test runs every ``window_seconds`` (Bonferroni over
    time: the expected number of false alerts is the sum of the tests' levels, whatever their
    correlation). Raises ``ValueError`` for non-positive arguments."""
    if false_alarms <= 0 or window_seconds <= 0 or period_seconds <= 0:
        raise ValueError("false_alarms, window_seconds and period_seconds must be > 0")
    return min(1.0, false_alarms * window_seconds / period_seconds)


def rate_estimate(successes: int, trials: int) -> RateEstimate:
    """``successes / trials`` with its Wilson 95% interval (rate 0 and [0, 1] for 0 trials)."""
    low, high = wilson_interval(successes, trials)
    rate = successes / trials if trials else 0.0
    return RateEstimate(successes=successes, trials=trials, rate=rate, low=low, high=high)


def merge_sparse(
    current: Mapping[str, int], baseline: Mapping[str, int], min_expected: float
) -> tuple[list[str], np.ndarray]:
    """The 2 x K table (window row, baseline row) with sparse categories merged into "other".

    A category whose expected count (under homogeneity) is below ``min_expected`` in either
    row joins ``"other"``; if "other" itself stays sparse it is kept (the test is then
    approximate, as with any residual cell). Returns the column labels and the table
    (int64, shape (2, K)). Categories with no refusals in either row are dropped.
    """
    labels = sorted({k for k, v in current.items() if v} | {k for k, v in baseline.items() if v})
    n_cur, n_base = sum(current.values()), sum(baseline.values())
    total = n_cur + n_base
    kept: list[str] = []
    other = np.zeros(2, dtype=np.int64)
    for label in labels:
        col = np.array([current.get(label, 0), baseline.get(label, 0)], dtype=np.int64)
        expected = col.sum() * np.array([n_cur, n_base]) / total if total else col
        if label != OTHER and expected.min() >= min_expected:
            kept.append(label)
        else:
            other += col
    columns = [np.array([current.get(k, 0), baseline.get(k, 0)], dtype=np.int64) for k in kept]
    if other.sum():
        kept.append(OTHER)
        columns.append(other)
    table = np.stack(columns, axis=1) if columns else np.zeros((2, 0), dtype=np.int64)
    return kept, table


def category_mix(
    kind_scope: Scope, cur: WindowCounts, base: WindowCounts, s: DetectorSettings
) -> Finding:
    """Chi-square test of homogeneity + Jensen-Shannon distance; see the module docstring."""
    if cur.refusals < s.min_events or base.refusals < s.min_events:
        return _insufficient("category_mix_drift", kind_scope, cur, base, s)
    from scipy.spatial.distance import jensenshannon
    from scipy.stats import chi2_contingency

    labels, table = merge_sparse(cur.categories, base.categories, s.min_expected)
    if table.shape[1] < 2:
        return Finding("category_mix_drift", kind_scope, "no_change", note="one category only")
    res = chi2_contingency(table, correction=False)
    expected = np.asarray(res.expected_freq)
    row = table.sum(axis=1, keepdims=True) / table.sum()
    col = table.sum(axis=0, keepdims=True) / table.sum()
    residuals = (table - expected) / np.sqrt(expected * (1 - row) * (1 - col))
    p_cur, p_base = table[0] / table[0].sum(), table[1] / table[1].sum()
    distance = float(jensenshannon(p_cur, p_base, base=2))
    order = np.argsort(-np.abs(residuals[0]))
    moved = tuple(
        f"{labels[i]} {100 * (p_cur[i] - p_base[i]):+.1f} pp"
        for i in order
        if abs(residuals[0][i]) > 2
    )
    examples = tuple(x for i in order for x in cur.examples.get(labels[i], ())[:3])
    return Finding(
        "category_mix_drift",
        kind_scope,
        "no_change",
        statistic_name="chi2",
        statistic=float(res.statistic),
        p_value=float(res.pvalue),
        effect=distance,
        effect_name="jensen_shannon_distance",
        effect_threshold=s.js_threshold,
        moved=moved,
        current_counts=dict(zip(labels, (int(v) for v in table[0]), strict=True)),
        baseline_counts=dict(zip(labels, (int(v) for v in table[1]), strict=True)),
        examples=examples[:20],
    )


def rate_shift(
    kind: AlertKind, scope: Scope, cur: WindowCounts, base: WindowCounts, s: DetectorSettings
) -> Finding:
    """Two-proportion test (chi-square, or Fisher's exact test for small expected counts) of
    the detector's counter as a share of its trials (``RATE_TRIALS``, else refusals)."""
    trials = RATE_TRIALS.get(kind, "refusals")
    if cur.count(trials) < s.min_events or base.count(trials) < s.min_events:
        return _insufficient(kind, scope, cur, base, s, trials=trials)
    from scipy.stats import chi2_contingency, fisher_exact

    counter, _ = RATE_DETECTORS[kind]
    k1, n1, k0, n0 = cur.count(counter), cur.count(trials), base.count(counter), base.count(trials)
    table = np.array([[k1, n1 - k1], [k0, n0 - k0]], dtype=np.int64)
    pooled_rate = (k1 + k0) / (n1 + n0)
    smallest = min(n1, n0) * min(pooled_rate, 1 - pooled_rate)
    if k1 + k0 == 0 or k1 + k0 == n1 + n0:
        name, stat, p = "two_proportion_chi2", 0.0, 1.0
    elif smallest < 5:
        fisher = fisher_exact(table)
        # the sample odds ratio is infinite with an empty cell: keep the alert JSON finite
        odds = float(np.nan_to_num(fisher.statistic, nan=0.0, posinf=1e300))
        name, stat, p = "fisher_exact", odds, float(fisher.pvalue)
    else:
        res = chi2_contingency(table, correction=False)
        name, stat, p = "two_proportion_chi2", float(res.statistic), float(res.pvalue)
    current, baseline = rate_estimate(k1, n1), rate_estimate(k0, n0)
    return Finding(
        kind,
        scope,
        "no_change",
        statistic_name=name,
        statistic=stat,
        p_value=min(1.0, p),
        effect=100 * (current.rate - baseline.rate),
        effect_name="rate_difference_pp",
        effect_threshold=s.rate_shift_pp,
        current_counts={trials: n1, counter: k1},
        baseline_counts={trials: n0, counter: k0},
        current_rate=current,
        baseline_rate=baseline,
        examples=tuple(cur.examples.get(counter, ()))[:20],
    )


def volume(
    scope: Scope,
    cur: WindowCounts,
    base: WindowCounts,
    baseline_windows: float,
    s: DetectorSettings,
) -> Finding:
    """Exact conditional test of the window's Poisson rate against the baseline's
    (``baseline_windows`` periods as long as the window's; a fraction for a pinned period
    that is not a whole number of them)."""
    if base.refusals < s.min_events or baseline_windows <= 0:
        return _insufficient("volume_anomaly", scope, cur, base, s, baseline_only=True)
    from scipy.stats import binomtest

    total = cur.refusals + base.refusals
    res = binomtest(cur.refusals, total, 1.0 / (baseline_windows + 1))
    expected = base.refusals / baseline_windows
    ratio = cur.refusals / expected
    # the effect is symmetric on the log scale: a drop to 1/r counts like a rise to r
    effect = ratio if ratio >= 1 else (-1 / ratio if ratio > 0 else -float("inf"))
    return Finding(
        "volume_anomaly",
        scope,
        "no_change",
        statistic_name="poisson_rate_ratio",
        statistic=ratio,
        p_value=float(res.pvalue),
        effect=effect if np.isfinite(effect) else -1e9,
        effect_name="rate_ratio" if ratio >= 1 else "inverse_rate_ratio",
        effect_threshold=s.volume_ratio,
        current_counts={"refusals": cur.refusals},
        baseline_counts={"refusals": base.refusals, "windows": max(1, round(baseline_windows))},
    )


def new_categories(
    scope: Scope, cur: WindowCounts, base: WindowCounts, s: DetectorSettings
) -> list[Finding]:
    """One alerting finding per category absent from the baseline with enough refusals."""
    if base.refusals < s.min_events:
        return [_insufficient("new_category", scope, cur, base, s, baseline_only=True)]
    found = []
    for category, n in sorted(cur.categories.items()):
        if n >= s.new_category_min and base.categories.get(category, 0) == 0:
            found.append(
                Finding(
                    "new_category",
                    scope,
                    "alert",
                    statistic_name="count",
                    statistic=float(n),
                    effect=float(n),
                    effect_name="refusals_in_new_category",
                    effect_threshold=float(s.new_category_min),
                    moved=(category,),
                    current_counts={"refusals": cur.refusals, category: n},
                    baseline_counts={"refusals": base.refusals, category: 0},
                    current_rate=rate_estimate(n, cur.refusals),
                    baseline_rate=rate_estimate(0, base.refusals),
                    examples=tuple(cur.examples.get(category, ()))[:20],
                    severity="critical" if n >= 2 * s.new_category_min else "warning",
                )
            )
    return found


def _insufficient(
    kind: AlertKind,
    scope: Scope,
    cur: WindowCounts,
    base: WindowCounts,
    s: DetectorSettings,
    *,
    baseline_only: bool = False,
    trials: str = "refusals",
) -> Finding:
    where = "baseline" if baseline_only else "window and baseline"
    what = "refusals" if trials == "refusals" else "reviewed refusals"
    n1, n0 = cur.count(trials), base.count(trials)
    note = (
        f"insufficient data: {n1} {what} in the window and {n0} in the "
        f"baseline; the {where} need at least {s.min_events} (min_events)"
    )
    return Finding(
        kind,
        scope,
        "insufficient_data",
        current_counts={trials: n1},
        baseline_counts={trials: n0},
        note=note,
    )


TESTED_DETECTORS: tuple[AlertKind, ...] = ("category_mix_drift", *RATE_DETECTORS)
"""The two-sample tests of a period against its baseline, in the order both evaluators
(``evaluate``, ``evaluate_series``) report them; ``volume_anomaly`` and ``new_category``
follow them. A new test goes here and into :func:`two_sample_test`."""


def applies(kind: AlertKind, reviewed: bool) -> bool:
    """Whether the detector ``kind`` applies to a scope: ``classification_drift`` only where
    someone reviews (``reviewed``: reviewed refusals in the period or its baseline); where
    nobody does it is left out, not reported as insufficient data."""
    return kind != "classification_drift" or reviewed


def two_sample_test(
    kind: AlertKind, scope: Scope, cur: WindowCounts, base: WindowCounts, s: DetectorSettings
) -> Finding:
    """The test of ``kind`` (one of ``TESTED_DETECTORS``) on ``cur`` against ``base``:
    :func:`category_mix` or :func:`rate_shift`."""
    if kind == "category_mix_drift":
        return category_mix(scope, cur, base, s)
    return rate_shift(kind, scope, cur, base, s)
