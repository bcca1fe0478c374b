"""Evidence that accumulates (issue 28): low-volume scopes are tested over longer periods,
alerts say which period, coverage is reported, and a historical replay counts by event time."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from processors.drift_detection import (
    CountSeries,
    DetectorSettings,
    WindowCounts,
    alpha_for,
    evaluate_series,
    pooled,
)
from refusal_audit.alerts.drift import (
    DriftConfig,
    counts_span,
    evaluate_counts,
    replay_windows,
    resolution_bounds,
    to_alert,
)
from refusal_audit.cli import app
from schemas.alerts import Scope, TimeWindow, alert_id

HOUR = timedelta(hours=1)
T0 = datetime(2026, 3, 2, tzinfo=UTC)
SCOPE = Scope(policy_bundle="default", model="small", product="web")


def hourly(rate: float, fp: float, hours: int, seed: int, shift_from: int | None = None,
           shifted_fp: float = 0.0) -> list[WindowCounts]:  # fmt: skip
    rng = np.random.default_rng(seed)
    out = []
    for h in range(hours):
        n = int(rng.poisson(rate))
        p = shifted_fp if shift_from is not None and h >= shift_from else fp
        k = int(rng.binomial(n, p))
        out.append(WindowCounts(refusals=n, false_positives=k, categories={"a": n}))
    return out


def test_count_series_sums_like_pooling() -> None:
    windows = [{SCOPE: c} if c.refusals % 3 else {} for c in hourly(20, 0.3, 50, 1)]
    series = CountSeries(windows)
    for a, b in ((0, 50), (10, 17), (49, 50), (-5, 3), (30, 30)):
        expected = pooled(w[SCOPE] for w in windows[max(0, a) : b] if SCOPE in w)
        got = series.total(SCOPE, a, b)
        assert (got.refusals, got.false_positives, dict(got.categories)) == (
            expected.refusals,
            expected.false_positives,
            {k: v for k, v in expected.categories.items() if v},
        )


def test_a_low_volume_shift_is_tested_over_six_hours_and_alerted_once() -> None:
    """100 refusals an hour (under min_events 300): +15 points from hour S fire at the 6-hour
    resolution within 6 hours, once: the later hours' alerts over mostly the same evidence
    are continuations."""
    hours = 24 * 8
    shift = hours - 8
    counts = {
        T0 + h * HOUR: {SCOPE: c} for h, c in enumerate(hourly(100, 0.30, hours, 7, shift, 0.45))
    }
    config = DriftConfig()
    starts = [T0 + h * HOUR for h in range(shift, hours)]
    evaluations = list(evaluate_counts(counts, starts, config))
    fp = [
        (w, b, f)
        for w, b, e in evaluations
        for f in e.findings
        if f.kind == "false_positive_rate_shift" and f.status == "alert"
    ]
    new = [(w, b, f) for w, b, f in fp if not f.continued]
    assert len(new) == 1 and new[0][2].resolution == 6
    assert new[0][0].end - (T0 + shift * HOUR) <= 6 * HOUR
    assert all(f.continued for _, _, f in fp[1:])
    window, base, finding = new[0]
    alert = to_alert(finding, window, base, "db", config, T0)
    assert alert.evidence_window == TimeWindow(start=window.end - 6 * HOUR, end=window.end)
    assert alert.resolution_seconds == 6 * 3600
    assert alert.baseline.end == window.end - 6 * HOUR
    assert alert.baseline.start == window.end - 6 * HOUR - 24 * 6 * HOUR
    period = alert.evidence_window
    assert alert.alert_id == alert_id(alert.kind, SCOPE, period.start, period.end)
    assert alert.alert_id != alert_id(alert.kind, SCOPE, window.start, window.end)
    # re-evaluating that window gives the same finding
    [(_, _, again)] = evaluate_counts(counts, [window.start], config)
    assert [f for f in again.alerts if f.kind == "false_positive_rate_shift"] == [finding]


def test_resolution_one_keeps_the_hourly_alert_ids() -> None:
    window = TimeWindow(start=T0, end=T0 + HOUR)
    period, baseline = resolution_bounds(T0, 1, DriftConfig())
    assert period == window and baseline == TimeWindow(start=T0 - 24 * HOUR, end=T0)


def test_coverage_reports_the_period_or_why_not() -> None:
    """20 refusals a day are tested over a week against four weeks; 5 a day are not, and
    the note says why."""
    settings = DetectorSettings()
    for per_day, tested in ((20, True), (5, False)):
        windows = [{SCOPE: c} for c in hourly(per_day / 24, 0.3, 24 * 35, 3)]
        evaluation = evaluate_series(
            CountSeries(windows), len(windows), settings, resolutions=(1, 6, 24, 168),
            max_baseline=28 * 24,
        )  # fmt: skip
        fp = next(f for f in evaluation.findings if f.kind == "false_positive_rate_shift")
        if tested:
            assert fp.status != "insufficient_data" and fp.resolution == 168
        else:
            assert fp.status == "insufficient_data" and "coarsest" in fp.note


def test_alpha_spreads_the_false_alarm_budget_over_the_tests() -> None:
    assert alpha_for(0.5, 3600) == pytest.approx(0.5 / 672)
    assert alpha_for(1, 86400) == pytest.approx(1 / 28)
    with pytest.raises(ValueError):
        alpha_for(0, 3600)


def test_replay_windows_cover_the_range() -> None:
    got = replay_windows(T0 + 10 * 60 * timedelta(seconds=1), T0 + 2 * HOUR, 3600)
    assert got == [T0, T0 + HOUR, T0 + 2 * HOUR]
    with pytest.raises(ValueError):
        replay_windows(T0 + HOUR, T0, 3600)


@pytest.mark.integration
def test_replay_counts_last_months_log_by_event_time(
    cli_env: dict[str, str], shared_data: Path
) -> None:
    """Audited today with event times a month ago: the default grace period counts the
    events as late in today's windows; --replay counts them in their own window."""
    runner = CliRunner()
    env = {**cli_env, "REFUSAL_AUDIT_ALERTS_MIN_EVENTS": "150"}
    t0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(days=30)
    path = shared_data / "xstest" / "xstest_v2_completions_gpt4.csv"
    at = (t0 + timedelta(minutes=10)).isoformat()
    result = runner.invoke(
        app, ["audit", str(path), "--event-time", at, "--model", "chat"], env=env
    )
    assert result.exit_code in (0, 1), result.output
    args = ["alerts", "evaluate", "--window", t0.isoformat(), "--json"]
    plain = runner.invoke(app, args, env=env)
    assert plain.exit_code == 0, plain.output
    assert not [x for x in plain.stdout.splitlines() if x.startswith("{")]  # nothing counted
    replayed = runner.invoke(app, [*args, "--replay"], env=env)
    assert replayed.exit_code == 0, replayed.output
    rows = [json.loads(x) for x in replayed.stdout.splitlines() if x.startswith("{")]
    volume = [r for r in rows if r["kind"] == "volume_anomaly"]
    # counted (no baseline yet, so not tested: the note says how many are in the period)
    assert volume and re.search(r"[1-9]\d* in the period", str(volume[0]["note"]))
    ranged = runner.invoke(
        app, [*args, "--replay", "--until", (t0 + 2 * HOUR).isoformat()], env=env
    )
    assert ranged.exit_code == 0, ranged.output
    assert "3 window(s)" in ranged.output


