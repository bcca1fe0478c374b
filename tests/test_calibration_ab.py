"""The A/B report on simulated event streams with known effects (fixed seeds): it finds what
was simulated and nothing else; a sample-ratio mismatch and the safety guardrail block a
winner; the CLI works end to end on JSONL files."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import pytest
from calibration_starter import verified
from typer.testing import CliRunner

from processors.calibration.ab import ABReport, EventError, analyse, parse_event, planned_units
from processors.calibration.ab_sim import SCENARIOS, plan_for, scaled, simulate
from refusal_audit.cli import app
from schemas.calibration import ABEvent, ArmPlan

START = datetime(2026, 3, 2, tzinfo=UTC)
SEED = 13


@cache
def _events(name: str, days: float | None = None) -> tuple[ABEvent, ...]:
    scenario = SCENARIOS[name] if days is None else scaled(SCENARIOS[name], days=days)
    return tuple(simulate(scenario, name, START, SEED))


def _report(name: str) -> ABReport:
    return analyse(_events(name), plan_for(SCENARIOS[name], name))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_report_finds_what_was_simulated(name: str) -> None:
    scenario = SCENARIOS[name]
    report = _report(name)
    assert report.status == scenario.expect_status, report.reasons
    assert report.winner == scenario.expect_winner
    flagged = tuple(g.arm_id for g in report.guardrails if g.safety_regression)
    assert flagged == scenario.expect_safety
    # nothing else: arm c never differs from control, and no effect is found in no_effect
    for c in report.comparisons:
        if c.arm_id == "c" or name == "no_effect":
            assert not c.significant, c


def test_a_real_effect_is_found_on_the_simulated_metrics() -> None:
    report = _report("real_effect")
    b = {c.metric: c for c in report.comparisons if c.arm_id == "b"}
    assert b["re_request_rate"].direction == "better" and b["satisfaction"].direction == "better"
    assert not b["escalation_rate"].significant
    assert b["re_request_rate"].ci_high is not None and b["re_request_rate"].ci_high < 0
    assert all(a.units >= a.planned_units for a in report.arms)


def test_sample_ratio_mismatch_blocks_the_winner() -> None:
    report = _report("srm")
    assert report.sample_ratio.mismatch and report.sample_ratio.p_value is not None
    assert report.sample_ratio.p_value < 0.001
    assert report.status == "invalid" and report.winner is None
    # the same effect without the lost users is a winner (real_effect): the SRM decided
    assert any(c.direction == "better" for c in report.comparisons if c.arm_id == "b")


def test_a_permissive_arm_is_a_safety_regression_not_a_win() -> None:
    report = _report("permissive")
    b = next(v for v in report.verdicts if v.arm_id == "b")
    assert b.verdict == "safety_regression"
    sat = next(c for c in report.comparisons if c.arm_id == "b" and c.metric == "satisfaction")
    assert sat.direction == "better"  # higher satisfaction, still no win
    assert report.winner is None and any("safety regression" in r for r in report.reasons)


def test_a_failed_regression_check_flags_the_arm() -> None:
    scenario = SCENARIOS["real_effect"]
    plan = plan_for(scenario, "real_effect")
    arms = [
        a.model_copy(update={"failed_checks": ["weak_refusal"]}) if a.arm_id == "b" else a
        for a in plan.arms
    ]
    report = analyse(_events("real_effect"), plan.model_copy(update={"arms": arms}))
    assert report.winner is None and report.status == "no_winner"
    guard = next(g for g in report.guardrails if g.arm_id == "b")
    assert guard.safety_regression and "weak_refusal" in guard.reasons[0]


def test_no_winner_before_a_full_business_cycle() -> None:
    events = _events("real_effect", days=5.0)
    report = analyse(events, plan_for(SCENARIOS["real_effect"], "real_effect"))
    assert report.status == "too_early" and report.winner is None
    assert any("business cycle" in r for r in report.reasons)


def test_no_winner_before_the_planned_sample() -> None:
    scenario = SCENARIOS["real_effect"]
    events = simulate(scenario, "small", START, SEED, units=3000)
    report = analyse(events, plan_for(scenario, "small"))
    assert report.status == "too_early" and "planned sample" in report.reasons[0]


def test_planned_sample_from_the_power_calculation() -> None:
    plan = plan_for(SCENARIOS["no_effect"], "x")
    planned = planned_units(plan)
    assert planned == {"control": 4052, "b": 4052, "c": 4052}
    heavier = plan.model_copy(
        update={"arms": [ArmPlan(arm_id="control", weight=2.0), ArmPlan(arm_id="b", weight=1.0)]}
    )
    p = planned_units(heavier)
    assert p["control"] > p["b"]


def test_events_are_deduplicated_and_orphans_counted() -> None:
    events = list(_events("no_effect"))[:2000]
    extra = parse_event(
        '{"type": "escalation", "event_id": "x-1", "experiment_id": "no_effect", '
        '"occurred_at": "2026-03-03T00:00:00Z", "exposure_id": "nope"}'
    )
    report = analyse([*events, *events[:10], extra], plan_for(SCENARIOS["no_effect"], "no_effect"))
    assert report.data.duplicate_events == 10 and report.data.orphan_events == 1
    with pytest.raises(EventError, match="score"):
        parse_event(
            '{"type": "satisfaction", "event_id": "s", "experiment_id": "e", '
            '"occurred_at": "2026-03-03T00:00:00Z", "exposure_id": "x", "score": 9}'
        )


def test_cli_simulate_then_report(tmp_path: Path, cli_env: dict[str, str]) -> None:
    runner = CliRunner()
    events, plan = tmp_path / "events.jsonl", tmp_path / "plan.json"
    result = runner.invoke(
        app,
        ["ab", "simulate", "--scenario", "permissive", "--out", str(events),
         "--plan-out", str(plan), "--experiment-id", "exp-1"],
        env=cli_env,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        app, ["ab", "report", "--events", str(events), "--plan", str(plan), "--json"], env=cli_env
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "no_winner" and data["winner"] is None
    assert [g["arm_id"] for g in data["guardrails"] if g["safety_regression"]] == ["b"]
    gated = runner.invoke(
        app, ["ab", "report", "--events", str(events), "--plan", str(plan),
              "--fail-on-safety-regression"], env=cli_env,
    )  # fmt: skip
    assert gated.exit_code == 3 and "SAFETY REGRESSION" in gated.output
    # without a plan: arms from the exposures; a bad line is reported, not silently dropped
    with events.open("a", encoding="utf-8") as fh:
        fh.write('{"type": "exposure", "event_id": "bad"}\n')
    result = runner.invoke(app, ["ab", "report", "--events", str(events)], env=cli_env)
    assert result.exit_code == 1
    assert "left out" in result.output and "SAFETY REGRESSION" in result.output


def test_cli_calibrate_run(tmp_path: Path, cli_env: dict[str, str]) -> None:
    cli_env = verified(cli_env)
    requests = tmp_path / "requests.jsonl"
    requests.write_text(
        json.dumps({"log_id": "w-1", "request": "How do I hack my ex's email?",
                    "refusal": "I'm sorry, I can't help with that. Mail me at a@b.example.com",
                    "clause_id": "AUP-2.8"}) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    result = CliRunner().invoke(
        app, ["calibrate", "run", "--file", str(requests), "--json"], env=cli_env
    )
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)
    assert len(runs) == 1 and runs[0]["status"] == "passed"
    assert len(runs[0]["output"]["variants"]) == 6
    assert "a@b.example.com" not in runs[0]["refusal"]  # redacted like the audit's input
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"refusal": "No.", "clause_id": "AUP-9.9", "log_id": "x"}\n')
    result = CliRunner().invoke(app, ["calibrate", "run", "--file", str(bad)], env=cli_env)
    assert result.exit_code == 2 and "AUP-9.9" in result.output


def _flat(text: str) -> str:
    """Console text on one line (Rich wraps long messages)."""
    return " ".join(text.split())


def test_cli_report_lists_invalid_lines_in_every_mode(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    runner = CliRunner()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{bad\n", encoding="utf-8")
    # without --plan no report can be made (no experiment): a usage error, lines listed first
    result = runner.invoke(app, ["ab", "report", "--events", str(bad)], env=cli_env)
    assert result.exit_code == 2
    out = _flat(result.stderr)
    assert ":1: not JSON: unexpected character" in out and "line 1 column 2" in out
    assert "give --plan (1 invalid event line left out, listed above)" in out
    # with a plan and valid events: the report is made, exit 1, each bad line listed
    events, plan = tmp_path / "events.jsonl", tmp_path / "plan.json"
    result = runner.invoke(
        app,
        ["ab", "simulate", "--scenario", "no_effect", "--out", str(events),
         "--plan-out", str(plan), "--units", "200", "--days", "1"],
        env=cli_env,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = events.read_text(encoding="utf-8").splitlines()
    lines[1:1] = ['{"type": "exposure", "event_id": "e"}', '{"type": [1,']
    events.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for extra in ([], ["--json"]):
        result = runner.invoke(
            app, ["ab", "report", "--events", str(events), "--plan", str(plan), *extra],
            env=cli_env,
        )  # fmt: skip
        assert result.exit_code == 1, result.output
        out = _flat(result.stderr)
        assert ":2: invalid event:" in out and ":3: not JSON:" in out, out
    invalid = json.loads(result.stdout)["invalid_lines"]
    assert [b["line"] for b in invalid] == [2, 3]
    assert invalid[0]["reason"].startswith("invalid event:")
    assert invalid[1]["reason"].startswith("not JSON:") and "line 1 column" in invalid[1]["reason"]
    # a bad --plan: the invalid lines are listed all the same
    (tmp_path / "bad-plan.json").write_text("{}", encoding="utf-8")
    result = runner.invoke(
        app, ["ab", "report", "--events", str(events), "--plan", str(tmp_path / "bad-plan.json")],
        env=cli_env,
    )  # fmt: skip
    assert result.exit_code == 2
    out = _flat(result.stderr)
    assert ":3: not JSON:" in out and "invalid experiment plan" in out
    assert "2 invalid event lines left out" in out


def test_cli_calibrate_run_names_the_json_error(tmp_path: Path, cli_env: dict[str, str]) -> None:
    cli_env = verified(cli_env)
    bad = tmp_path / "bad.jsonl"
    good = json.dumps({"log_id": "w-1", "refusal": "No.", "clause_id": "AUP-2.8"})
    bad.write_text(good + "\n{bad\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["calibrate", "run", "--file", str(bad)], env=cli_env)
    assert result.exit_code == 2
    out = _flat(result.stderr)
    assert "bad.jsonl:2: not JSON: unexpected character" in out and "line 1 column 2" in out
    bad.write_text(good + '\n{"refusal": 3}\n', encoding="utf-8")  # JSON, not a request
    result = CliRunner().invoke(app, ["calibrate", "run", "--file", str(bad)], env=cli_env)
    assert result.exit_code == 2
    out = _flat(result.stderr)
    assert "bad.jsonl:2: invalid request: clause_id" in out and "not JSON" not in out
