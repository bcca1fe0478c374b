"""A warehouse filled with real audited data for the Grafana panel tests: the example log
audited by the local engine, reviewers' verdicts on every current assessment (a fixed,
varied disagreement pattern), tracked policy gaps and their alerts, one drift alert,
clarification conversations with a reviewer's verdict, calibration runs with a decision,
and A/B events."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from test_clarification_review import run_conversations
from test_pipeline import audit
from test_review_queries import review_every_assessment

from processors.calibration.ab import parse_event
from processors.calibration.local_variants import LocalVariantEngine
from processors.calibration.run import calibrate
from processors.clarification.trail import step_row
from refusal_audit.alerts.gaps import track_gaps
from schemas.calibration import CalibrationRequest
from schemas.policy import PolicyBundle
from warehouse import Warehouse
from warehouse import calibration as wc
from warehouse.clarification import insert_steps, insert_verdict

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"
T_CLARIFY = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
T_CALIBRATE = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def fill(store: Warehouse, tmp: Path, bundle: PolicyBundle) -> list[dict[str, Any]]:
    """Fill ``store`` (migrated, empty); return ``review_every_assessment``'s rows."""
    audit([EXAMPLE_LOG], store)
    reviewed = review_every_assessment(store, tmp)
    now = datetime.now(UTC)
    gap_alerts = track_gaps(store.client, now=now)
    drift = {"alert_id": "drift-1", "kind": "category_mix_drift", "severity": "warning",
             "created_at": now, "policy_bundle": "default", "model": "all", "product": "all",
             "window_start": now - timedelta(hours=1), "window_end": now,
             "message": "category mix moved", "payload": {}}  # fmt: skip
    store.insert_alerts([drift, *(
        {"alert_id": a.alert_id, "kind": a.kind, "severity": a.severity,
         "created_at": a.created_at, "policy_bundle": a.scope.policy_bundle,
         "model": a.scope.model, "product": a.scope.product, "window_start": a.window.start,
         "window_end": a.window.end, "message": a.summary, "payload": a.model_dump_json()}
        for a in gap_alerts)])  # fmt: skip
    states = run_conversations(bundle)  # T0 there is T_CLARIFY
    insert_steps(store, [step_row(s, T_CLARIFY) for s in states])
    last = {s.conversation_id: s for s in states}["c-refused"]
    insert_verdict(store, {"conversation_id": "c-refused", "revision": last.revision,
                           "reviewer": "ann", "decision": "refuse", "questions_ok": True,
                           "note": "", "outcome": "escalated",
                           "escalation_reason": "refused_again",
                           "submitted_at": T_CLARIFY + timedelta(hours=1)})  # fmt: skip
    runs = [
        asyncio.run(
            calibrate(
                CalibrationRequest(
                    refusal="Sorry, I can't help with that.",
                    clause_id="AUP-2.3",
                    log_id=f"l-{run_id}",
                    policy_bundle=bundle.name,
                    requested_by="priya",
                ),
                {bundle.name: bundle},
                LocalVariantEngine(),
                run_id=run_id,
                created_at=T_CALIBRATE,
            )
        )
        for run_id in ("run-1", "run-2")
    ]
    wc.insert_runs(store, runs, "file:x.jsonl", T_CALIBRATE)
    style = str(store.select(
        "SELECT style FROM {db:Identifier}.calibration_variants FINAL "
        "WHERE calibration_run_id = 'run-1' ORDER BY style LIMIT 1")[0]["style"])  # fmt: skip
    wc.insert_decision(store, {
        "decision_id": wc.decision_id("run-1", style, "ann", "approve", "n", "t"),
        "calibration_run_id": "run-1", "style": style, "policy_bundle": bundle.name,
        "clause_id": "AUP-2.3", "approver": "ann", "decision": "approve", "note": "n",
        "decided_at": T_CALIBRATE + timedelta(hours=1),
    })  # fmt: skip
    events = []
    for i in range(6):
        at = (T_CALIBRATE + timedelta(days=1, minutes=i)).isoformat()
        events.append(parse_event(
            f'{{"type": "exposure", "event_id": "x-{i}", "experiment_id": "exp-1", '
            f'"occurred_at": "{at}", "unit_id": "u-{i}", "arm_id": "{"ab"[i % 2]}"}}'))  # fmt: skip
        if i % 3 == 0:
            fulfilled = str(i == 0).lower()
            events.append(parse_event(
                f'{{"type": "re_request", "event_id": "r-{i}", "experiment_id": "exp-1", '
                f'"occurred_at": "{at}", "exposure_id": "x-{i}", '
                f'"fulfilled": {fulfilled}}}'))  # fmt: skip
    # a user exposed twice (counted once, with a re-request after the second exposure) and a
    # user seen in both arms (left out): the A/B panel counts users, as `ab report` does
    late = (T_CALIBRATE + timedelta(days=1, minutes=30)).isoformat()
    events += [parse_event(line) for line in (
        f'{{"type": "exposure", "event_id": "x-6", "experiment_id": "exp-1", '
        f'"occurred_at": "{late}", "unit_id": "u-2", "arm_id": "a"}}',
        f'{{"type": "re_request", "event_id": "r-6", "experiment_id": "exp-1", '
        f'"occurred_at": "{late}", "exposure_id": "x-6", "fulfilled": false}}',
        f'{{"type": "exposure", "event_id": "x-7", "experiment_id": "exp-1", '
        f'"occurred_at": "{late}", "unit_id": "u-1", "arm_id": "a"}}',
    )]  # fmt: skip
    wc.insert_ab_events(store, [(e, "file:ab.jsonl") for e in events], T_CALIBRATE)
    return reviewed