def test_the_findings_metric_says_at_which_resolution_each_scope_was_tested() -> None:
    """The worker's ``refusal_audit_detector_findings`` carries the resolution: a 100/h scope
    is tested at 6 windows, a scope of 2 refusals an hour is tested at the day (24 windows)
    or reported insufficient at the coarsest period looked at, never silently at 1."""
    from types import SimpleNamespace

    from refusal_audit.alerts.publisher import DetectorRun
    from refusal_audit.streaming.worker_detectors import record_findings
    from streams.metrics import WorkerMetrics

    hours = 24 * 8
    sparse = Scope(policy_bundle="default", model="tiny", product="web")
    busy, few = hourly(100, 0.30, hours, 7), hourly(2, 0.30, hours, 8)
    counts = {T0 + h * HOUR: {SCOPE: busy[h], sparse: few[h]} for h in range(hours)}
    [(_, _, evaluation)] = evaluate_counts(counts, [T0 + (hours - 1) * HOUR], DriftConfig())
    run = DetectorRun(
        evaluations=[SimpleNamespace(evaluation=evaluation)],  # type: ignore[list-item]
        gap_alerts=[],
        published=[],
    )
    metrics = WorkerMetrics()
    record_findings(metrics, run)
    samples = {
        (s.labels["kind"], s.labels["status"], s.labels["resolution"]): s.value
        for family in metrics.registry.collect()
        if family.name == "refusal_audit_detector_findings"
        for s in family.samples
    }
    by_scope = {
        (f.scope, f.kind): f for f in evaluation.findings if f.kind == "false_positive_rate_shift"
    }
    assert by_scope[(SCOPE, "false_positive_rate_shift")].resolution == 6
    assert by_scope[(sparse, "false_positive_rate_shift")].resolution > 6
    expected = Counter((f.kind, f.status, str(f.resolution)) for f in evaluation.findings)
    assert samples == {key: float(n) for key, n in expected.items()}
    assert any(key[0] == "false_positive_rate_shift" and key[2] == "6" for key in samples)
    record_findings(metrics, DetectorRun(evaluations=[], gap_alerts=[], published=[]))
    assert not [
        s
        for f in metrics.registry.collect()
        if f.name == "refusal_audit_detector_findings"
        for s in f.samples
    ]


