"""Drift detectors over tumbling event-time windows: pure functions from counts to findings.

Input is ``WindowCounts`` per ``Scope`` for the evaluated window and for its baseline (the
pooled trailing windows, or a pinned reference period); output is one ``Finding`` per
(detector, scope): an alert, "no change", or "insufficient data". The caller
(``refusal_audit.alerts.drift``) reads the counts from ClickHouse and publishes the alerts.

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

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from scipy.spatial.distance import jensenshannon
from scipy.stats import binomtest, chi2_contingency, false_discovery_control, fisher_exact

from processors.stats import wilson_interval
from schemas.alerts import ALL, AlertKind, RateEstimate, Scope

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
class WindowCounts:
    """Audit counts of one scope over one window (or a pooled baseline).

    ``refusals`` assessed refusals; ``false_positives`` of them estimated over-refusals;
    ``review_flags`` flagged for human review; ``policy_gaps`` named in a policy-gap flag;
    ``late`` that arrived after the grace period; ``categories`` refusals per category;
    ``reviewed`` refusals whose current assessment has reviewers' verdicts and
    ``review_disagreements`` of them where most reviewers disagree with the model;
    ``examples`` a few log ids per key (a category name, or ``false_positives``,
    ``policy_gaps``, ``review_flags``, ``review_disagreements``).
    """

    refusals: int = 0
    false_positives: int = 0
    review_flags: int = 0
    policy_gaps: int = 0
    late: int = 0
    categories: Mapping[str, int] = field(default_factory=dict)
    examples: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    reviewed: int = 0
    review_disagreements: int = 0

    def __add__(self, other: WindowCounts) -> WindowCounts:
        categories = Counter(self.categories)
        categories.update(other.categories)
        examples = {k: tuple(v) for k, v in self.examples.items()}
        for key, ids in other.examples.items():
            examples[key] = (examples.get(key, ()) + tuple(ids))[:20]
        return WindowCounts(
            refusals=self.refusals + other.refusals,
            false_positives=self.false_positives + other.false_positives,
            review_flags=self.review_flags + other.review_flags,
            policy_gaps=self.policy_gaps + other.policy_gaps,
            late=self.late + other.late,
            categories=dict(categories),
            examples=examples,
            reviewed=self.reviewed + other.reviewed,
            review_disagreements=self.review_disagreements + other.review_disagreements,
        )

    def count(self, name: str) -> int:
        """The counter called ``name`` (``false_positives``, ``policy_gaps``, ...)."""
        value = getattr(self, name)
        assert isinstance(value, int)
        return value


def counts_to_dict(counts: WindowCounts) -> dict[str, object]:
    """``counts`` as a JSON-ready dict (every field; examples as lists)."""
    return {
        "refusals": counts.refusals, "false_positives": counts.false_positives,
        "review_flags": counts.review_flags, "policy_gaps": counts.policy_gaps,
        "late": counts.late, "categories": dict(counts.categories),
        "examples": {k: list(v) for k, v in counts.examples.items()},
        "reviewed": counts.reviewed, "review_disagreements": counts.review_disagreements,
    }  # fmt: skip


def counts_from_dict(data: Mapping[str, object]) -> WindowCounts:
    """The inverse of :func:`counts_to_dict`. Raises ``ValueError`` when a field is missing,
    unknown or of the wrong type."""
    ints = ("refusals", "false_positives", "review_flags", "policy_gaps", "late", "reviewed",
            "review_disagreements")  # fmt: skip
    unknown = set(data) - {*ints, "categories", "examples"}
    if unknown:
        raise ValueError(f"unknown window-count fields {sorted(unknown)}")
    values: dict[str, int] = {}
    for name in ints:
        value = data.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"window count {name!r} must be an integer >= 0, got {value!r}")
        values[name] = value
    categories, examples = data.get("categories"), data.get("examples")
    if not isinstance(categories, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int) for k, v in categories.items()
    ):
        raise ValueError("window counts' categories must map names to integers")
    if not isinstance(examples, Mapping) or not all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(i, str) for i in v)
        for k, v in examples.items()
    ):
        raise ValueError("window counts' examples must map keys to lists of log ids")
    return WindowCounts(
        **values,
        categories=dict(categories),
        examples={k: tuple(v) for k, v in examples.items()},
    )


def pooled(counts: Iterable[WindowCounts]) -> WindowCounts:
    """The sum of several windows' counts (an empty iterable gives zero counts)."""
    total = WindowCounts()
    for c in counts:
        total = total + c
    return total


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


