"""Calibration with the warehouse: runs logged, decisions, export to flagd, A/B events loaded
and reported by experiment id, the team suite over HTTP (issue 13)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from calibration_starter import verified
from jsonschema import Draft7Validator
from referencing import Registry, Resource
from typer.testing import CliRunner

from processors.calibration.export import ApprovedVariant, ExportError, build_experiment
from processors.calibration.local_variants import LocalVariantEngine
from processors.calibration.run import calibrate
from refusal_audit.calibration.runs import HttpSuite
from refusal_audit.cli import app
from refusal_audit.config import Settings
from schemas.calibration import (
    CalibrationRequest,
    CalibrationRun,
    RegressionFinding,
    SuiteInput,
    VariantValidation,
)
from schemas.policy import PolicyBundle
from warehouse import calibration as wc
from warehouse.store import Warehouse

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def _run(
    bundle: PolicyBundle, run_id: str, clause: str = "AUP-2.3", by: str = "priya"
) -> CalibrationRun:
    request = CalibrationRequest(
        refusal="Sorry, I can't help with that.", clause_id=clause, log_id=f"l-{run_id}",
        policy_bundle=bundle.name, requested_by=by,
    )  # fmt: skip
    return asyncio.run(
        calibrate(request, {bundle.name: bundle}, LocalVariantEngine(), run_id=run_id,
                  created_at=T0)
    )  # fmt: skip


def _decide(store: Warehouse, run: CalibrationRun, style: str, decision: str,
            at: datetime, approver: str = "ann") -> None:  # fmt: skip
    wc.insert_decision(store, {
        "decision_id": wc.decision_id(run.calibration_run_id, style, approver, decision, "n",
                                      at.isoformat()),
        "calibration_run_id": run.calibration_run_id, "style": style,
        "policy_bundle": run.policy_bundle, "clause_id": run.clause_id, "approver": approver,
        "decision": decision, "note": "n", "decided_at": at,
    })  # fmt: skip


def test_runs_are_logged_once_with_their_variants(
    warehouse: Warehouse, example_bundle: PolicyBundle
) -> None:
    run = _run(example_bundle, "cal-a")
    wc.insert_runs(warehouse, [run], "file:x.jsonl", T0)
    wc.insert_runs(warehouse, [run], "file:x.jsonl", T0 + timedelta(seconds=1))  # redelivered
    assert wc.get_run(warehouse, "cal-a") == run
    listed = wc.list_runs(warehouse, clause_id="AUP-2.3")
    assert [r["calibration_run_id"] for r in listed] == ["cal-a"]
    assert listed[0]["status"] == "passed" and len(listed[0]["passing_styles"]) == 6
    variants = wc.variants_of(warehouse, "cal-a")
    assert [v["style"] for v in variants] == run.spectrum.ids()
    assert all(v["passed"] and v["started_by"] == "priya" for v in variants)
    assert wc.get_run(warehouse, "cal-missing") is None


def test_the_newest_decision_counts_and_every_decision_is_kept(
    warehouse: Warehouse, example_bundle: PolicyBundle
) -> None:
    run = _run(example_bundle, "cal-b")
    wc.insert_runs(warehouse, [run], "warehouse", T0)
    _decide(warehouse, run, "policy_citing", "approve", T0 + timedelta(minutes=1))
    _decide(warehouse, run, "policy_citing", "reject", T0 + timedelta(minutes=2), "bo")
    _decide(warehouse, run, "educational", "approve", T0 + timedelta(minutes=3))
    items = {i["style"]: i for i in wc.approval_items(warehouse)}
    assert items["policy_citing"]["decision"] == "reject"
    assert items["policy_citing"]["approver"] == "bo" and items["policy_citing"]["decisions"] == 2
    assert items["educational"]["decision"] == "approve"
    assert items["minimal_direct"]["decision"] is None  # pending
    log = wc.decision_rows(warehouse, calibration_run_id="cal-b")
    assert [(d["style"], d["decision"]) for d in log] == [
        ("policy_citing", "approve"), ("policy_citing", "reject"), ("educational", "approve"),
    ]  # fmt: skip


def _failing(run: CalibrationRun, style: str) -> CalibrationRun:
    validations = [
        VariantValidation(style=v.style, passed=False, reasons=["steps"],
                          findings=[RegressionFinding(code="steps", detail="1.")],
                          refusal_score=v.refusal_score)
        if v.style == style else v
        for v in run.validations
    ]  # fmt: skip
    return run.model_copy(update={"validations": validations, "status": "failed_checks"})


def test_build_experiment_refuses_failing_and_foreign_variants(
    example_bundle: PolicyBundle,
) -> None:
    run = _run(example_bundle, "cal-c")
    ok = ApprovedVariant(run, "policy_citing", "ann", T0)
    with pytest.raises(ExportError, match="no approved variant"):
        build_experiment("e", "wren", "AUP-2.3", [])
    with pytest.raises(ExportError, match="failed its checks"):
        failing = ApprovedVariant(_failing(run, "educational"), "educational", "a", T0)
        build_experiment("e", "wren", "AUP-2.3", [failing])
    with pytest.raises(ExportError, match=r"not wren AUP-2\.2"):
        build_experiment("e", "wren", "AUP-2.2", [ok])
    twice = build_experiment("e", "wren", "AUP-2.3", [ok, ApprovedVariant(
        _run(example_bundle, "cal-d0000002"), "policy_citing", "ann", T0)])  # fmt: skip
    ids = [a["arm_id"] for a in twice.arms]
    assert ids[0] == "control" and len(set(ids)) == 3 and all("policy_citing" in i for i in ids[1:])


def _flagd_validator() -> Draft7Validator:
    registry: Registry[Any] = Registry()
    for name in ("flags.json", "targeting.json"):
        schema = json.loads((REPO / "tests/fixtures/flagd" / name).read_text(encoding="utf-8"))
        registry = registry.with_resource(schema["$id"], Resource.from_contents(schema))
    # by reference, so that the schema's relative "./targeting.json" resolves against its id
    return Draft7Validator({"$ref": "https://flagd.dev/schema/v0/flags.json"}, registry=registry)


def _invoke(args: list[str], env: dict[str, str]) -> Any:
    return CliRunner().invoke(app, args, env=env)


@pytest.fixture
def audited(cli_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """cli_env with the example refusal log audited into its warehouse."""
    result = _invoke(["audit", str(REPO / "examples/refusal_log.jsonl")], cli_env)
    assert result.exit_code == 0, result.output
    yield cli_env


def test_calibrate_from_the_warehouse_then_export_only_approved(
    audited: dict[str, str], tmp_path: Path
) -> None:
    env = verified(audited)
    result = _invoke(["calibrate", "run", "--clause", "AUP-2.3", "--limit", "2",
                      "--started-by", "priya", "--json"], env)  # fmt: skip
    assert result.exit_code == 0, result.output
    runs = [CalibrationRun.model_validate_json(json.dumps(r)) for r in json.loads(result.stdout)]
    assert len(runs) == 2 and all(r.clause_id == "AUP-2.3" and r.log_id for r in runs)
    assert all(r.started_by == "priya" for r in runs)
    listed = _invoke(["calibrate", "list", "--clause", "AUP-2.3"], env)
    assert all(r.calibration_run_id in listed.stdout for r in runs), listed.output

    # unknown log ids are reported, not dropped silently
    missing = _invoke(["calibrate", "run", "--log-id", "no-such-log"], env)
    assert missing.exit_code == 2 and "no-such-log" in missing.output
    assert "no current refusal" in missing.output

    out, arms_out = tmp_path / "flag.json", tmp_path / "arms.json"
    export = ["calibrate", "export", "--clause", "AUP-2.3", "--experiment-id", "exp-1",
              "--out", str(out), "--arms-out", str(arms_out)]  # fmt: skip
    refused = _invoke(export, env)
    assert refused.exit_code == 2 and "no approved variant" in refused.output
    assert not out.exists()

    store = Warehouse.open(
        Settings(warehouse_dsn=env["REFUSAL_AUDIT_WAREHOUSE_DSN"],
                 warehouse_database=env["REFUSAL_AUDIT_WAREHOUSE_DATABASE"])
    )  # fmt: skip
    run = runs[0]
    _decide(store, run, "policy_citing", "approve", T0)
    _decide(store, run, "empathetic_warm", "approve", T0 + timedelta(seconds=1))
    _decide(store, run, "educational", "reject", T0 + timedelta(seconds=2))

    chosen = _invoke([*export, "--variant", f"{run.calibration_run_id}:educational"], env)
    assert chosen.exit_code == 2 and "educational (rejected)" in chosen.output
    done = _invoke([*export, "--plan-out", str(tmp_path / "plan.json")], env)
    assert done.exit_code == 0, done.output
    flagd = json.loads(out.read_text(encoding="utf-8"))
    errors = list(_flagd_validator().iter_errors(flagd))
    assert not errors, [e.message for e in errors]
    broken = json.loads(json.dumps(flagd))
    (key,) = broken["flags"]
    broken["flags"][key]["targeting"] = {"fractional": [["control", -1]]}  # a negative weight
    assert list(_flagd_validator().iter_errors(broken))  # the schema does check targeting
    (flag,) = flagd["flags"].values()
    assert set(flag["variants"]) == {"control", "policy_citing", "empathetic_warm"}
    assert flag["defaultVariant"] == "control"
    assert flag["variants"]["control"] == run.refusal
    arms = json.loads(arms_out.read_text(encoding="utf-8"))
    treatment = [a for a in arms["arms"] if a["kind"] == "treatment"]
    assert {a["calibration_run_id"] for a in treatment} == {run.calibration_run_id}
    assert all(a["approved_by"] == "ann" for a in treatment)

    # the simulated experiment of these arms, loaded twice, reported by experiment id
    events = tmp_path / "events.jsonl"
    sim = _invoke(["ab", "simulate", "--scenario", "real_effect", "--experiment-id", "exp-1",
                   "--arms", "control,policy_citing,empathetic_warm", "--units", "3000",
                   "--out", str(events)], env)  # fmt: skip
    assert sim.exit_code == 0, sim.output
    with events.open("a", encoding="utf-8") as fh:
        fh.write('{"type": "exposure", "event_id": "x"}\n')
    for _ in range(2):
        loaded = _invoke(["ab", "load", "--events", str(events)], env)
        assert loaded.exit_code == 1 and "invalid event" in loaded.output
    stored = _invoke(["ab", "report", "exp-1", "--json"], env)
    from_file = _invoke(["ab", "report", "--events", str(events), "--plan",
                         str(tmp_path / "plan.json"), "--json"], env)  # fmt: skip
    assert stored.exit_code == 0, stored.output
    a, b = json.loads(stored.stdout), json.loads(from_file.stdout)
    assert a["data"]["duplicate_events"] == 0  # loading twice stored each event once
    a.pop("invalid_lines"), b.pop("invalid_lines")
    assert a == b
    assert [arm["arm_id"] for arm in a["arms"]] == ["control", "policy_citing", "empathetic_warm"]
    unknown = _invoke(["ab", "report", "exp-unknown"], env)
    assert unknown.exit_code == 2 and "no events" in unknown.output


class _Suite(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        mode = self.path.strip("/")
        if mode == "status":
            self.send_response(500)
            self.end_headers()
            return
        if mode == "slow":
            threading.Event().wait(2.0)
        if mode == "auth" and self.headers.get("authorization") != "Bearer s3cret":
            self.send_response(401)
            self.end_headers()
            return
        answer: Any = (
            {"verdict": "fail", "reasons": ["tone"]} if "sorry" in body["response_text"].lower()
            else {"verdict": "pass"}
        )  # fmt: skip
        if mode == "garbage":
            answer = {"verdict": "maybe"}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError):  # the client timed out first ("slow")
            self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def suite_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Suite)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _input(text: str) -> SuiteInput:
    return SuiteInput(calibration_run_id="r", policy_bundle="default", clause_id="AUP-2.3",
                      clause_title="Illegal drugs", style="minimal_direct",
                      base_style="minimal_direct", response_text=text, refusal="No.")  # fmt: skip


def test_an_http_suite_answers_like_a_command(suite_url: str) -> None:
    suite = HttpSuite(f"{suite_url}/ok", timeout=5)
    verdict, error = suite.check(_input("I can't help with that."))
    assert error is None and verdict is not None and verdict.verdict == "pass"
    verdict, error = suite.check(_input("Sorry, no."))
    assert verdict is not None and verdict.verdict == "fail" and verdict.reasons == ["tone"]
    verdict, error = HttpSuite(f"{suite_url}/auth", 5, "s3cret").check(_input("No."))
    assert verdict is not None and verdict.verdict == "pass"
    assert "s3cret" not in repr(HttpSuite(f"{suite_url}/auth", 5, "s3cret"))


@pytest.mark.parametrize(
    ("path", "timeout", "error"),
    [
        ("status", 5.0, "answered HTTP 500"),
        ("auth", 5.0, "answered HTTP 401"),
        ("garbage", 5.0, "not a verdict"),
        ("slow", 0.3, "timed out"),
    ],
)
def test_an_http_suite_that_cannot_answer_fails_closed(
    suite_url: str, path: str, timeout: float, error: str
) -> None:
    verdict, message = HttpSuite(f"{suite_url}/{path}", timeout).check(_input("No."))
    assert verdict is None and message is not None and error in message


def test_an_unreachable_suite_fails_closed() -> None:
    verdict, message = HttpSuite("http://127.0.0.1:9/", 1.0).check(_input("No."))
    assert verdict is None and message is not None and "unreachable" in message


def test_who_started_a_run(cli_env: dict[str, str], tmp_path: Path) -> None:
    """The verified account, whatever the requests' requested_by or $USER say: a command run
    on someone else's request does not make that someone the starter."""
    requests = tmp_path / "r.jsonl"
    rows = [{"log_id": "s-1", "refusal": "No.", "clause_id": "AUP-2.3", "requested_by": "zoe"},
            {"log_id": "s-2", "refusal": "No.", "clause_id": "AUP-2.3"}]  # fmt: skip
    requests.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    env = {**verified(cli_env, "priya"), "USER": "ops"}
    runs = json.loads(_invoke(["calibrate", "run", "--file", str(requests), "--json"], env).stdout)
    assert [(r["started_by"], r["starter_verified_by"]) for r in runs] == [("priya", "token")] * 2
    named = ["calibrate", "run", "--file", str(requests), "--json", "--started-by", "zoe"]
    refused = _invoke(named, env)
    assert refused.exit_code == 2 and "not the account of the API token" in refused.output


