"""The multi-resolution evaluation the warehouse path and the worker run (``evaluate_series``):
counts per window as prefix sums (``CountSeries``), the period and baseline of each
resolution (``period_bounds``), the resolution each detector tests, and continuations (an
alert over k windows that repeats one from less than k windows earlier).

``evaluate`` (``window.py``) is not built on this, nor this on it, because the same counts
would give other findings: ``evaluate`` asks ``min_events`` refusals of the window as well as
of the baseline (this asks them of the baseline only, per period, and tests any non-empty
period), its ``insufficient_data`` notes say other things, and it takes one pooled baseline
(not windows, so no resolution can be chosen). Both run the same detectors:
``TESTED_DETECTORS`` through ``two_sample_test``, then ``volume`` and ``new_categories``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from processors.drift_detection.counts import COUNT_FIELDS, WindowCounts, pooled, rollup_scopes
from processors.drift_detection.detectors import (
    RATE_TRIALS,
    RISE_ONLY,
    TESTED_DETECTORS,
    DetectorSettings,
    Finding,
    applies,
    new_categories,
    two_sample_test,
    volume,
)
from processors.drift_detection.window import Evaluation, adjust
from schemas.alerts import AlertKind, Scope


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
    reviewed = any(v.cur.reviewed or v.base.reviewed for v in views)
    for kind in TESTED_DETECTORS:
        trials = RATE_TRIALS.get(kind, "refusals")
        if not applies(kind, reviewed):
            continue
        v = by_refusals if trials == "refusals" else _choose(views, trials, settings.min_events)
        if v is None:
            found.append(_not_tested(kind, scope, views, trials, settings))
            continue
        f = two_sample_test(kind, scope, v.cur, v.base, loose)
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
