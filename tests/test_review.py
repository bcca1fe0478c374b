"""Reviewer verdicts imported from files, stored in ClickHouse, and agreement statistics
(issue 10, the part without the web app)."""

from __future__ import annotations

import csv
import io
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_pipeline import audit, settings

from processors.agreement import agreement
from refusal_audit.bundles import load_bundles
from refusal_audit.review.verdict_files import import_verdicts, stats_from_store
from schemas.policy import PolicyBundle
from warehouse import Warehouse
from warehouse.review import current_verdicts

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"
NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
COLUMNS = ["log_id", "reviewer", "verdict", "corrected_category", "corrected_false_positive",
           "corrected_clause", "note"]  # fmt: skip


def bundles() -> dict[str, PolicyBundle]:
    return load_bundles(settings().policy_bundles)


def write_csv(path: Path, rows: list[list[Any]]) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    writer.writerows(rows)
    path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


@pytest.fixture
def audited(warehouse: Warehouse) -> list[dict[str, Any]]:
    audit([EXAMPLE_LOG], warehouse)
    return warehouse.current_assessments()


def test_bad_rows_are_reported_and_the_good_ones_kept(
    warehouse: Warehouse, audited: list[dict[str, Any]], tmp_path: Path
) -> None:
    a, b, c = audited[0], audited[1], audited[2]
    path = write_csv(tmp_path / "v.csv", [
        [a["log_id"], "ann", "agree", "", "", "", ""],                                # 2 good
        [b["log_id"], "ann", "disagree", "over_refusal", "true", "", "too cautious"],  # 3 good
        ["no-such-id", "ann", "agree", "", "", "", ""],                             # 4 unknown
        [c["log_id"], "ann", "disagree", "made_up", "false", "", ""],               # 5 category
        [c["log_id"], "ann", "maybe", "", "", "", ""],                              # 6 verdict
        [a["log_id"], "ann", "agree", "", "", "", ""],                              # 7 duplicate
        [c["log_id"], "bob", "agree", "over_refusal", "", "", ""],                  # 8 agree+fix
        [c["log_id"], "bob", "disagree", "over_refusal", "true", "XYZ-9", ""],      # 9 clause
    ])  # fmt: skip
    with path.open("ab") as f:
        f.write(a["log_id"].encode() + b",\xff\xfe-bad,agree,,,,\n")  # 10: not UTF-8
    report = import_verdicts(warehouse, bundles(), path, NOW)
    assert (report.rows, report.imported) == (9, 2)
    reasons = dict(report.errors)
    assert sorted(reasons) == [4, 5, 6, 7, 8, 9, 10]
    assert "no current assessment" in reasons[4]
    assert "not in the taxonomy" in reasons[5]
    assert "not agree or disagree" in reasons[6]
    assert "a second row" in reasons[7]
    assert "takes no corrections" in reasons[8]
    assert "not a clause" in reasons[9]
    assert "UTF-8" in reasons[10]
    stored = {(v.log_id, v.reviewer): v for v in current_verdicts(warehouse)}
    assert set(stored) == {(a["log_id"], "ann"), (b["log_id"], "ann")}
    fixed = stored[(b["log_id"], "ann")]
    assert fixed.human_category == "over_refusal" and fixed.human_false_positive is True
    assert fixed.model_category == b["category"] and fixed.source == "import:v.csv"
    assert fixed.assessment_audited_at == b["audited_at"]
    # importing the same file again changes nothing
    again = import_verdicts(warehouse, bundles(), path, datetime(2026, 12, 2, tzinfo=UTC))
    assert again.imported == 2
    after = {(v.log_id, v.reviewer): v.verdict_id for v in current_verdicts(warehouse)}
    assert after == {k: v.verdict_id for k, v in stored.items()}


def test_a_revision_counts_and_history_is_kept(
    warehouse: Warehouse, audited: list[dict[str, Any]], tmp_path: Path
) -> None:
    log_id = audited[0]["log_id"]
    first = tmp_path / "first.jsonl"
    first.write_bytes(orjson.dumps({"log_id": log_id, "reviewer": "ann", "verdict": "agree"}))
    import_verdicts(warehouse, bundles(), first, NOW)
    second = tmp_path / "second.jsonl"
    second.write_bytes(orjson.dumps({
        "log_id": log_id, "reviewer": "ann", "verdict": "disagree",
        "corrected_category": "genuine_safety_refusal", "corrected_false_positive": False,
    }))  # fmt: skip
    import_verdicts(warehouse, bundles(), second, datetime(2026, 12, 2, tzinfo=UTC))
    (current,) = current_verdicts(warehouse)
    assert current.verdict == "disagree"
    history = warehouse.select("SELECT count() AS n FROM {db:Identifier}.review_verdicts FINAL")
    assert history == [{"n": 2}]