def _switching_scope_counts() -> tuple[dict[datetime, dict[Scope, WindowCounts]], int]:
    """320 refusals an hour at 30% false positives (resolution 1: the baseline holds 300 an
    hour), then from hour S 250 an hour at 38%: +8 points, too few per hour to fire at
    resolution 1, and the baseline falls under 300 an hour at S + 7 (resolution 6)."""
    hours, shift = 24 * 8, 24 * 7
    counts = {
        T0 + h * HOUR: {
            SCOPE: WindowCounts(refusals=320, false_positives=96, categories={"a": 320})
            if h < shift
            else WindowCounts(refusals=250, false_positives=95, categories={"a": 250})
        }
        for h in range(hours)
    }
    return counts, shift


def test_a_continuation_never_hides_the_first_alert_when_the_resolution_changes() -> None:
    """Hours S .. S+6 were tested at resolution 1 and did not fire; S+7 is the first test at
    6 hours and fires: it is the episode's first alert, not the continuation of 6-hour tests
    that were never run (they would have fired: same evidence, loosened min_events)."""
    counts, shift = _switching_scope_counts()
    starts = [T0 + h * HOUR for h in range(shift - 2, shift + 24)]
    fired = [
        (w.start, f)
        for w, _, e in evaluate_counts(counts, starts, DriftConfig())
        for f in e.findings
        if f.kind == "false_positive_rate_shift" and f.scope == SCOPE and f.status == "alert"
    ]
    assert fired and fired[0][1].resolution == 6
    first = [(t, f) for t, f in fired if not f.continued]
    assert [t for t, _ in first] == [fired[0][0]]  # one alert for the episode, the first one


def test_a_window_evaluated_alone_decides_continuations_as_in_a_replay() -> None:
    """The live worker evaluates a window from the counts ``counts_span`` names; a replay
    holds every window since long before. The continuation check re-tests periods ending up
    to 167 windows earlier, whose baselines start up to 167 windows before the window's own
    coarsest baseline: read alone without them, the first alert of this weekly episode
    (10 refusals an hour at 30% after 90% long ago, then 50%) was a continuation."""
    hours, shift = 24 * 7 * 10, 24 * 7 * 10 - 24 * 5

    def fp(h: int) -> int:
        return 9 if h < shift - 760 else (5 if h >= shift else 3)

    counts = {
        T0 + h * HOUR: {SCOPE: WindowCounts(refusals=10, false_positives=fp(h),
                                            categories={"a": 10})}
        for h in range(hours)
    }  # fmt: skip
    config = DriftConfig()
    starts = [T0 + h * HOUR for h in range(shift, hours)]
    replay = {
        w.start: sorted((f.kind, f.continued) for f in e.findings if f.status == "alert")
        for w, _, e in evaluate_counts(counts, starts, config)
    }
    assert any(("false_positive_rate_shift", False) in a for a in replay.values())
    for s in starts:
        first, last = counts_span([s], config)
        alone = {t: c for t, c in counts.items() if first <= t < last}
        [(_, _, e)] = list(evaluate_counts(alone, [s], config))
        got = sorted((f.kind, f.continued) for f in e.findings if f.status == "alert")
        assert got == replay[s], s


