"""Drift detectors: a real shift (XSTest llama2orig -> gpt4), no shift, insufficient data,
sparse-category merging, new categories and the multiple-testing adjustment (pure code)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from drift_data import by_kind, counts_of, xstest_refusals
from scipy.stats import chi2_contingency, fisher_exact

from processors.drift_detection import (
    DetectorSettings,
    WindowCounts,
    evaluate,
    merge_sparse,
    rollup_scopes,
)
from schemas.alerts import ALL, Scope

SCOPE = Scope(policy_bundle="default", model="m", product="p")
SETTINGS = DetectorSettings(min_events=150)


@pytest.fixture(scope="module")
def llama(shared_data: Path) -> WindowCounts:
    return counts_of(xstest_refusals(shared_data, "llama2orig"))


@pytest.fixture(scope="module")
def gpt4(shared_data: Path) -> WindowCounts:
    return counts_of(xstest_refusals(shared_data, "gpt4"))


def test_real_shift_fires_false_positive_rate_alert_with_direction_and_size(
    llama: WindowCounts, gpt4: WindowCounts
) -> None:
    evaluation = evaluate({SCOPE: gpt4}, {SCOPE: llama}, 1, SETTINGS)
    alerts = by_kind(evaluation.alerts)
    fp = alerts["false_positive_rate_shift"]
    expected_pp = 100 * (
        gpt4.false_positives / gpt4.refusals - llama.false_positives / llama.refusals
    )
    # GPT-4 over-refuses far less than Llama-2 with its original system prompt
    assert expected_pp < -20
    assert fp.effect == pytest.approx(expected_pp)
    assert fp.current_rate is not None and fp.baseline_rate is not None
    assert fp.current_rate.rate < fp.baseline_rate.rate
    assert fp.current_rate.high < fp.baseline_rate.low  # the intervals do not overlap
    assert fp.q_value is not None and fp.q_value <= SETTINGS.fdr


def test_real_shift_category_mix_names_the_categories_that_moved(
    llama: WindowCounts, gpt4: WindowCounts
) -> None:
    mix = by_kind(evaluate({SCOPE: gpt4}, {SCOPE: llama}, 1, SETTINGS).alerts)["category_mix_drift"]
    assert mix.effect >= SETTINGS.js_threshold
    moved = {m.split(" ")[0]: float(m.split(" ")[1]) for m in mix.moved}
    assert moved, "a category-mix alert must name categories"
    share = {
        c: 100
        * (gpt4.categories.get(c, 0) / gpt4.refusals - llama.categories.get(c, 0) / llama.refusals)
        for c in set(gpt4.categories) | set(llama.categories)
    }
    # the biggest real movers (by share change) are among the named ones, with the right sign
    biggest = max((c for c in moved if c != "other"), key=lambda c: abs(moved[c]))
    assert moved[biggest] == pytest.approx(share[biggest], abs=0.05)
    top_real = max(share, key=lambda c: abs(share[c]))
    assert top_real in moved
    assert np.sign(moved[top_real]) == np.sign(share[top_real])


def test_same_model_replayed_twice_fires_nothing(llama: WindowCounts, shared_data: Path) -> None:
    assert evaluate({SCOPE: llama}, {SCOPE: llama}, 1, SETTINGS).alerts == []
    rows = xstest_refusals(shared_data, "llama2orig")
    random.Random(7).shuffle(rows)
    half = len(rows) // 2
    a, b = counts_of(rows[:half]), counts_of(rows[half:])
    settings = DetectorSettings(min_events=150)
    evaluation = evaluate({SCOPE: a}, {SCOPE: b}, 1, settings)
    assert evaluation.alerts == []
    assert all(f.status == "no_change" for f in evaluation.findings)


def test_insufficient_data_is_reported_not_tested(llama: WindowCounts, gpt4: WindowCounts) -> None:
    evaluation = evaluate({SCOPE: gpt4}, {SCOPE: llama}, 1, DetectorSettings())  # 300 needed
    assert gpt4.refusals < 300
    # volume needs min_events in the baseline only (a drop is what it looks for)
    assert {f.kind for f in evaluation.alerts} <= {"volume_anomaly"}
    statuses = {f.kind: f.status for f in evaluation.findings}
    assert statuses["false_positive_rate_shift"] == "insufficient_data"
    assert statuses["category_mix_drift"] == "insufficient_data"
    note = next(f.note for f in evaluation.findings if f.kind == "false_positive_rate_shift")
    assert "300" in note and str(gpt4.refusals) in note


def test_sparse_categories_merge_into_other() -> None:
    labels, table = merge_sparse({"a": 100, "b": 3, "c": 1}, {"a": 90, "b": 2, "d": 1}, 5.0)
    assert labels == ["a", "other"]
    assert table.tolist() == [[100, 4], [90, 3]]
    # and the chi-square on the merged table is scipy's
    res = chi2_contingency(table, correction=False)
    assert 0 <= res.pvalue <= 1


def test_new_category_fires_only_at_min_count() -> None:
    base = WindowCounts(refusals=400, categories={"a": 400})
    cur = WindowCounts(refusals=400, categories={"a": 380, "b": 20})
    found = [f for f in evaluate({SCOPE: cur}, {SCOPE: base}, 4, DetectorSettings()).alerts]
    assert [f.moved for f in found if f.kind == "new_category"] == [("b",)]
    cur = WindowCounts(refusals=400, categories={"a": 381, "b": 19})
    assert not [
        f
        for f in evaluate({SCOPE: cur}, {SCOPE: base}, 4, DetectorSettings()).alerts
        if f.kind == "new_category"
    ]


def test_volume_anomaly_both_directions() -> None:
    base = WindowCounts(refusals=4000, categories={"a": 4000})  # 1000 per window over 4
    settings = DetectorSettings()
    for n, fires in ((1000, False), (1050, False), (2000, True), (400, True)):
        cur = WindowCounts(refusals=n, categories={"a": n})
        kinds = by_kind(evaluate({SCOPE: cur}, {SCOPE: base}, 4, settings).alerts)
        assert ("volume_anomaly" in kinds) is fires, n
    cur = WindowCounts(refusals=400, categories={"a": 400})
    drop = by_kind(evaluate({SCOPE: cur}, {SCOPE: base}, 4, settings).alerts)["volume_anomaly"]
    assert drop.effect == pytest.approx(-2.5)
    assert drop.effect_name == "inverse_rate_ratio"


def test_significant_but_small_effect_does_not_alert() -> None:
    # 20.0% vs 21.5% on 100k events each: highly significant, but under 5 pp
    base = WindowCounts(refusals=100_000, false_positives=20_000, categories={"a": 100_000})
    cur = WindowCounts(refusals=100_000, false_positives=21_500, categories={"a": 100_000})
    findings = evaluate({SCOPE: cur}, {SCOPE: base}, 100, DetectorSettings()).findings
    fp = next(f for f in findings if f.kind == "false_positive_rate_shift")
    assert fp.p_value is not None and fp.p_value < 1e-10
    assert fp.status == "no_change"


def test_small_counts_use_fisher_exact() -> None:
    base = WindowCounts(refusals=300, false_positives=1, categories={"a": 300})
    cur = WindowCounts(refusals=300, false_positives=6, categories={"a": 300})
    # expected false positives per row: 300 * 7/600 = 3.5 < 5
    fp = next(
        f
        for f in evaluate({SCOPE: cur}, {SCOPE: base}, 1, DetectorSettings()).findings
        if f.kind == "false_positive_rate_shift"
    )
    assert fp.statistic_name == "fisher_exact"
    assert fp.p_value == pytest.approx(fisher_exact([[6, 294], [1, 299]]).pvalue)


def test_benjamini_hochberg_adjusts_across_scopes() -> None:
    # one real shift among many null scopes: q-values are >= p-values, and nulls stay quiet
    rng = np.random.default_rng(3)
    current, baseline = {}, {}
    for i in range(20):
        scope = Scope(policy_bundle="default", model=f"m{i}", product="p")
        n = 1000
        baseline[scope] = WindowCounts(
            refusals=n, false_positives=int(rng.binomial(n, 0.2)), categories={"a": n}
        )
        rate = 0.4 if i == 0 else 0.2
        current[scope] = WindowCounts(
            refusals=n, false_positives=int(rng.binomial(n, rate)), categories={"a": n}
        )
    findings = evaluate(current, baseline, 10, DetectorSettings()).findings
    tested = [f for f in findings if f.p_value is not None]
    assert all(f.q_value is not None and f.q_value >= f.p_value - 1e-12 for f in tested)
    fired = [f for f in findings if f.status == "alert" and f.kind == "false_positive_rate_shift"]
    assert {f.scope.model for f in fired} >= {"m0"}
    assert all(f.scope.model in ("m0", ALL) for f in fired)


def test_rollups_skip_single_member_groups() -> None:
    a = Scope(policy_bundle="b", model="m1", product="p1")
    b = Scope(policy_bundle="b", model="m1", product="p2")
    c = Scope(policy_bundle="b", model="m2", product="p1")
    groups = rollup_scopes([a, b, c])
    assert groups[Scope(policy_bundle="b", model="m1", product=ALL)] == [a, b]
    assert Scope(policy_bundle="b", model="m2", product=ALL) not in groups
    assert groups[Scope(policy_bundle="b", model=ALL, product=ALL)] == [a, b, c]


def test_window_counts_survive_their_json_form_and_bad_forms_are_refused() -> None:
    import orjson

    from processors.drift_detection import WindowCounts, counts_from_dict, counts_to_dict

    counts = WindowCounts(refusals=12, false_positives=3, review_flags=2, policy_gaps=1, late=4,
                          categories={"a": 7, "b": 5}, examples={"a": ("x", "y")}, reviewed=2,
                          review_disagreements=1)  # fmt: skip
    assert counts_from_dict(orjson.loads(orjson.dumps(counts_to_dict(counts)))) == counts
    good = counts_to_dict(counts)
    for bad in ({**good, "refusals": -1}, {**good, "refusals": "12"}, {**good, "extra": 1},
                {k: v for k, v in good.items() if k != "late"}, {**good, "categories": {"a": "7"}},
                {**good, "examples": {"a": "x"}}, {**good, "reviewed": True}):  # fmt: skip
        with pytest.raises(ValueError):
            counts_from_dict(bad)