def test_stats_match_an_independent_count(
    warehouse: Warehouse, audited: list[dict[str, Any]], tmp_path: Path
) -> None:
    """Every third item the reviewer holds the opposite false-positive verdict."""
    rows, pairs = [], []
    for i, a in enumerate(audited):
        fp = bool(a["is_estimated_false_positive"])
        if i % 3 == 0:
            rows.append([a["log_id"], "ann", "disagree", a["category"], str(not fp), "", ""])
            pairs.append((str(fp), str(not fp)))
        else:
            rows.append([a["log_id"], "ann", "agree", "", "", "", ""])
            pairs.append((str(fp), str(fp)))
    import_verdicts(warehouse, bundles(), write_csv(tmp_path / "v.csv", rows), NOW)
    groups = {g.key: g for g in stats_from_store(warehouse, bundles())}
    (overall,) = [g for k, g in groups.items() if k[0] == "all"]
    expected = agreement(pairs)
    assert overall.false_positive == expected
    assert overall.false_positive.agreed == len(audited) - len(range(0, len(audited), 3))
    assert overall.category.rate == 1.0  # categories were never corrected
    sample = [a for a in audited if a["review_reason"] == "random_sample"]
    human_fp = sum(
        (not a["is_estimated_false_positive"]) if audited.index(a) % 3 == 0
        else a["is_estimated_false_positive"]
        for a in sample
    )  # fmt: skip
    assert overall.verified_fp[:2] == (human_fp, len(sample))
    per_model = [g for k, g in groups.items() if k[0] != "all"]
    assert sum(g.false_positive.n for g in per_model) == len(audited)


def test_the_cli_imports_and_reports_agreement(cli_env: dict[str, str], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from refusal_audit.cli import app

    runner = CliRunner()
    assert runner.invoke(app, ["audit", "examples/refusal_log.jsonl"], env=cli_env).exit_code == 0
    rows = runner.invoke(app, ["sql", "SELECT log_id FROM current_assessments", "-o", "json"],
                         env=cli_env).output  # fmt: skip
    ids = [orjson.loads(line)["log_id"] for line in rows.splitlines() if line.startswith("{")]
    path = write_csv(tmp_path / "v.csv", [[i, "ann", "agree", "", "", "", ""] for i in ids])
    with path.open("a", encoding="utf-8") as f:
        f.write("missing,ann,agree,,,,\n")
    imported = runner.invoke(app, ["review", "import", str(path)], env=cli_env)
    assert imported.exit_code == 1, imported.output
    assert f"{len(ids)} new verdict(s) stored, 0 already stored (unchanged), 1 refused" in (
        " ".join(imported.output.split())
    )
    again = runner.invoke(app, ["review", "import", str(path)], env=cli_env)
    assert f"0 new verdict(s) stored, {len(ids)} already stored (unchanged)" in (
        " ".join(again.output.split())
    )
    stats = runner.invoke(app, ["review", "stats", "--json"], env=cli_env)
    assert stats.exit_code == 0, stats.output
    groups = [orjson.loads(line)["group"] for line in stats.output.splitlines()]
    overall = next(g for g in groups if g["key"][0] == "all")
    assert overall["false_positive"]["n"] == len(ids) and overall["false_positive"]["rate"] == 1.0


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_exported_items_filled_in_import_as_they_are(
    warehouse: Warehouse, audited: list[dict[str, Any]], tmp_path: Path, suffix: str
) -> None:
    from refusal_audit.review.verdict_files import ItemFilter, open_items, write_items

    items = open_items(warehouse, ItemFilter(), reviews_per_item=1, bundles=bundles())
    expected = {
        a["log_id"] for a in audited if a["requires_human_review"] or a["sampled_for_review"]
    }
    assert {r["log_id"] for r in items} == expected and items
    assert all(r["request"] and r["model_category"] for r in items)
    sampled = {a["log_id"] for a in audited if a["review_reason"] == "random_sample"}
    for r in items:  # the refined reasons the review app's queues filter on
        assert r["review_reasons"]
        assert ("random_sample" in r["review_reasons"].split()) == (r["log_id"] in sampled)
    path = tmp_path / f"items{suffix}"
    write_items(items, path)
    if suffix == ".csv":
        filled = list(csv.DictReader(path.open(encoding="utf-8")))
    else:
        filled = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    for row in filled:
        row.update(reviewer="ann", verdict="agree")
    out = tmp_path / f"filled{suffix}"
    if suffix == ".csv":
        with out.open("w", encoding="utf-8", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(filled[0]))
            writer.writeheader()
            writer.writerows(filled)
    else:
        out.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in filled))
    report = import_verdicts(warehouse, bundles(), out, NOW)
    assert report.errors == [] and report.imported == len(items)
    assert open_items(warehouse, ItemFilter(), reviews_per_item=1) == []
    assert len(open_items(warehouse, ItemFilter(), reviews_per_item=2)) == len(items)
    one_model = open_items(warehouse, ItemFilter(model=items[0]["model"]), reviews_per_item=2)
    assert {r["model"] for r in one_model} == {items[0]["model"]}


