"""Drift detection against the warehouse: which windows to evaluate, and alerts from findings.

``evaluate_windows`` reads window counts from ClickHouse (``warehouse.drift_assessments``),
pools the baseline (the ``baseline_windows`` windows before each evaluated window, or the
pinned reference period), runs ``processors.drift_detection.evaluate_series`` (per scope, the finest
resolution its baseline supports) and turns alerting findings into
``schemas.alerts.Alert`` objects with deterministic ids. It holds no state: state is the
warehouse (counts, and the alerts table that records what was emitted), so a restarted
worker recomputes the same alerts with the same ids.

A window is evaluated once it is closed: its end plus the grace period has passed. Each run
evaluates the ``lookback_windows`` most recent closed windows again (cheap, and it catches a
window whose run was missed during a restart); already-emitted ids are filtered by the
publisher (``refusal_audit.alerts.publisher``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from processors.drift_detection import (
    RATE_DETECTORS,
    CountSeries,
    DetectorSettings,
    Evaluation,
    Finding,
    WindowCounts,
    alpha_for,
    evaluate_series,
    period_bounds,
)
from refusal_audit.config import Settings
from schemas.alerts import Alert, Scope, Statistic, TimeWindow, alert_id
from warehouse.client import Client
from warehouse.drift_assessments import evidence_query, window_counts

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
REPLAY_GRACE_SECONDS = 2**31 - 1
"""The grace period of replay mode (``alerts evaluate --replay``): about 68 years, so every
event counts in the window of its event time however late it was stored (the arrival-time
rule is off); the views take it as any other grace period."""
MAX_BASELINE_SECONDS = 28 * 86400
"""A trailing baseline spans at most this (but one period at least): 4 weeks for the weekly
resolution, 24 days for the daily one with the default 24 baseline windows."""


@dataclass(frozen=True)
class DriftConfig:
    """Windowing and detector settings (see ``Settings.alerts_*`` for meanings and units)."""

    window_seconds: int = 3600
    grace_seconds: int = 300
    baseline_windows: int = 24
    pinned_baseline: tuple[datetime, datetime] | None = None
    lookback_windows: int = 3
    detectors: DetectorSettings = field(default_factory=DetectorSettings)
    resolutions: tuple[int, ...] = (1, 6, 24, 168)
    max_baseline_seconds: int = MAX_BASELINE_SECONDS

    @classmethod
    def from_settings(cls, cfg: Settings) -> DriftConfig:
        """The drift configuration of ``cfg``."""
        pinned = None
        if cfg.alerts_baseline_start is not None and cfg.alerts_baseline_end is not None:
            pinned = (cfg.alerts_baseline_start.astimezone(UTC), cfg.alerts_baseline_end)
        return cls(
            window_seconds=cfg.alerts_window_seconds,
            grace_seconds=cfg.alerts_grace_seconds,
            baseline_windows=cfg.alerts_baseline_windows,
            pinned_baseline=pinned,
            lookback_windows=cfg.alerts_lookback_windows,
            detectors=DetectorSettings(
                min_events=cfg.alerts_min_events,
                fdr=cfg.alerts_fdr,
                js_threshold=cfg.alerts_js_threshold,
                rate_shift_pp=cfg.alerts_rate_shift_pp,
                volume_ratio=cfg.alerts_volume_ratio,
                new_category_min=cfg.alerts_new_category_min,
                alpha=alpha_for(cfg.alerts_false_alarms, cfg.alerts_window_seconds),
            ),
            resolutions=tuple(sorted(set(cfg.alerts_resolutions))),
        )

    @property
    def window(self) -> timedelta:
        """The window length."""
        return timedelta(seconds=self.window_seconds)

    def counts(
        self, client: Client, database: str, start: datetime, end: datetime
    ) -> dict[datetime, dict[Scope, WindowCounts]]:
        """``warehouse.drift_assessments.window_counts`` for windows starting in [start, end)."""
        return window_counts(
            client,
            database,
            window_seconds=self.window_seconds,
            grace_seconds=self.grace_seconds,
            start=start,
            end=end,
        )


def replay_windows(start: datetime, until: datetime, window_seconds: int) -> list[datetime]:
    """Starts of every window from the one holding ``start`` to the one holding ``until``
    (inclusive). Raises ``ValueError`` for naive datetimes, ``until`` before ``start`` or
    more than 100,000 windows."""
    first, last = window_start(start, window_seconds), window_start(until, window_seconds)
    n = int((last - first).total_seconds()) // window_seconds + 1
    if n < 1 or n > 100_000:
        raise ValueError(f"{n} windows from {start} to {until}: give 1 to 100,000")
    return [first + timedelta(seconds=window_seconds * i) for i in range(n)]


def window_start(t: datetime, window_seconds: int) -> datetime:
    """Start of the tumbling window holding ``t`` (windows aligned to the Unix epoch, UTC).

    Raises ``ValueError`` for a naive datetime.
    """
    if t.tzinfo is None:
        raise ValueError("naive datetime: give a UTC offset")
    seconds = int((t - EPOCH).total_seconds()) // window_seconds * window_seconds
    return EPOCH + timedelta(seconds=seconds)


def closed_windows(now: datetime, config: DriftConfig) -> list[datetime]:
    """Starts of the ``lookback_windows`` latest windows whose end + grace is at most ``now``."""
    latest = window_start(now - timedelta(seconds=config.grace_seconds), config.window_seconds)
    # the window that starts at `latest` ends after now - grace: it is still open
    return [latest - config.window * k for k in range(config.lookback_windows, 0, -1)]


@dataclass(frozen=True)
class WindowEvaluation:
    """One evaluated window: its bounds, its baseline's bounds, findings and alerts."""

    window: TimeWindow
    baseline: TimeWindow
    evaluation: Evaluation
    alerts: list[Alert]