def rollup_scopes(scopes: Iterable[Scope]) -> dict[Scope, list[Scope]]:
    """Each finest scope (bundle, model, product) plus its roll-ups, mapped to their members.

    Roll-ups are (bundle, model, "all") and (bundle, "all", "all"); a roll-up with a single
    member is left out (it would repeat its member's findings under another name).
    """
    finest = sorted(set(scopes), key=lambda sc: sc.key)
    groups: dict[Scope, list[Scope]] = {sc: [sc] for sc in finest}
    by_model: dict[Scope, list[Scope]] = {}
    by_bundle: dict[Scope, list[Scope]] = {}
    for sc in finest:
        by_model.setdefault(Scope(policy_bundle=sc.policy_bundle, model=sc.model, product=ALL), [])
        by_model[Scope(policy_bundle=sc.policy_bundle, model=sc.model, product=ALL)].append(sc)
        by_bundle.setdefault(Scope(policy_bundle=sc.policy_bundle, model=ALL, product=ALL), [])
        by_bundle[Scope(policy_bundle=sc.policy_bundle, model=ALL, product=ALL)].append(sc)
    for rollups in (by_model, by_bundle):
        for scope, members in rollups.items():
            if len(members) > 1 and scope not in groups:
                groups[scope] = members
    return groups


@dataclass(frozen=True)
class Evaluation:
    """All findings of one window's evaluation; ``alerts`` are the ones that fire."""

    findings: list[Finding]

    @property
    def alerts(self) -> list[Finding]:
        """Findings whose status is ``alert``, but for ``continued`` ones."""
        return [f for f in self.findings if f.status == "alert" and not f.continued]


def evaluate(
    current: Mapping[Scope, WindowCounts],
    baseline: Mapping[Scope, WindowCounts],
    baseline_windows: int,
    settings: DetectorSettings,
    active_windows: Mapping[Scope, int] | None = None,
) -> Evaluation:
    """Run every detector on every scope of one window and adjust p-values together, at one
    resolution over pooled counts (the tests and ``benchmarks/drift_shift.py``). The
    warehouse path runs :func:`evaluate_series`, which chooses a resolution per scope: a new
    detector goes into both.

    ``current`` and ``baseline`` map finest scopes (bundle, model, product) to their counts
    in the evaluated window and in the pooled baseline (``baseline_windows`` windows long);
    ``active_windows`` optionally gives, per finest scope, how many of those windows it
    existed in (from its first window with refusals): the volume test's per-window rate
    divides by that, so a scope younger than the baseline is not compared with empty
    windows from before it existed. Roll-up scopes are added by ``rollup_scopes``. Returns
    every finding; alerting ones have status ``alert`` and their BH-adjusted ``q_value``
    set. Raises ``ValueError`` for ``baseline_windows`` < 0.
    """
    if baseline_windows < 0:
        raise ValueError(f"baseline_windows={baseline_windows} must be >= 0")
    findings: list[Finding] = []
    for scope, members in rollup_scopes([*current, *baseline]).items():
        cur = pooled(current[m] for m in members if m in current)
        base = pooled(baseline[m] for m in members if m in baseline)
        found = [category_mix(scope, cur, base, settings)]
        found += [
            rate_shift(kind, scope, cur, base, settings)
            for kind in RATE_DETECTORS
            # nobody reviews this scope: the detector does not apply (not "insufficient")
            if kind != "classification_drift" or cur.reviewed or base.reviewed
        ]
        windows = baseline_windows
        if active_windows is not None:
            known = [active_windows[m] for m in members if m in active_windows]
            windows = min(baseline_windows, max(known)) if known else baseline_windows
        found.append(volume(scope, cur, base, windows, settings))
        found += new_categories(scope, cur, base, settings)
        findings.extend(replace(f, late=cur.late) for f in found)
    return Evaluation(adjust(findings, settings))


COUNT_FIELDS = (
    "refusals", "false_positives", "review_flags", "policy_gaps", "late", "reviewed",
    "review_disagreements",
)  # fmt: skip


