"""The review named queries (``query review_agreement``, ``query verified_false_positive_rate``)
against figures computed independently here, and the stratified estimator (issue 10)."""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_pipeline import audit, options, settings

from processors.stats import stratified_proportion
from refusal_audit.audit.batch import run_batch
from refusal_audit.bundles import load_bundles
from refusal_audit.review.verdict_files import import_verdicts, stats_from_store
from warehouse import Warehouse
from warehouse.queries import run_named

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"
T_IMPORT = datetime(2026, 12, 1, tzinfo=UTC)


def test_stratified_proportion_matches_a_hand_computation() -> None:
    # stratum 1: 40 items, all reviewed (a census: no variance), 10 positive
    # stratum 2: 160 items, 20 reviewed, 2 positive
    estimate, low, high = stratified_proportion([(40, 10, 40), (160, 2, 20)])  # type: ignore[misc]
    assert estimate == pytest.approx(0.2 * 0.25 + 0.8 * 0.1)
    q = 4 / 24
    half = 1.959964 * math.sqrt(0.8**2 * (1 - 20 / 160) * q * (1 - q) / 24)
    assert (low, high) == pytest.approx((estimate - half, estimate + half), abs=1e-6)
    census = stratified_proportion([(10, 3, 10), (5, 5, 5)])
    assert census is not None and census[0] == census[1] == census[2] == pytest.approx(8 / 15)
    assert stratified_proportion([(10, 0, 0), (5, 1, 5)]) is None  # a stratum nobody reviewed
    assert stratified_proportion([(0, 0, 0)]) is None
    assert stratified_proportion([(0, 0, 0), (10, 0, 10)]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        stratified_proportion([(5, 3, 2)])


def kappa_2x2(yy: int, yn: int, ny: int, nn: int) -> float:
    n = yy + yn + ny + nn
    observed = (yy + nn) / n
    expected = ((yy + yn) * (yy + ny) + (ny + nn) * (yn + nn)) / n**2
    return (observed - expected) / (1 - expected)


@pytest.fixture
def reviewed(warehouse: Warehouse, tmp_path: Path) -> list[dict[str, Any]]:
    """Every current assessment judged by one reviewer with a fixed, varied pattern."""
    audit([EXAMPLE_LOG], warehouse)
    return review_every_assessment(warehouse, tmp_path)


def review_every_assessment(warehouse: Warehouse, tmp_path: Path) -> list[dict[str, Any]]:
    """Import one reviewer's ("ann") verdict on every current assessment: every 4th flips
    the false-positive judgement, every 7th (i % 7 == 5) names another category, the rest
    agree. Returns the assessments with ``ev`` (event time), ``human_fp`` and
    ``human_category``."""
    rows = warehouse.select(
        "SELECT a.*, e.event_time AS ev FROM {db:Identifier}.current_assessments AS a "
        "INNER JOIN (SELECT log_id, event_time FROM {db:Identifier}.refusal_events FINAL) AS e "
        "USING (log_id) ORDER BY log_id"
    )
    path = tmp_path / "verdicts.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["log_id", "reviewer", "verdict", "corrected_category",
                         "corrected_false_positive", "corrected_clause", "note"])  # fmt: skip
        for i, r in enumerate(rows):
            if i % 4 == 3:  # flip the false-positive judgement, keep the category
                fp = not r["is_estimated_false_positive"]
                writer.writerow([r["log_id"], "ann", "disagree", r["category"], str(fp), "", ""])
                r["human_fp"], r["human_category"] = fp, r["category"]
            elif i % 7 == 5:  # another category, same false-positive judgement
                other = "over_refusal" if r["category"] != "over_refusal" else "privacy"
                fp = r["is_estimated_false_positive"]
                writer.writerow([r["log_id"], "ann", "disagree", other, str(fp), "", ""])
                r["human_fp"], r["human_category"] = fp, other
            else:
                writer.writerow([r["log_id"], "ann", "agree", "", "", "", ""])
                r["human_fp"], r["human_category"] = r["is_estimated_false_positive"], r["category"]
    bundles = load_bundles(settings().policy_bundles)
    report = import_verdicts(warehouse, bundles, path, datetime(2026, 12, 1, tzinfo=UTC))
    assert report.errors == [] and report.imported == len(rows)
    return rows


def monday(moment: datetime) -> Any:
    day = moment.astimezone(UTC).date()
    return day - timedelta(days=day.weekday())