def baseline_bounds(start: datetime, config: DriftConfig) -> tuple[datetime, datetime, int]:
    """``(start, end, windows)`` of the baseline for the window starting at ``start``."""
    if config.pinned_baseline is not None:
        b0, b1 = config.pinned_baseline
        b0 = window_start(b0, config.window_seconds)
        n = max(1, -(-int((b1 - b0).total_seconds()) // config.window_seconds))
        return b0, b0 + config.window * n, n
    return start - config.window * config.baseline_windows, start, config.baseline_windows


def resolution_bounds(
    start: datetime, resolution: int, config: DriftConfig
) -> tuple[TimeWindow, TimeWindow]:
    """``(period, baseline)`` of the period of ``resolution`` windows that ends with the
    window starting at ``start`` (``processors.drift_detection.period_bounds`` in time)."""
    s0 = window_start(start, config.window_seconds)
    pinned = None
    if config.pinned_baseline is not None:
        b0, b1, _ = baseline_bounds(s0, config)
        pinned = (_index(b0, s0, config), _index(b1, s0, config))
    p0, b0_i, b1_i = period_bounds(
        1,
        resolution,
        config.baseline_windows,
        max_baseline=config.max_baseline_seconds // config.window_seconds,
        pinned=pinned,
    )

    def at(i: int) -> datetime:  # index 0 is the window, 1 its end
        return s0 + config.window * i

    return TimeWindow(start=at(p0), end=at(1)), TimeWindow(start=at(b0_i), end=at(b1_i))


def _index(t: datetime, origin: datetime, config: DriftConfig) -> int:
    """Windows from ``origin`` to ``t`` (both window starts)."""
    return int((t - origin).total_seconds()) // config.window_seconds


def counts_span(starts: Sequence[datetime], config: DriftConfig) -> tuple[datetime, datetime]:
    """``[first, last)``: the windows whose counts the evaluation of ``starts`` reads (every
    resolution's period and baseline, for the window itself and for the windows up to the
    coarsest resolution - 1 before it, which the continuation check re-tests)."""
    firsts, lasts = [], []
    resolutions = config.resolutions or (1,)
    for s in starts:
        for back in sorted({0, max(resolutions) - 1}):
            for k in resolutions:
                period, base = resolution_bounds(s - config.window * back, k, config)
                firsts += [period.start, base.start]
                lasts += [period.end, base.end]
    return min(firsts), max(lasts)


def evaluate_windows(
    client: Client,
    database: str,
    config: DriftConfig,
    *,
    now: datetime,
    windows: list[datetime] | None = None,
) -> list[WindowEvaluation]:
    """Evaluate ``windows`` (window starts; default ``closed_windows(now)``) from the warehouse.

    Returns one ``WindowEvaluation`` per window in order. Raises ClickHouse errors as they
    come, ``ValueError`` for naive datetimes.
    """
    starts = sorted({window_start(w, config.window_seconds) for w in (windows or [])}) or (
        closed_windows(now, config)
    )
    first, last = counts_span(starts, config)
    counts = config.counts(client, database, first, last)
    out = []
    for window, base, evaluation in evaluate_counts(counts, starts, config):
        alerts = [to_alert(f, window, base, database, config, now) for f in evaluation.alerts]
        out.append(WindowEvaluation(window, base, evaluation, alerts))
    return out


def evaluate_counts(
    counts: Mapping[datetime, Mapping[Scope, WindowCounts]],
    starts: Sequence[datetime],
    config: DriftConfig,
) -> Iterator[tuple[TimeWindow, TimeWindow, Evaluation]]:
    """The detectors over counts already read: ``(window, baseline, evaluation)`` per start,
    lazily, in order (``baseline`` is the finest resolution's).

    ``counts`` maps window starts (aligned, UTC) to the counts per finest scope, and must
    cover each window and its baselines (``counts_span``); ``starts`` are the windows to
    evaluate. Each detector tests the trailing period of the finest resolution
    (``config.resolutions``, in windows) whose baseline holds enough evidence
    (``processors.drift_detection.evaluate_series``). Pure: ``evaluate_windows`` reads the counts
    from the warehouse and calls it, ``benchmarks/alert_operating_curve.py`` calls it on
    resampled streams.
    """
    if not starts:
        return
    starts = sorted(window_start(s, config.window_seconds) for s in starts)
    first, last = counts_span(starts, config)
    first = min([first, *counts]) if counts else first
    n = _index(max([last, *(t + config.window for t in counts)]), first, config)
    grid: list[Mapping[Scope, WindowCounts]] = [{} for _ in range(n)]
    for t, per_scope in counts.items():
        grid[_index(t, first, config)] = per_scope
    series = CountSeries(grid)
    pinned = None
    if config.pinned_baseline is not None:
        b0, b1, _ = baseline_bounds(starts[0], config)
        pinned = (_index(b0, first, config), _index(b1, first, config))
    for s in starts:
        evaluation = evaluate_series(
            series,
            _index(s, first, config) + 1,
            config.detectors,
            resolutions=config.resolutions or (1,),
            baseline_windows=config.baseline_windows,
            max_baseline=config.max_baseline_seconds // config.window_seconds,
            pinned=pinned,
        )
        b0, b1, _ = baseline_bounds(s, config)
        yield TimeWindow(start=s, end=s + config.window), TimeWindow(start=b0, end=b1), evaluation


def _pct(rate: float) -> str:
    return f"{100 * rate:.1f}%"


def describe(f: Finding, window: TimeWindow, baseline: TimeWindow) -> str:
    """The first sentences of an alert's summary: what changed, by how much, how sure."""
    scope = f"bundle {f.scope.policy_bundle}, model {f.scope.model}, product {f.scope.product}"
    same_day = window.end - window.start <= timedelta(days=1) and (
        window.start.date() == window.end.date() or f"{window.end:%H:%M}" == "00:00"
    )
    end = f"{window.end:%H:%M}" if same_day else f" to {window.end:%Y-%m-%d %H:%M}"
    when = f"window {window.start:%Y-%m-%d %H:%M}{'-' if same_day else ''}{end} UTC"
    base = f"baseline {baseline.start:%Y-%m-%d %H:%M} to {baseline.end:%Y-%m-%d %H:%M} UTC"
    test = (
        f"{f.statistic_name} = {f.statistic:.2f}, p = {f.p_value:.2g}, BH q = {f.q_value:.2g}"
        if f.p_value is not None and f.q_value is not None
        else f"rule: at least {f.effect_threshold:g} refusals in a category new to the baseline"
    )
    if f.kind in RATE_DETECTORS and f.current_rate and f.baseline_rate:
        label = RATE_DETECTORS[f.kind][1]
        c, b = f.current_rate, f.baseline_rate
        direction = "rose" if f.effect > 0 else "fell"
        what = (
            f"The {label} for {scope} {direction} to {c.rate:.2f} [{c.low:.2f}, {c.high:.2f}] "
            f"({c.successes}/{c.trials}) in the {when}, from {b.rate:.2f} [{b.low:.2f}, "
            f"{b.high:.2f}] ({b.successes}/{b.trials}) in the {base}: {f.effect:+.1f} "
            f"percentage points"
        )
    elif f.kind == "category_mix_drift":
        moved = "; ".join(f.moved) or "no single category stands out"
        what = (
            f"The refusal category mix for {scope} shifted in the {when} against the {base}: "
            f"Jensen-Shannon distance {f.effect:.3f}; categories that moved: {moved}"
        )
    elif f.kind == "volume_anomaly":
        expected = f.baseline_counts["refusals"] / max(1, f.baseline_counts.get("windows", 1))
        what = (
            f"Refusal volume for {scope} was {f.current_counts['refusals']} in the {when}, "
            f"against {expected:.1f} per window in the {base} (rate ratio {f.statistic:.2f})"
        )
    else:  # new_category
        what = (
            f"Category {f.moved[0]} appeared for {scope} in the {when} with "
            f"{f.statistic:.0f} refusals; it has none in the {base}"
        )
    return f"{what} ({test})."


def _id_extra(f: Finding) -> tuple[str, ...]:
    """What an alert id adds to kind, scope and period: the category of a ``new_category``
    finding (one window may bring several new categories, each its own alert; before
    2026-12-05 they shared one id and the publisher kept only the first)."""
    return tuple(f.moved) if f.kind == "new_category" else ()


def to_alert(
    f: Finding,
    window: TimeWindow,
    baseline: TimeWindow,
    database: str,
    config: DriftConfig,
    now: datetime,
) -> Alert:
    """The published alert for an alerting finding.

    ``window`` is the evaluated window; the evidence covers the period of the finding's
    resolution that ends with it (``evidence_window``, the window itself at resolution 1)
    and was compared with that period's baseline (``resolution_bounds``, as tested; the
    ``baseline`` argument, the uncapped trailing one, is not used). The id is
    deterministic: kind, scope and the evidence period (at resolution 1 the window, as
    before resolutions existed).
    """
    # the tested period and baseline (at resolution 1 the window and a trailing baseline
    # capped at max_baseline_seconds, which may be shorter than ``baseline``)
    period, baseline = resolution_bounds(window.start, f.resolution, config)
    sql = evidence_query(
        f.kind,
        f.scope,
        database,
        window_seconds=config.window_seconds,
        grace_seconds=config.grace_seconds,
        window=(period.start, period.end),
        baseline=(baseline.start, baseline.end),
    )
    late = (
        f" {f.late} late events (arrived after the grace period) are counted in this window."
        if f.late
        else ""
    )
    summary = f"{describe(f, period, baseline)}{late} Reproduce the counts with: {sql}"
    threshold = config.detectors.fdr if f.p_value is not None else f.effect_threshold
    return Alert(
        alert_id=alert_id(f.kind, f.scope, period.start, period.end, *_id_extra(f)),
        kind=f.kind,
        severity=f.severity,
        scope=f.scope,
        window=window,
        baseline=baseline,
        statistic=Statistic(
            name=f.statistic_name,
            value=f.statistic,
            threshold=threshold,
            p_value=f.p_value,
            q_value=f.q_value,
            effect_size=f.effect,
            effect_size_name=f.effect_name,
            effect_size_threshold=f.effect_threshold,
        ),
        current_counts=dict(f.current_counts),
        baseline_counts=dict(f.baseline_counts),
        current_rate=f.current_rate,
        baseline_rate=f.baseline_rate,
        moved=list(f.moved),
        late_events=f.late,
        example_log_ids=list(f.examples[:20]),
        summary=summary,
        evidence_query=sql,
        created_at=now,
        evidence_window=period,
        resolution_seconds=f.resolution * config.window_seconds,
    )


def bundle_baselines(
    client: Client, database: str, config: DriftConfig, *, now: datetime
) -> dict[str, WindowCounts]:
    """Baseline counts per policy bundle for the window holding ``now`` (trend lines).

    The same baseline period the detectors will use for that window, pooled over models and
    products. Raises ClickHouse errors.
    """
    b0, b1, _ = baseline_bounds(window_start(now, config.window_seconds), config)
    counts = config.counts(client, database, b0, b1)
    out: dict[str, WindowCounts] = {}
    for per_scope in counts.values():
        for scope, c in per_scope.items():
            bundle = scope.policy_bundle
            out[bundle] = out[bundle] + c if bundle in out else c
    return out
