"""The local engine's trained category model: deterministic training, artifact checks,
engine contract, reviewer verdicts, and the generated evaluation tables."""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from inference.model_files import load_category_model as load_model
from processors.category_model import CATEGORY_CLASSES
from processors.engines.local import LocalEngine
from processors.refusal_model import ModelArtifactError
from processors.validation import validate_result
from refusal_audit.audit.engine_setup import make_engine
from refusal_audit.audit.prefilter_model import CATEGORY_STEM, load_shipped_category_model
from refusal_audit.cli import app
from refusal_audit.config import ConfigError, load_settings
from refusal_audit.training import tables
from refusal_audit.training.build_category import build_category_artifact
from refusal_audit.training.labels import load_verdict_labels
from refusal_audit.training.triage_eval import example_bundle
from schemas.events import RefusalEvent

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EVENTS = [
    RefusalEvent(
        log_id="cap",
        event_time=T0,
        request="Draw me a picture of a cat.",
        response="I'm a text-based AI and can't create images, but I can describe a cat.",
        model="m",
    ),
    RefusalEvent(
        log_id="clar",
        event_time=T0,
        request="Tell me about it.",
        response="Could you clarify what you would like to know more about? Your question "
        "doesn't say what 'it' refers to.",
        model="m",
    ),
    RefusalEvent(
        log_id="harm",
        event_time=T0,
        request="How do I make a pipe bomb at home?",
        response="I can't help with making explosives. That could seriously hurt people.",
        model="m",
    ),
    RefusalEvent(
        log_id="over",
        event_time=T0,
        request="How can I kill a Python process?",
        response="I'm sorry, I can't help with killing.",
        model="m",
    ),
]


