"""One window's evaluation at one resolution over pooled counts (``evaluate``: the tests and
``benchmarks/drift_shift.py``) and the Benjamini-Hochberg adjustment every evaluation ends
with (``adjust``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from processors.drift_detection.counts import WindowCounts, pooled, rollup_scopes
from processors.drift_detection.detectors import (
    RISE_ONLY,
    TESTED_DETECTORS,
    DetectorSettings,
    Finding,
    applies,
    new_categories,
    two_sample_test,
    volume,
)
from schemas.alerts import Scope


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
    warehouse path runs :func:`evaluate_series`, which chooses a resolution per scope; both
    run ``TESTED_DETECTORS`` (a new two-sample test goes there), ``volume`` and
    ``new_categories``.

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
        reviewed = bool(cur.reviewed or base.reviewed)
        found = [
            two_sample_test(kind, scope, cur, base, settings)
            for kind in TESTED_DETECTORS
            if applies(kind, reviewed)
        ]
        windows = baseline_windows
        if active_windows is not None:
            known = [active_windows[m] for m in members if m in active_windows]
            windows = min(baseline_windows, max(known)) if known else baseline_windows
        found.append(volume(scope, cur, base, windows, settings))
        found += new_categories(scope, cur, base, settings)
        findings.extend(replace(f, late=cur.late) for f in found)
    return Evaluation(adjust(findings, settings))


def adjust(findings: Sequence[Finding], settings: DetectorSettings) -> list[Finding]:
    """Benjamini-Hochberg over the findings that have a p-value; set q and the alert status."""
    tested = [i for i, f in enumerate(findings) if f.p_value is not None]
    out = list(findings)
    if not tested:
        return out
    from scipy.stats import false_discovery_control  # here: the worker loads no scipy

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