def test_review_agreement_matches_an_independent_computation(
    warehouse: Warehouse, reviewed: list[dict[str, Any]]
) -> None:
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in reviewed:
        key = (monday(r["ev"]), r["model"], r["policy_bundle"], r["engine"], r["prompt_version"])
        groups[key].append(r)
    result = run_named(warehouse.client, warehouse.database, "review_agreement")
    got = {tuple(row[:5]): row for row in result.rows}
    assert set(got) == set(groups)
    checked = 0
    for key, items in groups.items():
        row = dict(zip(result.columns, got[key], strict=True))
        assert row["compared"] == len(items)
        if len(items) < 30:
            assert row["fp_agreement"] is None and "insufficient data" in row["note"]
            continue
        cells = defaultdict(int)
        for r in items:
            cells[(r["is_estimated_false_positive"], r["human_fp"])] += 1
        yy, yn = cells[(True, True)], cells[(True, False)]
        ny, nn = cells[(False, True)], cells[(False, False)]
        assert row["fp_agreement"] == pytest.approx((yy + nn) / len(items))
        assert row["fp_kappa"] == pytest.approx(kappa_2x2(yy, yn, ny, nn))
        assert row["fp_low"] < row["fp_agreement"] < row["fp_high"]
        assert row["fp_kappa_low"] < row["fp_kappa"] < row["fp_kappa_high"]
        same = sum(r["human_category"] == r["category"] for r in items)
        assert row["category_agreement"] == pytest.approx(same / len(items))
        checked += 1
    assert checked >= 1
    one_model = run_named(warehouse.client, warehouse.database, "review_agreement",
                          model=reviewed[0]["model"])  # fmt: skip
    assert {r[1] for r in one_model.rows} == {reviewed[0]["model"]}


def test_verified_false_positive_rate_is_the_stratified_estimate(
    warehouse: Warehouse, reviewed: list[dict[str, Any]]
) -> None:
    result = run_named(warehouse.client, warehouse.database, "verified_false_positive_rate")
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in reviewed:
        groups[(monday(r["ev"]), r["model"], r["policy_bundle"])].append(r)
    checked = 0
    for values in result.as_dicts():
        items = groups[(values["week"], values["model"], values["policy_bundle"])]
        flagged = [r for r in items if r["requires_human_review"]]
        unflagged = [r for r in items if not r["requires_human_review"]]
        sample = [r for r in unflagged if r["review_reason"] == "random_sample"]
        assert (values["assessed"], values["flagged"], values["sample_reviewed"]) == (
            len(items), len(flagged), len(sample),
        )  # fmt: skip
        assert values["model_fp_rate"] == pytest.approx(
            sum(r["is_estimated_false_positive"] for r in items) / len(items)
        )
        if values["verified_fp_rate"] is None:
            assert values["note"]
            continue
        p_flagged = sum(r["human_fp"] for r in flagged) / len(flagged)
        p_sample = sum(r["human_fp"] for r in sample) / len(sample)
        expected = (len(flagged) * p_flagged + len(unflagged) * p_sample) / len(items)
        assert values["verified_fp_rate"] == pytest.approx(expected)
        assert values["verified_low"] <= expected <= values["verified_high"]
        checked += 1
    assert checked >= 1


