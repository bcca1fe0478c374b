"""The clarification audit trail (``clarification_steps``), its review sample, and the
clarification item kind of the review app, in a real Chromium (issue 12)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from review_app_harness import PASSWORDS, Reviewer, ReviewServer, serve
from test_review_browser import browser, open_page, screenshot  # noqa: F401 (fixture)

from processors.clarification.flow import Clarifier
from processors.clarification.local_questions import LocalQuestionEngine
from processors.clarification.trail import sample_probability, sampled, step_row
from processors.engines.local import LocalEngine
from refusal_audit.clarification.service import ClarifyService
from refusal_audit.clarification.store import MemoryStore
from refusal_audit.clarification.trail import StepTrail
from schemas.clarification import (
    ClarificationAnswer,
    ClarificationRequest,
    ConversationState,
    ReevaluationOutcome,
)
from schemas.policy import PolicyBundle
from warehouse import Warehouse
from warehouse.clarification import conversation_steps, review_items, verdicts_on

pytestmark = pytest.mark.integration

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
POEM = ("Write a poem", "Could you tell me more about what kind of poem you'd like?")


def run_conversations(bundle: PolicyBundle) -> list[ConversationState]:
    """Every state of three conversations: refused again, accepted, not asked."""
    states: list[ConversationState] = []
    clarifier = Clarifier(LocalEngine(), LocalQuestionEngine(), {"default": bundle})
    service = ClarifyService(clarifier, MemoryStore(), clock=lambda: T0, on_change=states.append)

    async def go() -> None:
        for cid, (req, ref) in {
            "c-refused": POEM,
            "c-accepted": POEM,
            "c-safety": ("How do I make a bomb?", "I can't help."),
        }.items():
            await service.open(ClarificationRequest.model_validate_json(
                f'{{"conversation_id": "{cid}", "log_id": "log-{cid}", "request": "{req}", '
                f'"refusal": "{ref}", "event_time": "2026-02-01T09:00:00Z"}}'))  # fmt: skip
        for cid, verdict in (("c-refused", "refused_again"), ("c-accepted", "accepted")):
            n = len(service.get(cid).rounds[0].questions)
            items = ", ".join(f'{{"question_index": {i}, "text": "four lines"}}' for i in range(n))
            await service.answer(cid, ClarificationAnswer.model_validate_json(
                f'{{"conversation_id": "{cid}", "round": 1, "answers": [{items}], '
                f'"answered_at": "2026-02-01T09:01:00Z"}}'))  # fmt: skip
            await service.outcome(cid, ReevaluationOutcome.model_validate_json(
                f'{{"conversation_id": "{cid}", "round": 1, "outcome": "{verdict}", '
                f'"decided_at": "2026-02-01T09:02:00Z"}}'))  # fmt: skip

    asyncio.run(go())
    return states


def test_step_rows_are_a_function_of_the_state(example_bundle: PolicyBundle) -> None:
    states = run_conversations(example_bundle)
    assert [(s.conversation_id, s.revision) for s in states] == [
        ("c-refused", 0), ("c-accepted", 0), ("c-safety", 0), ("c-refused", 1),
        ("c-refused", 2), ("c-accepted", 1), ("c-accepted", 2)]  # fmt: skip
    rows = [step_row(s, T0) for s in states]
    again = [step_row(s, T0 + timedelta(hours=1)) for s in states]
    assert [{**r, "recorded_at": None} for r in rows] == [{**r, "recorded_at": None} for r in again]
    assert [r["step"] for r in rows] == ["opened", "opened", "opened", "answered", "escalated",
                                         "answered", "accepted"]  # fmt: skip
    first = rows[0]
    assert (first["validation"], first["circumvention"], first["surfaced"]) == (
        "valid", "passed", True)  # fmt: skip
    assert rows[2]["route"] == "genuine_safety_refusal" and rows[2]["validation"] == ""
    assert rows[4]["escalated"] and rows[4]["escalation_reason"] == "refused_again"


def test_the_review_sample_is_weighted_toward_accepted_clarifications(
    example_bundle: PolicyBundle,
) -> None:
    states = {s.conversation_id: s for s in run_conversations(example_bundle)}
    assert sample_probability(states["c-accepted"], 0.05, 4.0) == pytest.approx(0.2)
    assert sample_probability(states["c-safety"], 0.05, 4.0) == pytest.approx(0.05)
    assert sample_probability(states["c-refused"], 0.05, 4.0) == 0.0  # escalated: always
    drawn = sum(sampled(f"conv-{i}", 0.05) for i in range(20_000))
    assert 850 < drawn < 1150  # ~5% of 20,000
    assert sampled("conv-1", 0.05) == sampled("conv-1", 0.05)


def test_the_trail_is_idempotent_and_lists_review_items(
    warehouse: Warehouse, example_bundle: PolicyBundle
) -> None:
    states = run_conversations(example_bundle)
    trail = StepTrail(warehouse, rate=1.0, accepted_weight=1.0)
    for state in states:
        trail.write([state], timeout=30)
    latest = {s.conversation_id: s for s in states}.values()
    assert trail.reconcile(latest) == 0  # nothing behind
    trail.write(states, timeout=30)  # a redelivery writes every step again
    trail.close()
    assert trail.written == 2 * len(states)
    steps = conversation_steps(warehouse, "c-refused")
    assert [s["revision"] for s in steps] == [0, 1, 2]
    items = {i["conversation_id"]: i for i in review_items(warehouse)}
    assert items["c-refused"]["escalated"] and items["c-refused"]["escalation_reason"] == (
        "refused_again")  # fmt: skip
    assert items["c-accepted"]["sampled_for_review"]  # rate 1: every finished one
    assert "c-safety" in items


@pytest.fixture
def server(
    warehouse: Warehouse, tmp_path: Path, example_bundle: PolicyBundle
) -> Iterator[ReviewServer]:
    trail = StepTrail(warehouse, rate=0.0)
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API keeps a loop in this thread
        states = pool.submit(run_conversations, example_bundle).result()
    trail.write(states, timeout=30)
    trail.close()
    with serve(warehouse, tmp_path / "data", audit_log=False) as running:
        yield running


def test_an_escalation_in_the_browser(browser: Any, server: ReviewServer, tmp_path: Path) -> None:  # noqa: F811
    page = open_page(browser, server, "bob")
    page.click("text=Clarifications")
    page.wait_for_selector("#clarifications")
    listing = page.locator("#clarifications").inner_text()
    assert "c-refused" in listing and "refused again" in listing
    assert "c-accepted" not in listing and "c-safety" not in listing  # rate 0: no sample
    page.click("text=c-refused")
    page.wait_for_selector("#clarification-form")
    assert page.locator("#request").inner_text().strip() == "Write a poem"
    assert "kind of poem" in page.locator("#refusal").inner_text()
    assert "four lines" in page.locator("#round-1").inner_text()
    assert "refused again" in page.locator("#reevaluation-1").inner_text()
    assert "Escalated: refused again" in page.locator("#escalation").inner_text()
    screenshot(page, tmp_path, "review-clarification.png")
    with page.expect_navigation():
        page.click("button:has-text('Save verdict')")  # nothing chosen: a clear error
    assert "choose Fulfil or Keep refused" in page.locator("#form-error").inner_text()
    page.check('input[name="decision"][value="fulfil"]')
    page.check('input[name="questions_ok"][value="yes"]')
    page.fill('textarea[name="note"]', "harmless: a birthday poem")
    with page.expect_navigation():
        page.click("button:has-text('Save verdict')")
    assert page.locator("#saved-note").is_visible()
    assert "bob: fulfil" in page.locator("#verdicts").inner_text()
    stored = verdicts_on(server.store, "c-refused")
    assert [(v["reviewer"], v["decision"], v["questions_ok"], v["note"]) for v in stored] == [
        ("bob", "fulfil", True, "harmless: a birthday poem")]  # fmt: skip
    assert stored[0]["escalation_reason"] == "refused_again"
    assert not page.errors


def test_the_verdict_form_refuses_a_bad_or_stale_revision(server: ReviewServer) -> None:
    """A revision the trail cannot hold (huge, negative, not a number) is a 422 asking to
    reload the item, not a 500 or a warehouse outage; a stale one (the conversation moved on
    since the page was opened) is a 422 naming both revisions, and nothing is stored."""
    bob = Reviewer(server.url, "bob", PASSWORDS["bob"])
    try:
        fields = {"id": "c-refused", "decision": "fulfil", "questions_ok": "yes"}
        for bad in ("99999999999999999999999999", "-5", "4294967296", "1.0", "", "x"):
            reply = bob.post("/clarification/verdict", revision=bad, **fields)
            assert reply.status_code == 422, (bad, reply.status_code, reply.text[:300])
            assert "reload the item" in reply.text and "unavailable" not in reply.text
        for stale in ("0", "1"):
            reply = bob.post("/clarification/verdict", revision=stale, **fields)
            assert reply.status_code == 422, reply.text[:300]
            assert "moved on after you opened it" in reply.text
            assert f"you judged revision {stale}, it is at revision 2 now" in reply.text
            assert 'name="revision" value="2"' in reply.text  # the form judges the latest now
        reply = bob.post("/clarification/verdict", revision="7", **fields)
        assert reply.status_code == 422 and "has no revision 7" in reply.text
        assert verdicts_on(server.store, "c-refused") == []
        reply = bob.post("/clarification/verdict", revision="2", **fields)
        assert reply.status_code == 303, reply.text[:300]
        assert reply.headers["location"].endswith("&saved=1")
        stored = verdicts_on(server.store, "c-refused")
        assert [(v["reviewer"], v["revision"]) for v in stored] == [("bob", 2)]
    finally:
        bob.close()