def test_a_continuation_needs_an_alert_after_benjamini_hochberg() -> None:
    """60 scopes at 100 refusals an hour; one rises from 30% to 42% false positives. An
    hour whose 6-hour test passed alpha but not BH's q (60 scopes' p-values) sent no
    alert: the next hour's alert is the episode's first, not its continuation."""
    rng = np.random.default_rng(0)
    scopes = [Scope(policy_bundle="b", model=f"m{i % 6}", product=f"p{i}") for i in range(60)]
    hours, shift = 24 * 8, 24 * 7
    counts = {}
    for h in range(hours):
        per = {}
        for s in scopes:
            n = int(rng.poisson(100))
            p = 0.42 if s == scopes[0] and h >= shift else 0.3
            per[s] = WindowCounts(refusals=n, false_positives=int(rng.binomial(n, p)),
                                  categories={"a": n})  # fmt: skip
        counts[T0 + h * HOUR] = per
    starts = [T0 + h * HOUR for h in range(shift, shift + 12)]
    fired = [
        f
        for _, _, e in evaluate_counts(counts, starts, DriftConfig())
        for f in e.findings
        if f.scope == scopes[0] and f.kind == "false_positive_rate_shift" and f.status == "alert"
    ]
    assert fired and fired[0].resolution == 6
    assert [f.continued for f in fired] == [False] + [True] * (len(fired) - 1)


def test_an_hourly_alert_names_the_baseline_it_was_tested_against() -> None:
    """``alerts_baseline_windows`` may exceed the 28-day cap of a trailing baseline; the
    resolution-1 test pools 672 hours, and its alert (baseline, evidence query, summary) must
    say so, not the 1,000 hours configured."""
    config = DriftConfig(baseline_windows=1000)
    hours = 1100
    counts = {
        T0 + h * HOUR: {
            SCOPE: WindowCounts(
                refusals=400, false_positives=120 if h < hours - 1 else 220, categories={"a": 400}
            )
        }
        for h in range(hours)
    }
    [(window, baseline, e)] = list(evaluate_counts(counts, [T0 + (hours - 1) * HOUR], config))
    [f] = [f for f in e.alerts if f.kind == "false_positive_rate_shift" and f.scope == SCOPE]
    assert f.resolution == 1 and f.baseline_counts["refusals"] == 672 * 400
    alert = to_alert(f, window, baseline, "db", config, T0)
    assert alert.baseline.end == window.start
    assert alert.baseline.end - alert.baseline.start == 672 * HOUR
    assert alert.evidence_window == window


def test_two_new_categories_in_one_window_are_two_alerts() -> None:
    """Each new category is its own alert (its id names the category); other kinds' ids are
    kind, scope and period as before."""
    from processors.drift_detection import new_categories

    settings = DetectorSettings(new_category_min=5)
    cur = WindowCounts(refusals=400, categories={"x": 10, "y": 12, "old": 378})
    base = WindowCounts(refusals=9000, categories={"old": 9000})
    findings = [f for f in new_categories(SCOPE, cur, base, settings) if f.status == "alert"]
    assert sorted(f.moved for f in findings) == [("x",), ("y",)]
    window = TimeWindow(start=T0, end=T0 + HOUR)
    config = DriftConfig()
    alerts = [to_alert(f, window, window, "db", config, T0) for f in findings]
    assert len({a.alert_id for a in alerts}) == 2
    assert alerts[0].alert_id == alert_id("new_category", SCOPE, T0, T0 + HOUR, "x")


def test_the_evaluate_summary_tells_no_alert_from_could_not_look() -> None:
    """``alerts evaluate``'s closing line counts every status (continuations apart) and the
    periods tested, so a run that could not look anywhere does not read like a quiet one."""
    from refusal_audit.alerts.cli import coverage_summary

    def row(status: str, hours: int, continued: bool = False) -> dict[str, object]:
        return {"status": status, "resolution_seconds": hours * 3600, "continued": continued}

    rows = [
        row("alert", 6),
        row("alert", 6, continued=True),
        row("no_change", 1),
        row("no_change", 24),
        row("insufficient_data", 168),
        row("insufficient_data", 168),
    ]
    assert coverage_summary(rows) == (
        "6 finding(s): 1 alerting (1 more continuing earlier alerts), 2 no change, "
        "2 could not look (insufficient data); tested over 1h 1, 6h 2, 1d 1"
    )
    quiet = coverage_summary([row("insufficient_data", 168)] * 3)
    assert "0 alerting" in quiet and "3 could not look" in quiet and "tested over" not in quiet