def write_verdicts(path: Path, rows: list[dict[str, Any]], flip: bool) -> None:
    """One reviewer's verdict per row: agree, or (``flip``) the opposite fp judgement."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["log_id", "reviewer", "verdict", "corrected_category",
                         "corrected_false_positive", "corrected_clause", "note"])  # fmt: skip
        for r in rows:
            if flip:
                fp = not r["is_estimated_false_positive"]
                writer.writerow([r["log_id"], "ann", "disagree", r["category"], str(fp), "", ""])
            else:
                writer.writerow([r["log_id"], "ann", "agree", "", "", "", ""])


def test_uncertainty_sampled_items_never_feed_the_random_stratum(
    warehouse: Warehouse, tmp_path: Path
) -> None:
    """Reviewing the uncertainty-sampled items (all against the model) leaves the verified
    false-positive rate, its random stratum and ``review stats``' random-sample share exactly
    as they were; ``review_agreement`` (no strata) counts them as the verdicts they are."""
    cfg = settings(review_uncertainty_band=0.3)
    run_batch(cfg, [EXAMPLE_LOG], options(), sink=warehouse)
    rows = warehouse.select("SELECT * FROM {db:Identifier}.current_assessments ORDER BY log_id")
    near = [r for r in rows if r["review_reason"] == "uncertainty"]
    others = [r for r in rows if r["review_reason"] != "uncertainty"]
    assert near and any(r["review_reason"] == "random_sample" for r in others)
    bundles = load_bundles(cfg.policy_bundles)

    def snapshot() -> tuple[Any, ...]:
        rate = run_named(warehouse.client, warehouse.database, "verified_false_positive_rate")
        agreement = run_named(warehouse.client, warehouse.database, "review_agreement")
        sample = {s.key: s.verified_fp for s in stats_from_store(warehouse, bundles)}
        return rate.as_dicts(), agreement.as_dicts(), sample

    first, second = tmp_path / "others.csv", tmp_path / "near.csv"
    write_verdicts(first, others, flip=False)
    assert import_verdicts(warehouse, bundles, first, T_IMPORT).imported == len(others)
    rate_before, agreement_before, sample_before = snapshot()
    write_verdicts(second, near, flip=True)
    assert import_verdicts(warehouse, bundles, second, T_IMPORT).imported == len(near)
    rate_after, agreement_after, sample_after = snapshot()

    assert rate_after == rate_before  # every column: strata sizes, sample, estimate, note
    assert any(r["verified_fp_rate"] is not None for r in rate_after)
    assert sum(r["unflagged"] for r in rate_after) == sum(
        not r["requires_human_review"] for r in rows
    )  # the uncertainty items still weigh in the unflagged stratum's share
    assert sum(r["sample_reviewed"] for r in rate_after) == sum(
        r["review_reason"] == "random_sample" for r in rows
    )
    assert sample_after == sample_before
    compared = sum(r["compared"] for r in agreement_after)
    assert compared == sum(r["compared"] for r in agreement_before) + len(near) == len(rows)


def test_review_stats_and_the_report_group_by_event_week_with_one_wording(
    warehouse: Warehouse, reviewed: list[dict[str, Any]], tmp_path: Path
) -> None:
    """`review stats` and the report's review section (the ``review_agreement`` query) on the
    same verdicts: the same groups keyed by the event's week, the same counts and
    false-positive figures, and the same note for a group below the threshold; the rule is
    written on the report beside the figures (issue 23, item 16)."""
    from refusal_audit.report.html import collect, render_html
    from warehouse.report_queries import ReportFilter, event_day_range

    # a later week with a few reviewed events: a group below the threshold
    late = tmp_path / "late.jsonl"
    docs = [orjson.loads(line) for line in EXAMPLE_LOG.read_bytes().splitlines()[:5]]
    for doc in docs:
        doc.update(log_id="late-" + doc["log_id"], event_time="2025-06-18T23:30:00-02:00")
    late.write_bytes(b"".join(orjson.dumps(doc) + b"\n" for doc in docs))
    audit([late], warehouse)
    assessed = [a["log_id"] for a in warehouse.current_assessments()
                if a["log_id"].startswith("late-")]  # fmt: skip
    verdicts = tmp_path / "late.csv"
    verdicts.write_text("log_id,reviewer,verdict\n" + "".join(
        f"{log_id},ann,agree\n" for log_id in assessed))  # fmt: skip
    bundles = load_bundles(settings().policy_bundles)
    assert 0 < import_verdicts(warehouse, bundles, verdicts, T_IMPORT).imported < 30
    span = event_day_range(warehouse.client, warehouse.database)
    assert span is not None
    data = collect(warehouse.client, warehouse.database, ReportFilter(span[0], span[1]),
                   warehouse="chdb (test)", max_width=0.2)  # fmt: skip
    report = {(str(r["week"]), *(str(r[c]) for c in ("model", "policy_bundle", "engine",
              "prompt_version"))): r for r in data.agreement}  # fmt: skip
    stats = {(g.key[4], *g.key[:4]): g for g in stats_from_store(warehouse, bundles)
             if g.key[0] != "all"}  # fmt: skip
    # the audit ran today, the events are from 2025 (the late ones on Thursday 2025-06-19
    # UTC: Monday 2025-06-16): only the event week can match
    assert set(stats) == set(report)
    assert {key[0] for key in stats} == {monday(r["ev"]).isoformat() for r in reviewed} | {
        "2025-06-16"
    }
    thin = full = 0
    for key, group in stats.items():
        row, fp = report[key], group.false_positive
        assert fp.n == row["compared"]
        if fp.insufficient_data:
            thin += 1
            assert row["fp_agreement"] is None and fp.note == row["note"]
            assert fp.note == f"insufficient data: {fp.n} compared item(s), at least 30 needed"
        else:
            full += 1
            assert (fp.rate, fp.rate_low, fp.rate_high, fp.kappa) == pytest.approx(
                (row["fp_agreement"], row["fp_low"], row["fp_high"], row["fp_kappa"])
            )
    assert thin and full
    from processors.agreement import grouping_rule

    html = render_html(data, charts={})
    assert grouping_rule() in html and "ISO week of the event time" in grouping_rule()
