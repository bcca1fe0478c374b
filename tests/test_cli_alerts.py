"""`alerts evaluate`, `alerts list` and trend lines in batch mode (no broker): the XSTest
shift audited by the local engine, one hourly window per model."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from refusal_audit.cli import app

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()
pytestmark = pytest.mark.integration


@pytest.fixture
def env(cli_env: dict[str, str]) -> dict[str, str]:
    return {
        **cli_env,
        "REFUSAL_AUDIT_ALERTS_GRACE_SECONDS": str(7 * 24 * 3600),  # a replay arrives late
        "REFUSAL_AUDIT_ALERTS_BASELINE_WINDOWS": "1",
        "REFUSAL_AUDIT_ALERTS_MIN_EVENTS": "150",
    }


def lines(output: str) -> list[dict[str, object]]:
    return [json.loads(x) for x in output.splitlines() if x.startswith("{")]


def test_evaluate_store_and_list_the_xstest_shift(env: dict[str, str], shared_data: Path) -> None:
    t0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    for hour, model in enumerate(("llama2orig", "gpt4")):
        path = shared_data / "xstest" / f"xstest_v2_completions_{model}.csv"
        at = (t0 + timedelta(hours=hour, minutes=10)).isoformat()
        args = ["audit", str(path), "--event-time", at, "--model", "chat"]
        result = runner.invoke(app, args, env=env)
        assert result.exit_code in (0, 1), result.output
    window = (t0 + timedelta(hours=1, minutes=30)).isoformat()
    dry = runner.invoke(app, ["alerts", "evaluate", "--window", window, "--json"], env=env)
    assert dry.exit_code == 0, dry.output
    findings = lines(dry.stdout)
    fp = [f for f in findings if f["kind"] == "false_positive_rate_shift"]
    assert fp and all(f["status"] == "alert" and float(f["effect"]) < -10 for f in fp)  # type: ignore[arg-type]
    assert runner.invoke(app, ["alerts", "list", "--json"], env=env).stdout.strip() == ""
    stored = runner.invoke(app, ["alerts", "evaluate", "--window", window, "--store"], env=env)
    assert stored.exit_code == 0, stored.output
    listed = lines(runner.invoke(app, ["alerts", "list", "--json"], env=env).stdout)
    alerting = {(f["kind"], f["scope"]) for f in findings if f["status"] == "alert"}
    drift = {
        (a["kind"], "/".join(a["scope"].values())) for a in listed if a["kind"] != "policy_gap"
    }  # type: ignore[union-attr]
    assert drift == alerting
    assert any(a["kind"] == "policy_gap" for a in listed)  # --store also tracks the gaps
    again = runner.invoke(app, ["alerts", "evaluate", "--window", window, "--store"], env=env)
    assert "0 new alert(s) stored" in again.output
    only = lines(
        runner.invoke(
            app, ["alerts", "list", "--json", "--kind", "false_positive_rate_shift"], env=env
        ).stdout
    )
    assert only and {a["kind"] for a in only} == {"false_positive_rate_shift"}
    bad = runner.invoke(app, ["alerts", "list", "--kind", "nonsense"], env=env)
    assert bad.exit_code == 2


def test_batch_summaries_compare_with_the_baseline(env: dict[str, str], shared_data: Path) -> None:
    env = {**env, "REFUSAL_AUDIT_ALERTS_BASELINE_WINDOWS": "24"}  # the last day is the baseline
    t0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    first = shared_data / "xstest" / "xstest_v2_completions_llama2orig.csv"
    second = shared_data / "xstest" / "xstest_v2_completions_gpt4.csv"
    r1 = runner.invoke(app, ["audit", str(first), "--event-time", t0.isoformat()], env=env)
    assert r1.exit_code in (0, 1), r1.output
    r2 = runner.invoke(app, ["audit", str(second), "--event-time", t0.isoformat()], env=env)
    q = runner.invoke(app, ["sql", "SELECT trends FROM audit_batches FINAL", "-o", "json"], env=env)
    trends = [t for row in lines(q.stdout) for t in row["trends"]]  # type: ignore[attr-defined]
    assert any(t.startswith("over-refusal rate") and "no baseline yet" in t for t in trends)
    assert any(t.startswith("over-refusal rate") and " vs baseline " in t for t in trends)
    del r2