class CountSeries:
    """Counts per finest scope over consecutive windows ``0 .. len - 1``, summed over any range
    of windows in constant time (prefix sums), for the multi-resolution evaluation.

    ``windows[i]`` maps finest scopes to their counts in window ``i`` (a scope missing from
    a window had no refusals in it).
    """

    def __init__(self, windows: Sequence[Mapping[Scope, WindowCounts]]) -> None:
        self._windows = list(windows)
        self.length = len(self._windows)
        self.scopes = sorted({s for w in self._windows for s in w}, key=lambda sc: sc.key)
        self.categories = sorted(
            {c for w in self._windows for wc in w.values() for c in wc.categories}
        )
        column = {c: len(COUNT_FIELDS) + i for i, c in enumerate(self.categories)}
        width = len(COUNT_FIELDS) + len(self.categories)
        self._has_examples = any(wc.examples for w in self._windows for wc in w.values())
        self.memo: dict[tuple[int, object, object, object], list[Finding]] = {}
        """Adjusted findings per evaluation (``_adjusted``), filled as evaluations run."""
        self._cum: dict[Scope, np.ndarray] = {}
        self._seen: dict[Scope, np.ndarray] = {}
        for scope in self.scopes:
            table = np.zeros((self.length + 1, width), dtype=np.int64)
            seen = []
            for i, w in enumerate(self._windows):
                c = w.get(scope)
                if c is None:
                    continue
                seen.append(i)
                row = table[i + 1]
                for j, name in enumerate(COUNT_FIELDS):
                    row[j] = c.count(name)
                for category, n in c.categories.items():
                    row[column[category]] = n
            self._cum[scope] = np.cumsum(table, axis=0)
            self._seen[scope] = np.array(seen, dtype=np.int64)

    def total(self, scope: Scope, start: int, end: int) -> WindowCounts:
        """The counts of ``scope`` pooled over windows ``[start, end)`` (clipped to the
        series); examples are the newest windows' first, at most 20 per key."""
        start, end = max(0, start), min(self.length, end)
        table = self._cum.get(scope)
        if table is None or end <= start:
            return WindowCounts()
        d = table[end] - table[start]
        examples: dict[str, tuple[str, ...]] = {}
        if self._has_examples:
            for i in range(end - 1, start - 1, -1):
                c = self._windows[i].get(scope)
                for key, ids in (c.examples if c is not None else {}).items():
                    if len(examples.get(key, ())) < 20:
                        examples[key] = (examples.get(key, ()) + tuple(ids))[:20]
        n = len(COUNT_FIELDS)
        return WindowCounts(
            **{name: int(d[j]) for j, name in enumerate(COUNT_FIELDS)},
            categories={c: int(d[n + i]) for i, c in enumerate(self.categories) if d[n + i]},
            examples=examples,
        )

    def first_seen(self, scope: Scope, start: int, end: int) -> int | None:
        """The first window in ``[start, end)`` where ``scope`` has counts, or None."""
        seen = self._seen.get(scope)
        if seen is None:
            return None
        i = int(np.searchsorted(seen, start))
        return int(seen[i]) if i < len(seen) and seen[i] < end else None


