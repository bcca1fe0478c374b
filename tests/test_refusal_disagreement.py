"""When the platform's refusal flag and our detection disagree (issue 25, item 1): stored,
counted, listed and evaluated, never silently dropped; stores from before keep working.

Real chDB everywhere (the session's embedded store); the CLI runs in process."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import generate_latest
from streaming import Deployment, stop, wait_for_web
from typer.testing import CliRunner

from processors.evaluation import EvalItem, Labels, classifier_vs_detector, evaluate
from refusal_audit.audit.pipeline import RunReport
from refusal_audit.cli import app
from refusal_audit.streaming.worker_web import record_metrics
from schemas.events import DISAGREEMENT_DIRECTIONS
from streams.metrics import WorkerMetrics
from warehouse import Warehouse, connect, load_migrations, migrate
from warehouse.queries import run_named

runner = CliRunner()

REFUSAL = "I'm sorry, but I can't help with that."
COMPLIANT = "Sure! Here is a short poem about spring: green buds, warm rain, long light."


def _event(log_id: str, response: str, verdict: bool | None, **extra: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "log_id": log_id,
        "event_time": "2026-03-02T10:00:00Z",
        "request": f"request of {log_id}",
        "response": response,
        "model": "m1",
        "product": "p1",
        **extra,
    }
    if verdict is not None:
        event["classifier"] = {"is_refusal": verdict}
    return event


#: a classifier-negative plain refusal, a classifier-positive compliant answer, agreement
#: both ways, and an event without a verdict (our detection decides alone)
EVENTS = [
    _event("missed-refusal", REFUSAL, False),
    _event("flagged-answer", COMPLIANT, True),
    _event("agree-refusal", REFUSAL, True),
    _event("agree-answer", COMPLIANT, False),
    _event("text-only", REFUSAL, None),
]
EXPECTED = {
    "missed-refusal": (False, True, "detector_refusal_classifier_not"),
    "flagged-answer": (True, False, "classifier_refusal_detector_not"),
    "agree-refusal": (True, True, "none"),
    "agree-answer": (False, False, "none"),
    "text-only": (True, True, "none"),
}


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    return path


def _query(env: dict[str, str], name: str) -> list[dict[str, Any]]:
    result = runner.invoke(app, ["query", name, "-o", "json"], env=env)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.output.splitlines() if line.strip()]


def _stored(env: dict[str, str]) -> dict[str, tuple[Any, ...]]:
    sql = (
        "SELECT log_id, is_refusal, detected_is_refusal, refusal_disagreement, "
        "detected_refusal_score FROM refusal_events FINAL ORDER BY log_id"
    )
    result = runner.invoke(app, ["sql", sql, "-o", "json"], env=env)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines() if line.strip()]
    return {
        r["log_id"]: (
            r["is_refusal"],
            r["detected_is_refusal"],
            r["refusal_disagreement"],
            r["detected_refusal_score"],
        )
        for r in rows
    }


def test_disagreements_are_stored_counted_listed_and_reported(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    log = _write(tmp_path / "verdicts.jsonl", EVENTS)
    out = tmp_path / "run.json"
    audited = runner.invoke(app, ["audit", str(log), "--out", str(out)], env=cli_env)
    assert audited.exit_code == 0, audited.output
    assert "2 disagreement(s) (1 classifier refusal, detector not; 1 detector refusal" in (
        " ".join(audited.output.split())
    )
    doc = json.loads(out.read_text())
    assert doc["counts"]["disagreements"] == {
        "classifier_refusal_detector_not": 1,
        "detector_refusal_classifier_not": 1,
    }
    # the platform's verdict decided what was audited; our detection is stored beside it
    audited_ids = {a["log_id"] for a in doc["individual_assessments"]}
    assert audited_ids == {"flagged-answer", "agree-refusal", "text-only"}
    stored = _stored(cli_env)
    assert {k: v[:3] for k, v in stored.items()} == EXPECTED
    assert stored["missed-refusal"][3] >= 0.5 > stored["flagged-answer"][3]

    listed = _query(cli_env, "refusal_disagreement_events")
    assert {(r["log_id"], r["direction"]) for r in listed} == {
        ("missed-refusal", "detector_refusal_classifier_not"),
        ("flagged-answer", "classifier_refusal_detector_not"),
    }
    missed = next(r for r in listed if r["log_id"] == "missed-refusal")
    assert missed["response"] == REFUSAL and "apology" in missed["refusal_cues"]
    assert (missed["classifier_is_refusal"], missed["detected_is_refusal"]) == (False, True)
    [day] = _query(cli_env, "refusal_disagreements")
    assert (day["classifier_verdicts"], day["compared"], day["disagreements"]) == (4, 4, 2)
    assert day["rate"] == 0.5 and day["wilson_low"] < 0.5 < day["wilson_high"]
    assert (day["classifier_refusal_detector_not"], day["detector_refusal_classifier_not"]) == (
        1,
        1,
    )

    html_path = tmp_path / "report.html"
    report = runner.invoke(
        app, ["report", "--since", "2026-03-01", "--out", str(html_path)], env=cli_env
    )
    assert report.exit_code == 0, report.output
    html = html_path.read_text(encoding="utf-8")
    section = html[html.index('<section id="disagreements">') :]
    section = section[: section.index("</section>")]
    assert "4 event(s) carried the platform classifier" in section
    assert "missed-refusal" in section and "flagged-answer" in section
    assert "agree-refusal" not in section

    # re-processing the same input changes no query result (the stored rows are the same)
    before = (_stored(cli_env), listed, day)
    again = runner.invoke(app, ["audit", str(log)], env=cli_env)
    assert again.exit_code == 0, again.output
    assert (_stored(cli_env), _query(cli_env, "refusal_disagreement_events")) == before[:2]
    assert _query(cli_env, "refusal_disagreements") == [before[2]]


def test_the_worker_metric_counts_disagreements_by_direction() -> None:
    metrics = WorkerMetrics()
    text = generate_latest(metrics.registry).decode()
    name = "refusal_audit_refusal_disagreements_total"
    assert f'{name}{{direction="classifier_refusal_detector_not"}} 0.0' in text
    report = RunReport()
    report.disagreements.update({"classifier_refusal_detector_not": 2})
    report.disagreements.update({"detector_refusal_classifier_not": 3})
    record_metrics(metrics, report)
    record_metrics(metrics, report)
    text = generate_latest(metrics.registry).decode()
    assert f'{name}{{direction="classifier_refusal_detector_not"}} 4.0' in text
    assert f'{name}{{direction="detector_refusal_classifier_not"}} 6.0' in text


def test_eval_says_which_of_the_two_was_right(cli_env: dict[str, str], tmp_path: Path) -> None:
    # the label sits in the attributes; the classifier verdict is the platform's own
    labelled = [
        {**e, "attributes": {"is_refusal": str(label).lower()}}
        for e, label in zip(EVENTS, (True, False, True, False, True), strict=True)
    ]
    labelled[1]["attributes"]["is_refusal"] = "true"  # here the classifier was right
    log = _write(tmp_path / "labelled.jsonl", labelled)
    result = runner.invoke(app, ["eval", str(log), "--json"], env=cli_env)
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    versus = figures["classifier_vs_detector"]
    assert versus["compared"] == 4  # the event without a verdict is not compared
    assert versus["disagreements"]["k"] == 2
    assert versus["classifier_right"]["k"] == 1 and versus["detector_right"]["k"] == 1
    assert versus["classifier"]["tp"] == 2 and versus["detector"]["tp"] == 2
    printed = runner.invoke(app, ["eval", str(log)], env=cli_env)
    assert "platform classifier vs our detection, 4 labelled events" in " ".join(
        printed.output.split()
    )


def test_classifier_vs_detector_figures() -> None:
    def item(label: bool, classifier: bool, detector: bool) -> EvalItem:
        return EvalItem(Labels(label, None, None), classifier, None, None, None, False,
                        classifier, detector)  # fmt: skip

    items = [item(True, False, True)] * 3 + [item(False, True, False)] + [item(True, True, True)]
    got = classifier_vs_detector(items)
    assert got["disagreements"]["k"] == 4 and got["disagreements"]["n"] == 5
    assert got["detector_right"]["k"] == 4 and got["classifier_right"]["k"] == 0
    assert got["classifier_refusal_detector_not"] == 1
    assert got["detector_refusal_classifier_not"] == 3
    assert evaluate(items)["classifier_vs_detector"] == got
    # a label read from the classifier itself is not a comparison
    alone = EvalItem(Labels(True, None, None), True, label_in_classifier=True)
    assert "classifier_vs_detector" not in evaluate([alone])


def test_a_store_from_before_still_opens_and_answers(chdb_dsn: str) -> None:
    database = f"t_{uuid.uuid4().hex[:16]}"
    client = connect(chdb_dsn, database)
    try:
        before = [m for m in load_migrations() if m.version <= "0020"]
        migrate(client, database, migrations=before)
        columns = (
            "log_id, event_time, schema_version, request, response, model, product, "
            "policy_bundle, has_classifier, classifier_is_refusal, is_refusal, refusal_kind, "
            "refusal_score, source, ingested_at"
        )
        client.command(
            f"INSERT INTO `{database}`.refusal_events ({columns}) VALUES "
            "('old-1', '2026-03-02 10:00:00', '1', 'q', 'I cannot help.', 'm1', 'p1', "
            "'default', true, false, false, 'none', 0, 'old.jsonl', '2026-03-02 10:00:01')"
        )
        applied = migrate(client, database)
        assert applied[0] == "0021_refusal_disagreement"
        wh = Warehouse(client, database, retries=1, retry_wait=0.0)
        assert wh.count_events() == 1
        [row] = client.query(
            f"SELECT detected_is_refusal, detected_refusal_score, refusal_disagreement "
            f"FROM `{database}`.refusal_events FINAL"
        ).result_rows
        assert tuple(row) == (None, None, "none")
        # counted as a classifier verdict that was never compared, listed as no disagreement
        [day] = run_named(client, database, "refusal_disagreements").as_dicts()
        assert (day["classifier_verdicts"], day["compared"], day["disagreements"]) == (1, 0, 0)
        assert run_named(client, database, "refusal_disagreement_events").rows == []
        identity = wh.stored_identities([("default", "old-1")])["old-1"]
        assert identity.is_refusal is False
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{database}`")
        client.close()


def test_run_report_counts_each_event_once(cli_env: dict[str, str], tmp_path: Path) -> None:
    # the same event twice in one input is one event: its disagreement counts once
    log = _write(tmp_path / "twice.jsonl", [EVENTS[0], EVENTS[0], EVENTS[1]])
    out = tmp_path / "twice.json"
    result = runner.invoke(app, ["audit", str(log), "--out", str(out)], env=cli_env)
    assert result.exit_code == 0, result.output
    counts = json.loads(out.read_text())["counts"]
    assert counts["identical_copies"] == 1
    assert Counter(counts["disagreements"]) == Counter(
        {"classifier_refusal_detector_not": 1, "detector_refusal_classifier_not": 1}
    )


@pytest.mark.kafka
def test_the_worker_stores_and_counts_disagreements(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path
) -> None:
    """Through a real broker: the streaming worker stores both verdicts and counts each
    disagreement on /metrics by direction."""
    dep = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path)
    dep.cli("topics", "create")
    log = _write(tmp_path / "verdicts.jsonl", EVENTS)
    assert f"delivered {len(EVENTS)}" in dep.cli("produce", str(log)).stdout
    worker = dep.start_worker()
    try:
        wait_for_web(dep, worker)
        dep.wait_drained(worker)
        metrics = dep.metrics()
        name = "refusal_audit_refusal_disagreements_total"
        for direction in DISAGREEMENT_DIRECTIONS:
            assert f'{name}{{direction="{direction}"}} 1.0' in metrics, metrics
        rows = dep.sql(
            "SELECT log_id, is_refusal, detected_is_refusal, refusal_disagreement "
            "FROM refusal_events FINAL ORDER BY log_id"
        )
    finally:
        stop(worker)
    assert worker.returncode == 0, dep.worker_logs()
    got = {
        r["log_id"]: (r["is_refusal"], r["detected_is_refusal"], r["refusal_disagreement"])
        for r in rows
    }
    assert got == EXPECTED


def test_the_review_app_lists_disagreements_for_reviewers_only(
    warehouse: Warehouse, tmp_path: Path
) -> None:
    from review_app_harness import PASSWORDS, Reviewer, audit_in_review, serve

    audit_in_review(warehouse, EVENTS, tmp_path / "verdicts.jsonl")
    with serve(warehouse, tmp_path / "data", audit_log=False) as running:
        anonymous = Reviewer(running.url, "nobody")
        assert anonymous.http.get("/disagreements").status_code in (302, 303)
        bob = Reviewer(running.url, "bob", PASSWORDS["bob"])
        page = bob.http.get("/disagreements")
        assert page.status_code == 200
        assert "missed-refusal" in page.text and "flagged-answer" in page.text
        assert "agree-refusal" not in page.text
        one = bob.http.get("/disagreements?direction=classifier_refusal_detector_not")
        assert "flagged-answer" in one.text and "missed-refusal" not in one.text
        assert bob.http.get("/disagreements?direction=sideways").status_code == 400
        anonymous.close()
        bob.close()