def test_reviewed_events_export_as_labels_eval_reads(
    warehouse: Warehouse, audited: list[dict[str, Any]], tmp_path: Path
) -> None:
    from refusal_audit.audit.batch import BatchOptions
    from refusal_audit.audit.evaluation import run_eval
    from refusal_audit.review.verdict_files import labelled_events

    rows = []
    human: dict[str, bool] = {}
    for i, a in enumerate(audited[:60]):
        fp = bool(a["is_estimated_false_positive"])
        if i % 4 == 0:
            rows.append([a["log_id"], "ann", "disagree", a["category"], str(not fp), "", ""])
            human[a["log_id"]] = not fp
        else:
            rows.append([a["log_id"], "ann", "agree", "", "", "", ""])
            human[a["log_id"]] = fp
    import_verdicts(warehouse, bundles(), write_csv(tmp_path / "v.csv", rows), NOW)
    lines = labelled_events(warehouse, bundles())
    docs = {d["log_id"]: d for d in map(orjson.loads, lines)}
    assert set(docs) == set(human)
    assert all((d["attributes"]["label"] == "safe") == human[k] for k, d in docs.items())
    path = tmp_path / "labels.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    options = BatchOptions.build(None, None, None, None, None)
    figures = run_eval(settings(), [path], options, "local")
    fp = figures["false_positive_detection"]
    disagreements = sum(1 for i in range(60) if i % 4 == 0)
    assert fp["n"] == 60
    assert fp["tp"] + fp["tn"] == 60 - disagreements
    # the same file trains the category model (refusal-audit train --with-verdicts)
    from refusal_audit.training.labels import load_verdict_labels

    labelled = {r.id: r for r in load_verdict_labels(path)}
    assert set(labelled) == set(human)
    assert all(r.over_refusal == human[k] for k, r in labelled.items())
    assert all(r.source == "verdicts" and r.request and r.response for r in labelled.values())
    assert all(
        r.category == ("over_refusal" if human[k] else docs[k]["attributes"]["expected_category"])
        for k, r in labelled.items()
    )


FORMULAS = ["=HYPERLINK(\"http://evil.example/\",\"open\")", "=cmd|' /C calc'!A0", "@SUM(1+1)",
            "+1+2", "-3+4", "\t=1", "\r=2", "'=already quoted", "'plain quote"]  # fmt: skip


def test_csv_export_neutralises_formulas_and_the_import_restores_them(
    warehouse: Warehouse, tmp_path: Path
) -> None:
    """Logged texts and log ids that start like spreadsheet formulas are quoted in the CSV
    export (never in JSON Lines), and the filled-in file imports them back exactly."""
    from processors.csv_cells import FORMULA_TRIGGERS
    from refusal_audit.review.verdict_files import ItemFilter, open_items, write_items

    lines = EXAMPLE_LOG.read_bytes().splitlines()
    events = []
    for i, line in enumerate(lines):
        doc = orjson.loads(line)
        formula = FORMULAS[i % len(FORMULAS)]
        doc["log_id"] = f"{formula}{i}"
        doc["request"] = f"{formula} {doc['request']}"
        events.append(orjson.dumps(doc))
    source = tmp_path / "formulas.jsonl"
    source.write_bytes(b"\n".join(events) + b"\n")
    audit([source], warehouse)
    items = open_items(warehouse, ItemFilter(), reviews_per_item=1, bundles=bundles())
    assert {r["log_id"][0] for r in items} >= {"=", "@", "+", "-", "'"}  # ids are stripped
    assert {r["request"][0] for r in items} >= {"\t", "\r"}

    path = tmp_path / "items.csv"
    write_items(items, path)
    with path.open(encoding="utf-8", newline="") as f:
        cells = list(csv.reader(f))
    assert len(cells) == len(items) + 1
    assert all(cell[:1] not in FORMULA_TRIGGERS for row in cells for cell in row)
    exported = {row[0] for row in cells[1:]}
    assert any(cell.startswith("'=cmd|' /C calc'!A0") for cell in exported)
    assert any(cell.startswith("''=already quoted") for cell in exported)
    assert any(cell.startswith("'plain quote") for cell in exported)  # no trigger: as it is

    jsonl = tmp_path / "items.jsonl"
    previous = os.umask(0o022)  # an ordinary shell's: the exports stay private all the same
    try:
        write_items(items, jsonl)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(jsonl.stat().st_mode) == 0o600
    assert [orjson.loads(x)["request"] for x in jsonl.read_bytes().splitlines()] == [
        r["request"] for r in items
    ]

    with path.open(encoding="utf-8", newline="") as f:
        filled = list(csv.DictReader(f))
    for row in filled:
        row.update(reviewer="ann", verdict="agree", note="'-- reads fine")
    out = tmp_path / "filled.csv"
    with out.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(filled[0]))
        writer.writeheader()
        writer.writerows(filled)
    report = import_verdicts(warehouse, bundles(), out, NOW)
    assert report.errors == [] and report.imported == len(items)
    stored = {v.log_id: v for v in current_verdicts(warehouse)}
    assert set(stored) == {r["log_id"] for r in items}
    assert {v.note for v in stored.values()} == {"-- reads fine"}