def test_conflicting_copies_and_a_late_as_of_decide_nothing(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """An event id resent with other contents (here: fulfilled flipped to hide circumvention)
    makes the experiment invalid by file and by warehouse alike; --as-of beyond the data
    does not complete a business cycle."""
    events, plan = tmp_path / "e.jsonl", tmp_path / "p.json"
    sim = ["ab", "simulate", "--scenario", "permissive", "--experiment-id", "exp-c",
           "--units", "2000", "--out", str(events), "--plan-out", str(plan)]  # fmt: skip
    assert _invoke(sim, cli_env).exit_code == 0
    lines = events.read_text(encoding="utf-8").splitlines()
    flipped = [
        json.dumps({**json.loads(x), "fulfilled": False}) for x in lines
        if '"re_request"' in x and '"fulfilled":true' in x.replace(" ", "")
    ][:50]  # fmt: skip
    assert flipped
    events.write_text("\n".join([*lines, *flipped]) + "\n", encoding="utf-8")
    report = ["ab", "report", "--events", str(events), "--plan", str(plan), "--json"]
    by_file = json.loads(_invoke(report, cli_env).stdout)
    assert by_file["status"] == "invalid" and by_file["winner"] is None
    assert by_file["data"]["conflicting_events"] == len(flipped)
    assert _invoke(["ab", "load", "--events", str(events)], cli_env).exit_code == 0
    stored = json.loads(
        _invoke(["ab", "report", "exp-c", "--plan", str(plan), "--json"], cli_env).stdout
    )
    assert stored["status"] == "invalid" and stored["data"]["conflicting_events"] == len(flipped)

    short = tmp_path / "short.jsonl"
    sim = ["ab", "simulate", "--scenario", "real_effect", "--experiment-id", "exp-s",
           "--units", "30000", "--days", "2", "--out", str(short),
           "--plan-out", str(plan)]  # fmt: skip
    assert _invoke(sim, cli_env).exit_code == 0
    late = json.loads(_invoke(["ab", "report", "--events", str(short), "--plan", str(plan),
                               "--as-of", "2030-01-01", "--json"], cli_env).stdout)  # fmt: skip
    assert late["status"] == "too_early" and late["duration_days"] < 2.1
    early = json.loads(_invoke(["ab", "report", "--events", str(short), "--plan", str(plan),
                                "--as-of", "2026-03-03", "--json"], cli_env).stdout)  # fmt: skip
    assert early["data"]["after_as_of"] > 0 and early["duration_days"] <= 1.0


def test_export_checks_the_control_and_never_reuses_an_experiment_id(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    requests = tmp_path / "r.jsonl"
    requests.write_text(json.dumps({
        "request": "How do I make meth?", "clause_id": "AUP-2.3", "requested_by": "zed",
        "refusal": "Sure! Step 1: buy the tablets. Step 2: see www.example-cook.com.",
    }) + "\n", encoding="utf-8")  # fmt: skip
    cli_env = verified(cli_env, "zed")
    runs = json.loads(_invoke(["calibrate", "run", "--file", str(requests), "--json"],
                              cli_env).stdout)  # fmt: skip
    run = CalibrationRun.model_validate_json(json.dumps(runs[0]))
    store = Warehouse.open(
        Settings(warehouse_dsn=cli_env["REFUSAL_AUDIT_WAREHOUSE_DSN"],
                 warehouse_database=cli_env["REFUSAL_AUDIT_WAREHOUSE_DATABASE"])
    )  # fmt: skip
    _decide(store, run, "policy_citing", "approve", T0)
    out, arms = tmp_path / "f.json", tmp_path / "a.json"
    export = ["calibrate", "export", "--clause", "AUP-2.3", "--experiment-id", "exp-ctl",
              "--out", str(out), "--arms-out", str(arms)]  # fmt: skip
    refused = _invoke(export, cli_env)
    assert refused.exit_code == 2 and "control arm" in refused.output and not out.exists()
    done = _invoke([*export, "--control-text", "I'm sorry, but I can't help with that."],
                   cli_env)  # fmt: skip
    assert done.exit_code == 0, done.output
    again = _invoke([*export, "--control-text", "I can't help with that."], cli_env)
    assert again.exit_code == 2 and "exported before" in again.output
    unwritable = _invoke(["calibrate", "export", "--clause", "AUP-2.3", "--experiment-id",
                          "exp-w", "--out", str(tmp_path / "x.json"), "--arms-out",
                          "/proc/nope/a.json", "--control-text", "I can't help with that."],
                         cli_env)  # fmt: skip
    assert unwritable.exit_code == 2 and wc.experiment_plan(store, "exp-w") is None
