"""The refusal-audit CLI: exit codes, outputs and the read-only SQL guard."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typer.testing import CliRunner

from refusal_audit.cli import app

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.fixture
def env(cli_env: dict[str, str]) -> dict[str, str]:
    return cli_env


def test_audit_then_query(env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "out" / "result.json"  # its folder is made
    result = runner.invoke(app, ["audit", "examples/refusal_log.jsonl", "--out", str(out)], env=env)
    assert result.exit_code == 0, result.output
    assert "Audit summary" in result.output
    doc = json.loads(out.read_text())
    assert doc["counts"]["failed_batches"] == 0
    assert doc["audit_summary"]["total_refusals"] == len(doc["individual_assessments"])
    n = len(doc["individual_assessments"])
    trends = doc["audit_summary"]["trends_identified"]
    assert trends[0].startswith("over-refusal rate ") and f"(n={n})" in trends[0]
    q = runner.invoke(app, ["query", "false_positive_rate", "-o", "json"], env=env)
    assert q.exit_code == 0, q.output
    rows = [json.loads(line) for line in q.output.splitlines() if line.strip()]
    assert rows and sum(r["audited"] for r in rows) == len(doc["individual_assessments"])
    listing = runner.invoke(app, ["query"], env=env)
    assert "category_mix" in listing.output


def test_audit_exit_code_one_when_records_fail(env: dict[str, str]) -> None:
    result = runner.invoke(app, ["audit", "tests/fixtures/malformed.jsonl"], env=env)
    assert result.exit_code == 1
    assert "line 2" in result.output and "not_json" in result.output


def test_usage_errors_exit_two(env: dict[str, str], tmp_path: Path) -> None:
    assert runner.invoke(app, ["audit", "no/such/file.jsonl"], env=env).exit_code == 2
    assert (
        runner.invoke(
            app, ["audit", "examples/refusal_log.jsonl", "--format", "xml"], env=env
        ).exit_code
        == 2
    )
    assert runner.invoke(app, ["query", "no_such_query"], env=env).exit_code == 2
    bad_env = {**env, "REFUSAL_AUDIT_BATCH_MAX_EVENTS": "0"}
    assert runner.invoke(app, ["audit", "examples/refusal_log.jsonl"], env=bad_env).exit_code == 2
    assert (
        runner.invoke(
            app,
            ["--config", str(tmp_path / "nope.toml"), "audit", "examples/refusal_log.jsonl"],
            env=env,
        ).exit_code
        == 2
    )


@pytest.mark.parametrize(
    "statement",
    [
        "DROP TABLE assessments",
        "INSERT INTO assessments SELECT * FROM assessments",
        "SELECT 1; DROP TABLE assessments",
    ],
)
def test_sql_rejects_writes(env: dict[str, str], statement: str) -> None:
    result = runner.invoke(app, ["sql", statement], env=env)
    assert result.exit_code == 2


def test_sql_reads(env: dict[str, str]) -> None:
    result = runner.invoke(app, ["sql", "SELECT 1 + 1 AS two", "-o", "csv"], env=env)
    assert result.exit_code == 0, result.output
    assert result.output.split() == ["two", "2"]


def test_config_show_masks_secrets(env: dict[str, str]) -> None:
    result = runner.invoke(
        app, ["config", "show"], env={**env, "REFUSAL_AUDIT_WAREHOUSE_PASSWORD": "hunter2"}
    )
    assert result.exit_code == 0
    assert "hunter2" not in result.output
    shown = json.loads(result.output)
    assert shown["warehouse_dsn"] == env["REFUSAL_AUDIT_WAREHOUSE_DSN"]
    assert shown["engine"] is None and shown["resolved_engine"] == "local"
    keyed = runner.invoke(
        app, ["config", "show"], env={**env, "REFUSAL_AUDIT_OPENAI_API_KEY": "sk-secret-1"}
    )
    assert json.loads(keyed.output)["resolved_engine"] == "openai"
    assert "sk-secret-1" not in keyed.output


def test_sql_error_is_a_clean_usage_error(env: dict[str, str]) -> None:
    result = runner.invoke(app, ["sql", "SELECT no_such_column FROM assessments"], env=env)
    assert result.exit_code == 2
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_config_show_masks_a_password_inside_the_dsn(env: dict[str, str]) -> None:
    result = runner.invoke(
        app,
        ["config", "show"],
        env={**env, "REFUSAL_AUDIT_WAREHOUSE_DSN": "http://alice:s3cr3t@h:8123"},
    )
    assert result.exit_code == 0
    assert "s3cr3t" not in result.output and "alice:***@h:8123" in result.output


@pytest.mark.parametrize(
    ("variable", "value"),
    [("REFUSAL_AUDIT_REDACTION_KINDS", "email,ip"), ("REFUSAL_AUDIT_BATCH_MAX_EVENTS", "many")],
)
def test_bad_environment_values_exit_two(env: dict[str, str], variable: str, value: str) -> None:
    result = runner.invoke(app, ["config", "show"], env={**env, variable: value})
    assert result.exit_code == 2
    assert "configuration error" in result.output


def test_bad_toml_exits_two(env: dict[str, str], tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("batch_max_events = \n", encoding="utf-8")
    result = runner.invoke(app, ["--config", str(cfg), "config", "show"], env=env)
    assert result.exit_code == 2
    assert "not valid TOML" in result.output


def test_a_garbage_first_line_is_a_dead_letter_not_a_usage_error(
    env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    good = (REPO / "examples" / "refusal_log.jsonl").read_bytes().splitlines()[:5]
    log.write_bytes(b"\x00\xffgarbage\n" + b"\n".join(good) + b"\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    result = runner.invoke(app, ["audit", str(empty), str(log)], env=env)
    assert result.exit_code == 1, result.output
    assert "line 1" in result.output and "encoding" in result.output


def test_unusable_inputs_fail_before_anything_is_processed(
    env: dict[str, str], tmp_path: Path
) -> None:
    dup = tmp_path / "dup.csv"
    dup.write_text("id,prompt,completion,prompt\n1,hi,I cannot,x\n", encoding="utf-8")
    result = runner.invoke(app, ["audit", "--event-time", "2026-01-05", str(dup)], env=env)
    assert result.exit_code == 2 and "repeated column" in " ".join(result.output.split())
    unknown = tmp_path / "other.jsonl"
    unknown.write_text('{"prompt": "x", "reply": "y", "id": 1}\n', encoding="utf-8")
    assert runner.invoke(app, ["audit", str(unknown)], env=env).exit_code == 2
    blocker = tmp_path / "a-file"
    blocker.write_text("x", encoding="utf-8")
    bad_out = runner.invoke(
        app,
        ["audit", "examples/refusal_log.jsonl", "--out", str(blocker / "x.json")],
        env=env,
    )
    assert bad_out.exit_code == 2 and "cannot create its folder" in bad_out.output
    as_dir = runner.invoke(
        app, ["audit", "examples/refusal_log.jsonl", "--out", str(tmp_path)], env=env
    )
    assert as_dir.exit_code == 2 and "is a directory" in as_dir.output
    broken = runner.invoke(
        app, ["migrate"], env={**env, "REFUSAL_AUDIT_WAREHOUSE_DSN": "http://127.0.0.1:1"}
    )
    assert broken.exit_code == 2 and "cannot migrate" in broken.output


def test_eval_reports_agreement_with_xstest_labels(env: dict[str, str], shared_data: Path) -> None:
    path = shared_data / "xstest" / "xstest_v2_completions_gpt4.csv"
    result = runner.invoke(
        app, ["eval", str(path), "--event-time", "2026-01-05", "--json"], env=env
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    detection = figures["refusal_detection"]
    assert detection["n"] == 450
    assert detection["tp"] + detection["fn"] == 220  # GPT-4's human-labelled refusals
    fp = figures["false_positive_detection"]
    assert fp["n"] == detection["tp"] and 0.0 <= fp["roc_auc"] <= 1.0
    assert figures["engine"]["name"] == "local"


COCONOT_MAP = "request=prompt,response=response,log_id=id,classifier.is_refusal=is_refusal"


def test_eval_help_names_the_files_argument(env: dict[str, str]) -> None:
    result = runner.invoke(app, ["eval", "--help"], env=env)
    assert result.exit_code == 0
    usage = next(line for line in result.output.splitlines() if "Usage:" in line)
    assert "FILE" in usage and "{files}" not in usage


def test_eval_with_the_label_mapped_into_the_classifier(
    env: dict[str, str], shared_data: Path
) -> None:
    path = shared_data / "coconot" / "coconot_refusals.jsonl"
    result = runner.invoke(app, ["eval", str(path), "--map", COCONOT_MAP], env=env)
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    # the agreement section says why the pipeline's refusal decision is not measured
    assert "was mapped into the classifier" in out and "nothing to measure there" in out
    assert "refusal detection, text pre-filter alone" in out
    assert "800 records read, 799 events evaluated; 1 rejected record" in out
    # the rejected record is listed with its file, line, reason code and reason
    assert str(path) in out and "line 167" in out and "missing_field" in out
    assert "'response'" in out and "is null" in out
    as_json = runner.invoke(app, ["eval", str(path), "--map", COCONOT_MAP, "--json"], env=env)
    figures = json.loads(as_json.output)
    assert figures["refusal_label_in_classifier"] == 799
    text = figures["text_prefilter_detection"]
    assert text["n"] == 799 and text["tp"] + text["fn"] == 794  # CoCoNot's is_refusal
    assert "refusal_detection" not in figures
    assert figures["category_agreement"]["agreement"]["n"] == 794
    assert [f["reason_code"] for f in figures["failures"]] == ["missing_field"]


def test_eval_limit_reads_the_first_records_of_each_file(
    env: dict[str, str], shared_data: Path
) -> None:
    path = shared_data / "coconot" / "coconot_refusals.jsonl"
    result = runner.invoke(
        app, ["eval", str(path), "--map", COCONOT_MAP, "--limit", "25", "--json"], env=env
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["records"] == 25 and figures["refusal_label_in_classifier"] == 25
    bad = runner.invoke(app, ["eval", str(path), "--limit", "0"], env=env)
    assert bad.exit_code == 2


def _benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "local_engine_benchmark", REPO / "benchmarks" / "local_engine.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_table_has_the_figures_eval_prints(
    env: dict[str, str], shared_data: Path
) -> None:
    from refusal_audit.audit.run_report import fmt_interval
    from refusal_audit.config import load_settings

    bench = _benchmark()
    results = bench.run(shared_data, load_settings(None))
    xs_files = [str(shared_data / name) for name in bench.XSTEST_FILES]
    xs = json.loads(runner.invoke(app, ["eval", *xs_files, "--json"], env=env).output)
    co_path = str(shared_data / bench.COCONOT_FILE)
    co = json.loads(
        runner.invoke(app, ["eval", co_path, "--map", bench.COCONOT_MAP, "--json"], env=env).output
    )
    for key in ("refusal_detection", "false_positive_detection"):
        assert results["xstest"][key] == xs[key]
    for key in ("text_prefilter_detection", "category_agreement"):
        assert results["coconot"][key] == co[key]
    table = bench.markdown(results)
    fp = xs["false_positive_detection"]
    assert f"recall {fmt_interval(xs['refusal_detection']['recall'])}" in table
    assert f"ROC AUC {fp['roc_auc']:.3f}" in table
    assert f"recall {fmt_interval(fp['recall'])}" in table
    assert f"agreement {fmt_interval(co['category_agreement']['agreement'])}" in table
    assert f"{fp['n']} of the {fp['labelled_refusals']} human-labelled XSTest refusals" in table


def test_sql_prints_driver_types_as_json(env: dict[str, str]) -> None:
    statement = ("SELECT toIPv6('::1') AS ip, toUUID('61f0c404-5cb3-11e7-907b-a6006ad3dba0') AS u,"
                 " toDecimal64(1.25, 2) AS d")  # fmt: skip
    result = runner.invoke(app, ["sql", statement, "-o", "json"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "ip": "::1", "u": "61f0c404-5cb3-11e7-907b-a6006ad3dba0", "d": "1.25",
    }  # fmt: skip


def test_audit_rerun_lists_the_stored_assessments(env: dict[str, str], tmp_path: Path) -> None:
    """A second run of the same file audits nothing again (every event an identical copy of
    a stored, audited one) but its result lists the stored assessments, marked as already
    audited, with the first run's summary figures (issue 23, item 12)."""
    first_out, second_out = tmp_path / "first.json", tmp_path / "second.json"
    for out in (first_out, second_out):
        result = runner.invoke(
            app, ["audit", "examples/refusal_log.jsonl", "--out", str(out)], env=env
        )
        assert result.exit_code == 0, result.output
    first, second = json.loads(first_out.read_text()), json.loads(second_out.read_text())
    assert second["batches"] == [] and second["counts"]["identical_copies"] > 0
    audited = first["individual_assessments"]
    assert audited and first["already_audited"] == [] and first["counts"]["already_audited"] == 0

    def judged(items: list[dict[str, object]]) -> dict[object, tuple[object, ...]]:
        keys = ("category", "is_estimated_false_positive", "policy_clause_cited", "batch_id")
        return {a["log_id"]: tuple(a[k] for k in keys) for a in items}

    assert judged(second["individual_assessments"]) == judged(audited)
    assert sorted(second["already_audited"]) == sorted(a["log_id"] for a in audited)
    assert second["counts"]["already_audited"] == len(audited)
    figures = ("total_refusals", "categorization", "estimated_false_positives")
    for name in figures:
        assert second["audit_summary"][name] == first["audit_summary"][name], name

    def gaps(doc: dict[str, Any]) -> dict[str, list[str]]:
        return {
            f["description"]: sorted(f["example_log_ids"])
            for f in doc["audit_summary"]["policy_gap_flags"]
        }

    assert gaps(second) == gaps(first)
    assert "refusals already audited" in result.output
