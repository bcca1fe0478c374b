"""Drift detection from ClickHouse aggregates: the XSTest shift, late events, reproducible
evidence, and the false-alarm rate of a stationary stream of more than 100,000 events."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from drift_data import Row, stored_rows, xstest_refusals
from drift_reference import from_views
from scipy.stats import binom

from processors.drift_detection import DetectorSettings, WindowCounts
from refusal_audit.alerts.drift import DriftConfig, closed_windows, evaluate_windows, window_start
from schemas.alerts import Scope
from warehouse import connect, load_migrations, migrate
from warehouse.drift_assessments import view_call, window_counts
from warehouse.store import Warehouse

pytestmark = pytest.mark.integration

HOUR = timedelta(hours=1)
W0 = datetime(2026, 3, 2, 10, tzinfo=UTC)


def store(warehouse: Warehouse, rows: list[Row], at: datetime, **kw: timedelta) -> None:
    events, assessments = stored_rows(rows, at, **kw)
    warehouse.insert_events(events)
    warehouse.insert_assessments(assessments)


def test_xstest_shift_from_the_warehouse_with_reproducible_evidence(
    warehouse: Warehouse, shared_data: Path
) -> None:
    llama = [
        Row(r.log_id, r.category, r.false_positive, model="chat")
        for r in xstest_refusals(shared_data, "llama2orig")
    ]
    gpt4 = [
        Row(r.log_id, r.category, r.false_positive, model="chat")
        for r in xstest_refusals(shared_data, "gpt4")
    ]
    store(warehouse, llama, W0 + timedelta(minutes=10))
    store(warehouse, gpt4, W0 + HOUR + timedelta(minutes=10))
    config = DriftConfig(baseline_windows=1, detectors=DetectorSettings(min_events=150))
    [result] = evaluate_windows(
        warehouse.client, warehouse.database, config, now=W0 + 3 * HOUR, windows=[W0 + HOUR]
    )
    alerts = {a.kind: a for a in result.alerts}
    assert {"false_positive_rate_shift", "category_mix_drift"} <= set(alerts)
    fp = alerts["false_positive_rate_shift"]
    assert fp.scope == Scope(policy_bundle="default", model="chat", product="p")
    assert fp.current_counts == {
        "refusals": len(gpt4),
        "false_positives": sum(r.false_positive for r in gpt4),
    }
    assert fp.statistic.effect_size < -20  # pp, GPT-4 over-refuses less
    assert fp.window.start == W0 + HOUR and fp.baseline.start == W0
    assert set(fp.example_log_ids) <= {r.log_id for r in gpt4 if r.false_positive}
    assert fp.example_log_ids
    # the summary's query reproduces the counts
    assert fp.evidence_query in fp.summary
    rows = warehouse.client.query(fp.evidence_query).result_rows
    by_period = {period: (n, k) for period, n, k in rows}
    assert by_period["window"] == (len(gpt4), sum(r.false_positive for r in gpt4))
    assert by_period["baseline"] == (len(llama), sum(r.false_positive for r in llama))
    mix = alerts["category_mix_drift"]
    mix_rows = warehouse.client.query(mix.evidence_query).result_rows
    window_mix = {c: n for period, c, n in mix_rows if period == "window"}
    assert sum(window_mix.values()) == len(gpt4)
    # recomputation gives the same ids (deterministic)
    [again] = evaluate_windows(
        warehouse.client, warehouse.database, config, now=W0 + 5 * HOUR, windows=[W0 + HOUR]
    )
    assert sorted(a.alert_id for a in again.alerts) == sorted(a.alert_id for a in result.alerts)


def test_late_events_count_in_their_arrival_window(warehouse: Warehouse) -> None:
    on_time = [Row(f"t{i}", "a", False) for i in range(3)]
    within_grace = [Row(f"g{i}", "a", False) for i in range(2)]
    late = [Row(f"l{i}", "a", True) for i in range(4)]
    store(warehouse, on_time, W0 + timedelta(minutes=5))
    # arrives 4 minutes after the window ends: within the 5-minute grace
    store(warehouse, within_grace, W0 + timedelta(minutes=50), arrival_delay=timedelta(minutes=14))
    # arrives two hours after its window ended: counted in the window it arrived in
    store(warehouse, late, W0 + timedelta(minutes=30), arrival_delay=timedelta(hours=2, minutes=40))
    counts = window_counts(
        warehouse.client,
        warehouse.database,
        window_seconds=3600,
        grace_seconds=300,
        start=W0 - HOUR,
        end=W0 + 5 * HOUR,
    )
    scope = Scope(policy_bundle="default", model="m", product="p")
    assert counts[W0][scope].refusals == 5 and counts[W0][scope].late == 0
    arrival = W0 + 3 * HOUR
    assert counts[arrival][scope].refusals == 4 and counts[arrival][scope].late == 4
    assert counts[arrival][scope].false_positives == 4


def all_counts(warehouse: Warehouse) -> dict[datetime, dict[Scope, WindowCounts]]:
    """Window counts over a wide range around W0 (every window the tests below can touch)."""
    return window_counts(
        warehouse.client,
        warehouse.database,
        window_seconds=3600,
        grace_seconds=300,
        start=W0 - 24 * HOUR,
        end=W0 + 48 * HOUR,
    )


def merge_everything(warehouse: Warehouse) -> None:
    """Force the merges (ReplacingMergeTree drops the older event versions)."""
    for table in ("refusal_events", "assessments", "event_arrivals"):
        warehouse.client.command(f"OPTIMIZE TABLE `{warehouse.database}`.{table} FINAL")


def arrival_times(warehouse: Warehouse) -> dict[str, datetime]:
    view = view_call(warehouse.database, 3600, 300)
    rows = warehouse.client.query(f"SELECT log_id, ingested_at FROM {view}").result_rows
    return {str(log_id): at for log_id, at in rows}


def test_reprocessing_the_same_events_later_leaves_window_counts_unchanged(
    warehouse: Warehouse,
) -> None:
    on_time = [Row(f"t{i}", "a", i % 2 == 0) for i in range(3)]
    store(warehouse, on_time, W0 + timedelta(minutes=5))
    before = all_counts(warehouse)
    scope = Scope(policy_bundle="default", model="m", product="p")
    assert set(before) == {W0}
    assert before[W0][scope].refusals == 3 and before[W0][scope].late == 0
    first = arrival_times(warehouse)
    # the same input again: an identical re-run, then a redelivery / re-run of the job long
    # after the grace period (a newer ingested_at replaces each event row)
    store(warehouse, on_time, W0 + timedelta(minutes=5))
    store(warehouse, on_time, W0 + timedelta(minutes=5), arrival_delay=timedelta(hours=3))
    assert all_counts(warehouse) == before
    assert arrival_times(warehouse) == first
    # the newer version did replace the event row ...
    newest = warehouse.client.query(
        "SELECT max(ingested_at) FROM {db:Identifier}.refusal_events FINAL",
        parameters={"db": warehouse.database},
    ).result_rows[0][0]
    assert newest == W0 + timedelta(minutes=5) + timedelta(hours=3)
    # ... and after the merges (older versions gone) the counts still do not move
    merge_everything(warehouse)
    assert all_counts(warehouse) == before
    assert arrival_times(warehouse) == first
    store(warehouse, on_time, W0 + timedelta(minutes=5), arrival_delay=timedelta(hours=7))
    merge_everything(warehouse)
    assert all_counts(warehouse) == before


def test_late_event_stays_in_its_first_arrival_window(warehouse: Warehouse) -> None:
    late = [Row(f"l{i}", "a", True) for i in range(4)]
    scope = Scope(policy_bundle="default", model="m", product="p")
    # first arrival 2h40 after its event time: late, counted in the window it arrived in
    store(warehouse, late, W0 + timedelta(minutes=30), arrival_delay=timedelta(hours=2, minutes=40))
    arrival = W0 + 3 * HOUR
    before = all_counts(warehouse)
    assert set(before) == {arrival}
    assert before[arrival][scope].refusals == 4 and before[arrival][scope].late == 4
    # redelivered hours later: it stays in its first arrival window, not the redelivery's
    store(warehouse, late, W0 + timedelta(minutes=30), arrival_delay=timedelta(hours=6))
    assert all_counts(warehouse) == before
    merge_everything(warehouse)
    after = all_counts(warehouse)
    assert after == before
    assert W0 + 6 * HOUR not in after
    assert set(arrival_times(warehouse).values()) == {W0 + timedelta(hours=3, minutes=10)}


def test_upgrade_backfills_first_arrivals_of_existing_events(
    chdb_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database migrated up to 0008 with stored events gets their arrival times from
    0009's backfill: the counts do not move on upgrade, nor on a redelivery afterwards.
    (At 0008 the counts are read from the views: ``warehouse.drift_windows`` reads 0009's
    ``event_arrivals``.)"""
    database = f"t_{uuid.uuid4().hex[:16]}"
    client = connect(chdb_dsn, database)
    try:
        # up to 0008, plus what today's Warehouse and counts use (0011-0013, 0021, 0024)
        later = ("event_fingerprint", "review_verdicts", "drift_reviews", "refusal_disagreement",
                 "daily_aggregates")  # fmt: skip
        up_to_0008 = [m for m in load_migrations() if m.version <= "0008" or m.name in later]
        migrate(client, database, migrations=up_to_0008)
        wh = Warehouse(client, database, retries=1, retry_wait=0.0)
        on_time = [Row(f"t{i}", "a", False) for i in range(3)]
        late = [Row(f"l{i}", "a", True) for i in range(2)]
        store(wh, on_time, W0 + timedelta(minutes=5))
        store(wh, late, W0 + timedelta(minutes=30), arrival_delay=timedelta(hours=2, minutes=40))
        with from_views(monkeypatch, database):
            before = all_counts(wh)
        assert migrate(client, database)[0] == "0009_event_arrivals"
        assert all_counts(wh) == before
        # re-running the backfill (an interrupted migration applied again) is harmless
        [arrivals] = [m for m in load_migrations() if m.version == "0009"]
        [backfill] = [s for s in arrivals.statements(database) if "INSERT INTO" in s]
        client.command(backfill)
        assert all_counts(wh) == before
        # a redelivery of everything hours later, then the merges: still the same counts
        store(wh, on_time, W0 + timedelta(minutes=5), arrival_delay=timedelta(hours=9))
        store(wh, late, W0 + timedelta(minutes=30), arrival_delay=timedelta(hours=9))
        merge_everything(wh)
        assert all_counts(wh) == before
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{database}`")
        client.close()


def test_closed_windows_wait_for_the_grace_period() -> None:
    config = DriftConfig(grace_seconds=300, lookback_windows=2)
    now = W0 + timedelta(minutes=4)  # W0 - 1h closes at W0 + 5 min
    assert closed_windows(now, config) == [W0 - 3 * HOUR, W0 - 2 * HOUR]
    now = W0 + timedelta(minutes=5)
    assert closed_windows(now, config) == [W0 - 2 * HOUR, W0 - HOUR]
    assert window_start(W0 + timedelta(minutes=59), 3600) == W0


def test_stationary_stream_false_alarm_rate_is_within_the_fdr(warehouse: Warehouse) -> None:
    """>= 100,000 events, >= 100 evaluated windows, 6 finest scopes (+ roll-ups), no shift."""
    rng = np.random.default_rng(20261129)
    categories = ["weapons", "self_harm", "privacy", "medical", "legal", "other_harm"]
    probs = [0.3, 0.2, 0.2, 0.15, 0.1, 0.05]
    scopes = [(m, p) for m in ("model-a", "model-b", "model-c") for p in ("chat", "api")]
    windows = 130
    start = datetime(2026, 1, 1, tzinfo=UTC)
    total = 0
    for w in range(windows):
        rows: list[Row] = []
        for model, product in scopes:
            n = int(rng.poisson(200))
            cats = rng.choice(len(categories), size=n, p=probs)
            fps = rng.random(n) < 0.2
            reviews = rng.random(n) < 0.3
            rows += [
                Row(f"w{w}-{model}-{product}-{i}", categories[c], bool(f), bool(r), model, product)
                for i, (c, f, r) in enumerate(zip(cats, fps, reviews, strict=True))
            ]
        store(warehouse, rows, start + w * HOUR + timedelta(minutes=30))
        total += len(rows)
    assert total >= 100_000
    evaluated = [start + w * HOUR for w in range(24, windows)]
    assert len(evaluated) >= 100
    # the configured detectors, and the bare tests (no effect-size thresholds), which is
    # where the FDR control has to hold on its own
    bare = DetectorSettings(js_threshold=0, rate_shift_pp=0, volume_ratio=1)
    for detectors in (DetectorSettings(), bare):
        config = DriftConfig(baseline_windows=24, detectors=detectors)
        results = evaluate_windows(
            warehouse.client, warehouse.database, config, now=start + 200 * HOUR, windows=evaluated
        )
        assert len(results) == len(evaluated)
        tested = sum(
            1 for r in results for f in r.evaluation.findings if f.status != "insufficient_data"
        )
        assert tested >= 10 * len(evaluated)  # the detectors did run, on many scopes
        alarmed_windows = sum(1 for r in results if r.alerts)
        print(f"{detectors}: {alarmed_windows} of {len(results)} windows alarmed, {tested} tests")
        # Under no shift BH bounds P(any alert in a window) by the FDR (all nulls true);
        # allow the binomial's 99.9% quantile for the number of alarmed windows.
        limit = binom.ppf(0.999, len(results), detectors.fdr)
        assert alarmed_windows <= limit, [a.summary for r in results for a in r.alerts]


def test_classification_drift_when_reviewers_disagree_more(warehouse: Warehouse) -> None:
    """Reviewers disagree with 10% of the baseline's reviewed assessments and 35% of the
    window's: a classification_drift alert whose evidence query reproduces its counts. A
    drop in disagreement is good news and does not alert."""
    from test_pipeline import settings

    from processors.review import make_verdict
    from refusal_audit.bundles import load_bundles
    from schemas.review import VerdictInput
    from warehouse.review import insert_verdicts

    bundle = load_bundles(settings().policy_bundles)["default"]
    rows = {
        w: [Row(f"w{w}-{i}", "over_refusal", i % 2 == 0) for i in range(200)] for w in (0, 1)
    }
    for w, window_rows in rows.items():
        store(warehouse, window_rows, W0 + w * HOUR + timedelta(minutes=10))
    share = {0: 0.10, 1: 0.35}
    verdicts = []
    for a in warehouse.current_assessments():
        w, i = int(a["log_id"][1]), int(a["log_id"].split("-")[1])
        disagree = i < share[w] * 200
        item = VerdictInput(
            log_id=a["log_id"],
            reviewer="ann",
            verdict="disagree" if disagree else "agree",
            corrected_category="genuine_safety_refusal" if disagree else None,
            corrected_false_positive=(not a["is_estimated_false_positive"]) if disagree else None,
        )
        verdicts.append(make_verdict(item, a, bundle, W0 + 2 * HOUR, "test"))
    insert_verdicts(warehouse, verdicts)
    config = DriftConfig(baseline_windows=1, detectors=DetectorSettings(min_events=150))
    [result] = evaluate_windows(
        warehouse.client, warehouse.database, config, now=W0 + 3 * HOUR, windows=[W0 + HOUR]
    )
    drift = [a for a in result.alerts if a.kind == "classification_drift"]
    assert drift, [f.kind for f in result.evaluation.findings]
    alert = drift[0]
    assert alert.current_counts == {"reviewed": 200, "review_disagreements": 70}
    assert alert.baseline_counts == {"reviewed": 200, "review_disagreements": 20}
    assert alert.statistic.effect_size == pytest.approx(25.0)
    got = {p: (n, k) for p, n, k in warehouse.client.query(alert.evidence_query).result_rows}
    assert got == {"window": (200, 70), "baseline": (200, 20)}
    # the other way round (the window improves on its baseline): no alert
    flipped = DriftConfig(
        pinned_baseline=(W0 + HOUR, W0 + 2 * HOUR), detectors=DetectorSettings(min_events=150)
    )
    [better] = evaluate_windows(
        warehouse.client, warehouse.database, flipped, now=W0 + 3 * HOUR, windows=[W0]
    )
    kinds = {f.kind: f for f in better.evaluation.findings if f.scope == alert.scope}
    assert kinds["classification_drift"].effect < -20
    assert not [a for a in better.alerts if a.kind == "classification_drift"]