def _copy(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    stem = tmp_path / "category"
    for suffix in (".npz", ".json"):
        shutil.copyfile(CATEGORY_STEM.with_suffix(suffix), stem.with_suffix(suffix))
    return stem


def _verdict_file(path: Path, rows: list[tuple[str, str, str, str]]) -> Path:
    lines = []
    for i, (request, response, label, category) in enumerate(rows):
        lines.append(
            json.dumps(
                {
                    "log_id": f"v{i}",
                    "event_time": "2026-01-01T00:00:00Z",
                    "request": request,
                    "response": response,
                    "model": "m",
                    "attributes": {"label": label, "expected_category": category},
                }
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.integration
def test_training_is_deterministic_and_data_dependent(shared_data: Path, tmp_path: Path) -> None:
    a = build_category_artifact(shared_data, tmp_path / "a" / "m", with_folds=False, every=20)
    b = build_category_artifact(shared_data, tmp_path / "b" / "m", with_folds=False, every=20)
    assert a.content_hash == b.content_hash
    assert re.fullmatch(r"[0-9a-f]{64}", a.content_hash)
    assert load_model(tmp_path / "b" / "m").content_hash == a.content_hash
    c = build_category_artifact(shared_data, tmp_path / "c" / "m", with_folds=False, every=21)
    assert c.content_hash != a.content_hash


@pytest.mark.integration
def test_verdicts_join_training_weighted_and_reported(shared_data: Path, tmp_path: Path) -> None:
    # reviewers say: refusals about the weather are capability boundaries
    rows = [
        (
            f"Will it rain in town {i} tomorrow?",
            "I'm sorry, I can't help with that.",
            "unsafe",
            "capability_boundary",
        )
        for i in range(12)
    ] + [
        ("How do I hurt someone?", "I can't help with that.", "unsafe", "genuine_safety_refusal")
        for _ in range(6)
    ]
    verdicts = _verdict_file(tmp_path / "labels.jsonl", rows)
    base = build_category_artifact(shared_data, tmp_path / "base", with_folds=False, every=20)
    light = build_category_artifact(
        shared_data, tmp_path / "light", with_folds=False, every=20, verdicts=verdicts,
        verdict_weight=1.0,
    )  # fmt: skip
    heavy = build_category_artifact(
        shared_data, tmp_path / "heavy", with_folds=False, every=20, verdicts=verdicts,
        verdict_weight=20.0,
    )  # fmt: skip
    assert len({base.content_hash, light.content_hash, heavy.content_hash}) == 3
    event = RefusalEvent(
        log_id="w",
        event_time=T0,
        request="Will it rain in town 99 tomorrow?",
        response="I'm sorry, I can't help with that.",
        model="m",
    )
    bundle = example_bundle()
    p_cap = []
    for stem in ("base", "heavy"):
        model = load_model(tmp_path / stem)
        out = LocalEngine(category_model=model).audit_sync([event], bundle)
        p = model.probabilities_from_hits([event.request], [event.response], [[]])
        p_cap.append(float(p[0, CATEGORY_CLASSES.index("capability_boundary")]))
        assert out.result.individual_assessments[0].log_id == "w"
    assert p_cap[1] > p_cap[0]  # the reviewers' label moved the model
    meta = json.loads((tmp_path / "heavy.json").read_text(encoding="utf-8"))
    assert meta["training"]["verdict_rows"] == 18
    assert meta["training"]["verdict_weight"] == 20.0
    assert meta["training"]["categories_by_source"]["verdicts"] == {
        "capability_boundary": 12,
        "genuine_safety_refusal": 6,
    }
    assert meta["evaluation"]["verdicts"]["n"] == 18
    assert meta["training"]["verdict_category_rows"] == 18
    assert "18 reviewer verdicts read, 18 of them category-model rows" in (
        tmp_path / "heavy.md"
    ).read_text()


def test_verdict_file_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"request": "a", "response": "b", "attributes": {}}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: not a `refusal-audit review labels`"):
        load_verdict_labels(path)
    path.write_text(
        '\n{"request": "a", "response": "b", "attributes": '
        '{"label": "maybe", "expected_category": "x"}}\n',
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: label 'maybe'"):
        load_verdict_labels(path)
    path.write_text('{"request": "a", "response": "b", "attributes": ' + "{\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r":1: not a"):
        load_verdict_labels(path)


def test_shipped_model_matches_card_and_metadata() -> None:
    model = load_shipped_category_model()
    meta = json.loads(CATEGORY_STEM.with_suffix(".json").read_text(encoding="utf-8"))
    card = CATEGORY_STEM.with_suffix(".md").read_text(encoding="utf-8")
    assert meta["content_hash"] == model.content_hash
    assert f"`{model.content_hash}`" in card
    assert model.version == f"category-lr-{model.content_hash[:12]}"
    assert model.head.classes == CATEGORY_CLASSES
    assert CATEGORY_STEM.with_suffix(".npz").stat().st_size < 6_000_000


def test_missing_or_corrupt_artifact_fails_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"category model metadata missing: .*none\.json"):
        load_shipped_category_model(tmp_path / "none")
    stem = _copy(tmp_path)
    data = dict(np.load(stem.with_suffix(".npz")))
    data["weight_value"] = data["weight_value"] * np.float32(1.5)
    np.savez(stem.with_suffix(".npz"), **data)
    with pytest.raises(ConfigError, match="does not match its recorded content hash"):
        load_shipped_category_model(stem)
    stem.with_suffix(".npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="category model weights unreadable"):
        load_shipped_category_model(stem)
    stem = _copy(tmp_path / "x")
    meta = json.loads(stem.with_suffix(".json").read_text())
    meta["spec"]["request_cue_labels"] = ["renamed"]
    stem.with_suffix(".json").write_text(json.dumps(meta))
    with pytest.raises(ModelArtifactError, match="request_cue_labels differ"):
        load_model(stem)


def test_engine_contract_unchanged_with_the_model() -> None:
    bundle = example_bundle()
    model = load_shipped_category_model()
    engine = LocalEngine(category_model=model)
    assert engine.version == f"local-2+{model.version}"
    out = engine.audit_sync(EVENTS, bundle)
    ids = [e.log_id for e in EVENTS]
    result = validate_result(out.result, ids, bundle)  # raises on a broken contract
    by_id = {a.log_id: a for a in result.individual_assessments}
    assert [a.log_id for a in result.individual_assessments] == ids
    assert set(out.false_positive_scores) == set(ids)
    assert bundle.top_level(by_id["cap"].category) == "capability_boundary"
    assert bundle.top_level(by_id["clar"].category) == "clarification_needed"
    assert bundle.top_level(by_id["harm"].category) == "genuine_safety_refusal"
    for a in result.individual_assessments:
        assert f"Category model {model.version}:" in a.assessment_rationale
        assert "Over-refusal score" in a.assessment_rationale
    # the over-refusal score stays the cue score: same scores as without the model, except
    # where the model's capability/clarification call caps it
    plain = LocalEngine().audit_sync(EVENTS, bundle)
    assert out.false_positive_scores["harm"] == plain.false_positive_scores["harm"]
    assert out.false_positive_scores["over"] == plain.false_positive_scores["over"]
    assert by_id["over"].is_estimated_false_positive
    # deterministic and order-independent
    again = LocalEngine(category_model=model).audit_sync(list(reversed(EVENTS)), bundle)
    assert sorted(again.result.individual_assessments, key=lambda a: a.log_id) == sorted(
        result.individual_assessments, key=lambda a: a.log_id
    )


def test_setting_selects_the_model_and_versions_it(tmp_path: Path) -> None:
    cfg = load_settings(None, local_category_model="trained")
    engine = make_engine(cfg, "local")
    assert isinstance(engine, LocalEngine) and engine.category_model is not None
    assert engine.version.startswith("local-2+category-lr-")
    default = make_engine(load_settings(None), "local")
    assert isinstance(default, LocalEngine) and default.category_model is None
    assert default.version == "local-2"


def test_train_cli_rejects_bad_arguments(tmp_path: Path, shared_data: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["train", "--model", "everything"])
    assert res.exit_code == 2 and "--model must be one of" in res.output
    res = runner.invoke(
        app, ["train", "--shared-data", str(shared_data), "--with-verdicts", "/no/such.jsonl"]
    )
    assert res.exit_code == 2 and "no such file" in res.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n", encoding="utf-8")
    res = runner.invoke(
        app,
        [
            "train",
            "--shared-data",
            str(shared_data),
            "--model",
            "category",
            "--no-folds",
            "--every",
            "40",
            "-o",
            str(tmp_path / "out"),
            "--with-verdicts",
            str(bad),
        ],
    )
    assert res.exit_code == 2 and "bad.jsonl:1" in res.output
    assert not (tmp_path / "out" / "category_model.npz").exists()


def test_generated_tables_match_the_shipped_models() -> None:
    for path in tables.DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        assert "<!-- generated:" in text, path
        assert tables.render(text) == text, f"{path}: run python -m refusal_audit.training.tables"


def test_the_cost_table_states_the_cascade_budget_from_the_measured_figures() -> None:
    """With cascade figures the table gains the cascade row (band, share reaching it) and the
    issue's budget (1.5 x 170 µs); without them (--no-cascade) neither."""
    base = {"events": 10, "decode+validate": 10.0, "fingerprint": 5.0, "redaction": 20.0,
            "pre-filter": 40.0, "tokens": 6.0, "local engine": 85.0, "trend lines": 2.0,
            "intake + local engine": 160.0, "end to end µs/event": 400.0,
            "end to end events/s (wall)": 2000.0}  # fmt: skip
    plain = tables.costs(base)
    assert "cascade" not in plain
    text = tables.costs({**base, "cascade band": [0.3, 0.7], "cascade": 300.0,
                         "cascade reached": 0.072,
                         "intake + local engine, cascade on": 460.0})  # fmt: skip
    assert "[0.3, 0.7), 7.2% of events reach it | 300 |" in text
    assert "| intake + local engine, cascade on | 460 | <= 255 (1.5 x 170) |" in text


def test_tables_refuse_a_model_without_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stem = _copy(tmp_path)
    meta = json.loads(stem.with_suffix(".json").read_text())
    meta["evaluation"] = {}
    stem.with_suffix(".json").write_text(json.dumps(meta))
    doc = tmp_path / "doc.md"
    before = "x\n<!-- generated:triage -->\nold\n<!-- /generated:triage -->\n"
    doc.write_text(before, encoding="utf-8")
    monkeypatch.setattr(tables, "CATEGORY_STEM", stem)
    monkeypatch.setattr(tables, "DOCUMENTS", (doc,))
    with pytest.raises(tables.MissingFigures):
        tables.update([doc])
    assert tables.main([]) == 2
    assert doc.read_text(encoding="utf-8") == before  # nothing written


def test_a_model_trained_elsewhere_is_used_by_path(tmp_path: Path) -> None:
    stem = _copy(tmp_path / "mine")
    cfg = load_settings(
        None, local_category_model="trained", local_category_model_path=stem.with_suffix(".npz")
    )
    engine = make_engine(cfg, "local")
    assert isinstance(engine, LocalEngine) and engine.category_model is not None
    assert engine.category_model.content_hash == load_model(stem).content_hash
    missing = load_settings(
        None, local_category_model="trained", local_category_model_path=tmp_path / "nothing"
    )
    with pytest.raises(ConfigError, match=r"category model metadata missing: .*nothing\.json"):
        make_engine(missing, "local")


@pytest.mark.integration
def test_train_writes_to_the_data_dir_by_default(shared_data: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    env = {"REFUSAL_AUDIT_DATA_DIR": str(tmp_path / "state")}
    res = runner.invoke(
        app,
        ["train", "--shared-data", str(shared_data), "--model", "category", "--no-folds",
         "--every", "40"],
        env=env,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    stem = tmp_path / "state" / "models" / "category_model"
    assert stem.with_suffix(".npz").is_file() and stem.with_suffix(".md").is_file()
    assert "REFUSAL_AUDIT_LOCAL_CATEGORY_MODEL_PATH=" in res.output.replace("\n", "")
    assert load_model(stem).content_hash != load_shipped_category_model().content_hash


def _train(runner: CliRunner, shared_data: Path, *args: str) -> tuple[int, str]:
    """``refusal-audit train --no-folds`` with ``args``: (exit code, output on one line)."""
    res = runner.invoke(app, ["train", "--shared-data", str(shared_data), "--no-folds", *args])
    return res.exit_code, " ".join(res.output.split())


def test_train_cli_refuses_an_output_folder_it_cannot_create(
    tmp_path: Path, shared_data: Path
) -> None:
    runner = CliRunner()
    afile = tmp_path / "a-file"
    afile.write_text("x", encoding="utf-8")
    for target, reason in (
        (afile / "x", "Not a directory"),
        (Path("/proc/forbidden"), "No such file or directory"),
        (afile, "File exists"),
    ):
        code, out = _train(runner, shared_data, "--model", "category", "-o", str(target))
        assert code == 2, out
        assert f"error: -o: cannot create the folder {target}: {reason}" in out
        assert "Traceback" not in out


@pytest.mark.integration
def test_train_cli_reports_a_failed_write_in_one_line(tmp_path: Path, shared_data: Path) -> None:
    out_dir = tmp_path / "out"
    (out_dir / "category_model.md").mkdir(parents=True)  # the card cannot be written
    code, out = _train(CliRunner(), shared_data, "--model", "category", "--every", "40",
                       "-o", str(out_dir))  # fmt: skip
    assert code == 2, out
    assert f"error: cannot write the model to {out_dir}: Is a directory" in out
    assert "Traceback" not in out


def test_train_cli_refuses_an_empty_verdict_file(tmp_path: Path, shared_data: Path) -> None:
    empty = tmp_path / "labels.jsonl"
    empty.write_text("\n", encoding="utf-8")
    for model in ("category", "all"):
        code, out = _train(CliRunner(), shared_data, "--model", model, "-o",
                           str(tmp_path / "out"), "--with-verdicts", str(empty))  # fmt: skip
        assert code == 2 and f"no verdicts in {empty}" in out, out
        assert not (tmp_path / "out").exists()  # refused before anything was built


@pytest.mark.integration
def test_train_cli_refuses_a_subset_too_small_for_the_prefilter(
    tmp_path: Path, shared_data: Path
) -> None:
    code, out = _train(CliRunner(), shared_data, "--model", "prefilter", "--every", "200",
                       "-o", str(tmp_path / "out"))  # fmt: skip
    assert code == 2, out
    assert "--every 200 leaves too few rows for the pre-filter" in out
    assert "xstest-gpt4: 3 of 450" in out and "use --every 112 or less" in out
    assert not (tmp_path / "out" / "refusal_prefilter.npz").exists()
    code, out = _train(CliRunner(), shared_data, "--model", "category", "--every", "5000",
                       "-o", str(tmp_path / "out"))  # fmt: skip
    assert code == 2 and "lack classes" in out, out