def period_bounds(
    end: int,
    resolution: int,
    baseline_windows: int,
    *,
    max_baseline: int | None = None,
    pinned: tuple[int, int] | None = None,
) -> tuple[int, int, int]:
    """``(period start, baseline start, baseline end)`` in windows for the period of
    ``resolution`` windows ending at window ``end`` (exclusive): the baseline is the
    ``baseline_windows`` periods of the same length before it, at most ``max_baseline``
    windows in all (but one period at least), or the ``pinned`` window range as it is.
    """
    start = end - resolution
    if pinned is not None:
        return start, pinned[0], pinned[1]
    periods = baseline_windows
    if max_baseline is not None:
        periods = max(1, min(baseline_windows, max_baseline // resolution))
    return start, start - periods * resolution, start


@dataclass(frozen=True)
class _View:
    """One scope at one resolution: the period's and the baseline's counts and how many
    periods of that length the baseline holds (since the scope's first refusal in it)."""

    resolution: int
    cur: WindowCounts
    base: WindowCounts
    periods: float


def _choose(views: Sequence[_View], trials: str, min_events: int) -> _View | None:
    """The finest view whose baseline holds ``min_events`` trials per period, else the
    coarsest when its baseline holds ``min_events`` in all, else None."""
    for v in views:
        n0 = v.base.count(trials)
        if v.periods > 0 and n0 >= min_events and n0 / v.periods >= min_events:
            return v
    last = views[-1]
    return last if last.periods > 0 and last.base.count(trials) >= min_events else None


def _not_tested(kind: AlertKind, scope: Scope, views: Sequence[_View], trials: str,
                s: DetectorSettings) -> Finding:  # fmt: skip
    what = "refusals" if trials == "refusals" else "reviewed refusals"
    last = views[-1]
    n1, n0 = last.cur.count(trials), last.base.count(trials)
    note = (
        f"insufficient data: {n0} {what} in the baseline of the coarsest period "
        f"({last.resolution} windows, {last.periods:g} such periods), {n1} in the period; "
        f"testing needs at least {s.min_events} (min_events) per period at a finer "
        f"resolution or in the coarsest baseline"
    )
    return Finding(
        kind, scope, "insufficient_data", current_counts={trials: n1},
        baseline_counts={trials: n0}, note=note, resolution=last.resolution,
    )  # fmt: skip


def _view(
    series: CountSeries,
    end: int,
    members: Sequence[Scope],
    k: int,
    baseline_windows: int,
    max_baseline: int | None,
    pinned: tuple[int, int] | None,
) -> _View:
    """The scope made of ``members`` at resolution ``k`` for the period ending at ``end``."""
    p0, b0, b1 = period_bounds(end, k, baseline_windows, max_baseline=max_baseline, pinned=pinned)
    if pinned is None:
        firsts = [series.first_seen(m, b0, b1) for m in members]
        known = [b1 - f for f in firsts if f is not None]
        active = max(known) if known else b1 - b0
    else:
        active = b1 - b0
    return _View(
        resolution=k,
        cur=pooled(series.total(m, p0, end) for m in members),
        base=pooled(series.total(m, b0, b1) for m in members),
        periods=active / k,
    )


Bounds = tuple[int, int | None, tuple[int, int] | None]
"""``(baseline_windows, max_baseline, pinned)`` of :func:`period_bounds`."""


def _continues(
    f: Finding,
    series: CountSeries,
    end: int,
    settings: DetectorSettings,
    ks: tuple[int, ...],
    bounds: Bounds,
) -> bool:
    """Whether the alerting finding ``f`` (resolution k > 1) repeats an alert of the same test
    whose evidence overlaps its own: the evaluation ending 1 to k - 1 windows earlier (all
    scopes, Benjamini-Hochberg included, at the resolutions chosen then) alerted on the same
    kind, scope (and new category) in the same direction. So the first alert of an episode
    is never the continuation of a test that was not run or did not alert (newest first: a
    sustained change checks one evaluation)."""
    members = rollup_scopes(series.scopes)[f.scope]

    def same(g: Finding) -> bool:
        return (
            (g.kind, g.scope, g.moved if f.kind == "new_category" else ())
            == (f.kind, f.scope, f.moved if f.kind == "new_category" else ())
            and (g.effect > 0) == (f.effect > 0)
        )  # fmt: skip

    for back in range(1, f.resolution):
        if end - back < 1:
            return False
        if (end - back, settings, ks, bounds) not in series.memo and not any(
            same(g) and _may_alert(g, settings)
            for g in _scope_findings(series, end - back, f.scope, members, settings, ks, bounds)
        ):
            continue  # this scope's test did not pass alpha then: no need for the whole BH
        if any(
            g.status == "alert" and same(g)
            for g in _adjusted(series, end - back, settings, ks, bounds)
        ):
            return True
    return False


def _may_alert(g: Finding, s: DetectorSettings) -> bool:
    """Whether ``g`` (not adjusted) passes what ``adjust`` asks besides q: alpha, the effect
    threshold and the direction (or the new-category rule)."""
    if g.kind == "new_category":
        return g.status == "alert"
    if g.p_value is None:
        return False
    rising = g.effect > 0 or g.kind not in RISE_ONLY
    return g.p_value <= s.alpha and abs(g.effect) >= g.effect_threshold and rising


def _adjusted(
    series: CountSeries, end: int, settings: DetectorSettings, ks: tuple[int, ...], bounds: Bounds
) -> list[Finding]:
    """The findings of the evaluation ending at ``end``, BH-adjusted, before continuations;
    memoized on ``series`` (a replay and the continuation checks share them)."""
    key = (end, settings, ks, bounds)
    cached = series.memo.get(key)
    if cached is None:
        cached = adjust(_findings(series, end, settings, ks, bounds), settings)
        if len(series.memo) > 2 * ks[-1] + 2:  # keep what later continuation checks can ask
            for old in [k for k in series.memo if k[0] < end - ks[-1]]:
                del series.memo[old]
        series.memo[key] = cached
    return cached


def _findings(
    series: CountSeries, end: int, settings: DetectorSettings, ks: tuple[int, ...], bounds: Bounds
) -> list[Finding]:
    """Every detector on every scope for the evaluation ending at ``end`` (not adjusted)."""
    findings: list[Finding] = []
    for scope, members in rollup_scopes(series.scopes).items():
        findings.extend(_scope_findings(series, end, scope, members, settings, ks, bounds))
    return findings


def _scope_findings(
    series: CountSeries,
    end: int,
    scope: Scope,
    members: Sequence[Scope],
    settings: DetectorSettings,
    ks: tuple[int, ...],
    bounds: Bounds,
) -> list[Finding]:
    """Every detector on ``scope`` (made of ``members``) for the evaluation ending at ``end``,
    each at the resolution ``_choose`` picks (not adjusted)."""
    loose = replace(settings, min_events=1)
    views = [_view(series, end, members, k, *bounds) for k in ks]
    found: list[Finding] = []
    by_refusals = _choose(views, "refusals", settings.min_events)
    kinds: list[AlertKind] = ["category_mix_drift", *RATE_DETECTORS]
    for kind in kinds:
        trials = RATE_TRIALS.get(kind, "refusals")
        if kind == "classification_drift" and not any(
            v.cur.reviewed or v.base.reviewed for v in views
        ):
            continue  # nobody reviews this scope: the detector does not apply
        v = by_refusals if trials == "refusals" else _choose(views, trials, settings.min_events)
        if v is None:
            found.append(_not_tested(kind, scope, views, trials, settings))
            continue
        f = (
            category_mix(scope, v.cur, v.base, loose)
            if kind == "category_mix_drift"
            else rate_shift(kind, scope, v.cur, v.base, loose)
        )
        if f.status == "insufficient_data":
            f = replace(f, note=f"no {trials} in the period of {v.resolution} window(s)")
        found.append(replace(f, resolution=v.resolution, late=v.cur.late))
    if by_refusals is None:
        found.append(_not_tested("volume_anomaly", scope, views, "refusals", settings))
        found.append(_not_tested("new_category", scope, views, "refusals", settings))
    else:
        v = by_refusals
        found.append(volume(scope, v.cur, v.base, v.periods, loose))
        found += new_categories(scope, v.cur, v.base, settings)
        found = [
            replace(f, resolution=v.resolution, late=v.cur.late)
            if f.kind in ("volume_anomaly", "new_category")
            else f
            for f in found
        ]
    return found


def evaluate_series(
    series: CountSeries,
    end: int,
    settings: DetectorSettings,
    *,
    resolutions: Sequence[int] = (1,),
    baseline_windows: int = 24,
    max_baseline: int | None = None,
    pinned: tuple[int, int] | None = None,
) -> Evaluation:
    """Every detector on every scope for the evaluation ending at window ``end`` (exclusive),
    each at the resolution its evidence needs, p-values adjusted together.

    For each scope (finest and roll-ups) and each ``resolution`` (windows per period, finest
    first), the period is the ``resolution`` windows ending at ``end`` and its baseline as
    in :func:`period_bounds`; a trailing baseline counts only the windows since the
    scope's first refusal in it. Each detector tests the finest resolution whose baseline
    holds ``settings.min_events`` of its trials (refusals; reviewed refusals for
    ``classification_drift``) per period, or else the coarsest when its baseline holds
    ``min_events`` in all; otherwise it reports ``insufficient_data`` (with why). The choice
    depends on the baseline only, so it does not bias the test of the period. Findings
    carry the ``resolution`` tested; an alert at k windows is ``continued`` when the
    evaluation ending 1 to k - 1 windows earlier alerted on the same test. Raises
    ``ValueError`` for an empty ``resolutions``.
    """
    if not resolutions:
        raise ValueError("at least one resolution")
    ks = tuple(sorted(set(resolutions)))
    bounds: Bounds = (baseline_windows, max_baseline, pinned)
    return Evaluation(
        [
            replace(f, continued=True, note="continues an alert of the same test over "
                    f"{f.resolution} windows ending less than {f.resolution} windows earlier")
            if f.status == "alert"
            and f.resolution > 1
            and _continues(f, series, end, settings, ks, bounds)
            else f
            for f in _adjusted(series, end, settings, ks, bounds)
        ]
    )  # fmt: skip


def adjust(findings: Sequence[Finding], settings: DetectorSettings) -> list[Finding]:
    """Benjamini-Hochberg over the findings that have a p-value; set q and the alert status."""
    tested = [i for i, f in enumerate(findings) if f.p_value is not None]
    out = list(findings)
    if not tested:
        return out
    qs = false_discovery_control([findings[i].p_value for i in tested], method="bh")
    for i, q in zip(tested, qs, strict=True):
        f = findings[i]
        q = float(min(1.0, q))
        rising = f.effect > 0 or f.kind not in RISE_ONLY
        significant = q <= settings.fdr and (f.p_value or 0.0) <= settings.alpha
        fires = significant and abs(f.effect) >= f.effect_threshold and rising
        strong = significant and q <= settings.fdr / 10 and abs(f.effect) >= 2 * f.effect_threshold
        out[i] = replace(
            f,
            q_value=q,
            status="alert" if fires else "no_change",
            severity="critical" if strong else "warning",
        )
    return out
