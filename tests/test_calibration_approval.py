"""The approval gate of refusal-style calibration variants in the review app (issue 13): the
rules (``processors.calibration.approval``), the queue and run pages and the decision form
over HTTP (roles, self-approval, failing variants, notes, CSRF, login, double submits, a
warehouse outage), the ``approver`` role on the command line, and the whole flow in a real
Chromium."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from markupsafe import escape
from review_app_harness import PASSWORDS, Reviewer, ReviewServer, serve
from test_review_browser import browser, screenshot  # noqa: F401 (fixture)

from processors.calibration.approval import ApprovalError, check_decision, current_decisions
from processors.calibration.local_variants import LocalVariantEngine
from processors.calibration.run import apply_suite, calibrate
from processors.engines.local import LocalEngine
from refusal_audit.calibration.pages import run_url
from refusal_audit.review.accounts import add_reviewer
from schemas.calibration import (
    CalibrationEscalation,
    CalibrationRequest,
    CalibrationRun,
    SuiteVerdict,
)
from schemas.policy import PolicyBundle
from warehouse import Warehouse
from warehouse.calibration import approval_items, decision_rows, insert_runs
from warehouse.client import WarehouseError

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
APPROVERS = {"dana": "dana-password-44", "erin": "erin-password-55", "Dana": "dana-upper-666"}
ALL_PASSWORDS = {**PASSWORDS, **APPROVERS}
GOOD, MIXED, ODD, ANON = "cal-good", "cal-mixed", "team/cal 3", "cal-anon"
FAILING_STYLE = "empathetic_warm"


def make_run(
    bundle: PolicyBundle,
    run_id: str,
    clause: str,
    started_by: str | None,
    at: datetime,
    failing: str | None = None,
    verified: bool = True,
) -> CalibrationRun:
    """A run of the ``local`` engine on the example bundle, its starter verified by password
    as ``calibrate run`` does (unless ``verified`` is false); with ``failing``, the team's
    suite failed that style's variant (so the run is ``failed_checks``)."""
    request = CalibrationRequest(refusal="I'm sorry, I can't help with that.", clause_id=clause,
                                 log_id=f"log-{run_id}", policy_bundle="wren")  # fmt: skip
    run = asyncio.run(
        calibrate(request, {"wren": bundle}, LocalVariantEngine(LocalEngine()), run_id=run_id,
                  created_at=at, started_by=started_by)
    )  # fmt: skip
    if started_by is not None and verified:
        run = run.model_copy(update={"starter_verified_by": "password"})
    if failing is None:
        return run
    answers = [
        (SuiteVerdict(verdict="fail", reasons=["tone"], detail="too familiar for this clause"),
         None) if v.style == failing else (SuiteVerdict(verdict="pass"), None)
        for v in run.validations
    ]  # fmt: skip
    return apply_suite(run, answers)


def make_runs(bundle: PolicyBundle) -> list[CalibrationRun]:
    return [
        make_run(bundle, GOOD, "AUP-2.2", "dana", T0),
        make_run(bundle, MIXED, "AUP-2.3", "dana", T0 + timedelta(hours=1), FAILING_STYLE),
        make_run(bundle, ODD, "AUP-2.2", "erin", T0 + timedelta(hours=2)),
        make_run(bundle, ANON, "AUP-2.2", None, T0 + timedelta(hours=3)),
    ]


@pytest.fixture
def runs(example_bundle: PolicyBundle) -> dict[str, CalibrationRun]:
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API keeps a loop in this thread
        made = pool.submit(make_runs, example_bundle).result()
    return {r.calibration_run_id: r for r in made}


@pytest.fixture
def server(
    warehouse: Warehouse, tmp_path: Path, runs: dict[str, CalibrationRun]
) -> Iterator[ReviewServer]:
    assert runs[MIXED].status == "failed_checks" and runs[GOOD].status == "passed"
    insert_runs(warehouse, list(runs.values()), "test", T0)
    for name, password in APPROVERS.items():
        add_reviewer(warehouse, name, "approver", password)
    with serve(warehouse, tmp_path / "data", audit_log=False) as running:
        yield running


def login(server: ReviewServer, name: str) -> Reviewer:
    return Reviewer(server.url, name, ALL_PASSWORDS[name])


def nonce_of(html: str, style: str) -> str:
    """The nonce of ``style``'s decision form on a run page."""
    match = re.search(
        rf'name="style" value="{re.escape(style)}">\s*<input type="hidden" name="nonce" '
        r'value="([^"]+)"',
        html,
    )
    assert match, f"no decision form for {style}"
    return match.group(1)


def decide(
    who: Reviewer, run_id: str, style: str, decision: str, note: str, nonce: str | None = None
) -> Any:
    """GET the run page (for the form's nonce, unless given), then POST the decision."""
    if nonce is None:
        page = who.http.get(run_url(run_id))
        assert page.status_code == 200, page.text
        nonce = nonce_of(page.text, style)
    return who.post("/calibration/decision", run_id=run_id, style=style, decision=decision,
                    note=note, nonce=nonce)  # fmt: skip


def forms_on(html: str) -> int:
    return html.count('class="decision-form"')


# -- the rules, pure ----------------------------------------------------------------------------
def test_the_rules(runs: dict[str, CalibrationRun]) -> None:
    good, mixed, anon = runs[GOOD], runs[MIXED], runs[ANON]

    def code(run: CalibrationRun, style: str, user: str, role: str, decision: str,
             note: str) -> str:  # fmt: skip
        with pytest.raises(ApprovalError) as caught:
            check_decision(run, style, user, role, decision, note)
        return caught.value.code

    ok = check_decision(good, "minimal_direct", "erin", "approver", "approve", " ok ")
    assert ok == "approve"
    assert code(good, "minimal_direct", "erin", "reviewer", "approve", "ok") == "not_approver"
    assert code(good, "minimal_direct", "erin", "admin", "approve", "ok") == "not_approver"
    assert code(good, "minimal_direct", "dana", "approver", "approve", "ok") == "own_run"
    # the same person under another spelling of the name is still the run's starter
    assert code(good, "minimal_direct", "Dana", "approver", "reject", "ok") == "own_run"
    assert code(anon, "minimal_direct", "erin", "approver", "approve", "ok") == "unknown_starter"
    # a starter named but not verified (typed on the command line, sent on Kafka) could be a
    # colleague's name typed by the approver: nobody decides on such a run
    claimed = good.model_copy(update={"starter_verified_by": None})
    assert code(claimed, "minimal_direct", "erin", "approver", "approve", "ok") == (
        "unverified_starter"
    )
    assert code(mixed, FAILING_STYLE, "erin", "approver", "approve", "ok") == "failed_checks"
    assert check_decision(mixed, FAILING_STYLE, "erin", "approver", "reject", "close") == "reject"
    assert code(good, "no_such_style", "erin", "approver", "approve", "ok") == "unknown_style"
    assert code(good, "minimal_direct", "erin", "approver", "maybe", "ok") == "bad_decision"
    assert code(good, "minimal_direct", "erin", "approver", "approve", " \n ") == "note_required"
    assert code(good, "minimal_direct", "erin", "approver", "reject", "x" * 2001) == "note_too_long"
    # a starter that names no account (a look-alike of the approver's own name, Cyrillic a)
    lookalike = good.model_copy(update={"started_by": "erin".replace("e", "\u0435")})
    with pytest.raises(ApprovalError) as caught:
        check_decision(lookalike, "minimal_direct", "erin", "approver", "approve", "ok",
                       accounts=["dana", "erin"])  # fmt: skip
    assert caught.value.code == "unknown_starter"
    assert check_decision(good, "minimal_direct", "erin", "approver", "approve", "ok",
                          accounts=["dana", "erin"]) == "approve"  # fmt: skip
    # an escalated run (here: its last answer valid, one variant failing) is never decided on
    escalated = mixed.model_copy(update={
        "status": "escalated",
        "escalation": CalibrationEscalation(reason="regression", errors=["failed checks"]),
    })  # fmt: skip
    assert code(escalated, "minimal_direct", "erin", "approver", "approve", "ok") == "escalated"
    rows = [
        {"decision_id": i, "calibration_run_id": GOOD, "style": "minimal_direct",
         "decision": d, "approver": "erin", "note": "n", "decided_at": T0 + timedelta(minutes=m)}
        for i, d, m in (("b", "reject", 2), ("a", "approve", 1))
    ]  # fmt: skip
    assert current_decisions(rows)[(GOOD, "minimal_direct")].decision == "reject"


# -- the pages over HTTP ------------------------------------------------------------------------
def test_the_queue_lists_passing_variants_by_run_pending_first(
    server: ReviewServer, runs: dict[str, CalibrationRun]
) -> None:
    bob = login(server, "bob")  # a plain reviewer may look
    page = bob.http.get("/calibration")
    assert page.status_code == 200
    html = page.text
    assert 'href="/calibration">Calibration</a>' in html  # the nav link
    order = [m for m in re.findall(r'data-run="([^"]+)"', html)]
    assert order == [GOOD, MIXED, ODD, ANON]  # all pending: oldest run first
    good = runs[GOOD]
    assert good.output is not None
    for variant in good.output.variants:
        assert str(escape(variant.response_text)) in html
        assert str(escape(variant.ux_impact_note)) in html
    assert "Empathetic and warm" in html and "started by: dana" in html
    assert "AUP-2.2" in html and "Weapons and weapons of mass harm" in html
    mixed_group = html.split(f'data-run="{MIXED}"')[1].split("</section>")[0]
    assert f'data-style="{FAILING_STYLE}"' not in mixed_group  # failing: never in the queue
    assert mixed_group.count("data-style=") == 5
    assert f'href="{run_url(ODD)}"' in html and "team%2Fcal%203" in run_url(ODD)
    filtered = bob.http.get("/calibration", params={"clause": "AUP-2.3"}).text
    assert re.findall(r'data-run="([^"]+)"', filtered) == [MIXED]
    none = bob.http.get("/calibration", params={"clause": "AUP-9.9"}).text
    assert "No variant is waiting for approval for clause" in none
    # decide every variant of the oldest run: it moves behind the runs still pending
    erin = login(server, "erin")
    for style in good.passing_styles():
        assert decide(erin, GOOD, style, "approve", "fine").status_code == 303
    after = re.findall(r'data-run="([^"]+)"', bob.http.get("/calibration").text)
    assert after == [MIXED, ODD, ANON, GOOD]
    assert bob.http.get(run_url(ODD)).status_code == 200  # a run id with a slash and a space
    missing = bob.http.get(run_url("no-such-run"))
    assert missing.status_code == 404 and "No calibration run" in missing.text


def test_not_logged_in_is_sent_to_the_login(server: ReviewServer) -> None:
    anonymous = Reviewer(server.url, "nobody")  # a CSRF token, no session
    for path in ("/calibration", run_url(GOOD)):
        reply = anonymous.http.get(path)
        assert reply.status_code == 303
        assert reply.headers["location"] == f"/login?next={quote(path, safe='/')}"
    posted = anonymous.post("/calibration/decision", run_id=GOOD, style="minimal_direct",
                            decision="approve", note="sneaky", nonce="a" * 22)  # fmt: skip
    assert posted.status_code == 401
    assert decision_rows(server.store) == []


def test_a_decision_without_the_csrf_token_is_refused(server: ReviewServer) -> None:
    erin = login(server, "erin")
    page = erin.http.get(run_url(GOOD)).text
    fields = {"run_id": GOOD, "style": "minimal_direct", "decision": "approve", "note": "ok",
              "nonce": nonce_of(page, "minimal_direct")}  # fmt: skip
    missing = erin.http.post("/calibration/decision", data=fields)
    forged = erin.http.post("/calibration/decision", data={**fields, "csrftoken": "forged.x"})
    assert (missing.status_code, forged.status_code) == (403, 403)
    assert "CSRF" in missing.text
    assert decision_rows(server.store) == []
    assert erin.post("/calibration/decision", **fields).status_code == 303  # with it: saved


def test_reviewers_and_admins_see_no_forms_and_cannot_decide(server: ReviewServer) -> None:
    for name, role in (("bob", "reviewer"), ("alice", "admin")):
        who = login(server, name)
        page = who.http.get(run_url(GOOD))
        assert page.status_code == 200 and forms_on(page.text) == 0
        assert f"You are logged in as a{'n' if role == 'admin' else ''} {role}" in page.text
        assert "only an approver may approve or reject variants" in page.text
        reply = decide(who, GOOD, "minimal_direct", "approve", "looks fine", nonce="b" * 22)
        assert reply.status_code == 403
        assert "only an approver may approve or reject variants" in reply.text
        empty = decide(who, GOOD, "minimal_direct", "approve", "", nonce="b" * 22)
        assert empty.status_code == 403  # the role is checked before the form
    assert decision_rows(server.store) == []


def test_the_runs_creator_cannot_decide_on_it(server: ReviewServer) -> None:
    dana = login(server, "dana")  # an approver, who started GOOD and MIXED
    page = dana.http.get(run_url(GOOD)).text
    assert forms_on(page) == 0
    assert "You started this run: another approver must decide." in page
    reply = decide(dana, GOOD, "minimal_direct", "approve", "mine is great", nonce="c" * 22)
    assert reply.status_code == 403 and "you started this run" in reply.text
    # another account spelled like the starter is refused too
    upper = login(server, "Dana")
    reply = decide(upper, GOOD, "minimal_direct", "approve", "same person", nonce="d" * 22)
    assert reply.status_code == 403 and "you started this run" in reply.text
    assert decision_rows(server.store) == []
    # dana may decide on a run somebody else started
    other = dana.http.get(run_url(ODD)).text
    assert forms_on(other) == 6
    assert decide(dana, ODD, "educational", "reject", "too long").status_code == 303


def test_a_run_without_a_starter_cannot_be_decided(server: ReviewServer) -> None:
    erin = login(server, "erin")
    page = erin.http.get(run_url(ANON)).text
    assert forms_on(page) == 0 and "self-approval cannot be ruled out" in page
    reply = decide(erin, ANON, "minimal_direct", "approve", "ok", nonce="e" * 22)
    assert reply.status_code == 403
    assert decision_rows(server.store) == []


def test_a_run_whose_starter_was_not_verified_cannot_be_decided(
    server: ReviewServer, example_bundle: PolicyBundle
) -> None:
    """The issue's attack: approver erin starts a run naming her colleague bob as the starter
    (the old ``--started-by bob``, not verified), then tries to approve it herself."""
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API keeps a loop in this thread
        claimed = pool.submit(make_run, example_bundle, "cal-claimed", "AUP-2.2", "bob",
                              T0 + timedelta(hours=4), None, False).result()  # fmt: skip
    insert_runs(server.store, [claimed], "test", T0)
    erin = login(server, "erin")
    page = erin.http.get(run_url("cal-claimed")).text
    assert forms_on(page) == 0 and "was not verified" in page
    assert "starter not verified: no one can decide" in page
    queue = erin.http.get("/calibration").text.split('data-run="cal-claimed"')[1]
    assert "starter not verified: no one can decide" in queue.split("</section>")[0]
    reply = decide(erin, "cal-claimed", "minimal_direct", "approve", "bob's, fine", "f" * 22)
    assert reply.status_code == 403 and "was not verified" in reply.text
    assert decision_rows(server.store) == []
    good = erin.http.get(run_url(GOOD)).text  # a verified starter (dana): forms as before
    assert forms_on(good) == 6 and "starter verified by password" in good


def test_an_approver_approves_and_rejects_and_the_newest_counts(server: ReviewServer) -> None:
    erin = login(server, "erin")
    page = erin.http.get(run_url(GOOD))
    assert page.status_code == 200 and forms_on(page.text) == 6
    assert "Decision log" in page.text and "No decision yet." in page.text
    first = decide(erin, GOOD, "minimal_direct", "approve", "  short and clear  ")
    assert first.status_code == 303
    target = run_url(GOOD) + "?saved=minimal_direct#variant-minimal_direct"
    assert first.headers["location"] == target
    second = decide(erin, GOOD, "minimal_direct", "reject", "on reflection: too curt")
    assert second.status_code == 303
    assert decide(erin, GOOD, "policy_citing", "approve", "names the clause").status_code == 303
    rows = decision_rows(server.store, calibration_run_id=GOOD)
    assert [(r["style"], r["decision"], r["approver"], r["note"]) for r in rows] == [
        ("minimal_direct", "approve", "erin", "short and clear"),
        ("minimal_direct", "reject", "erin", "on reflection: too curt"),
        ("policy_citing", "approve", "erin", "names the clause"),
    ]
    assert rows[0]["policy_bundle"] == "wren" and rows[0]["clause_id"] == "AUP-2.2"
    items = {(i["calibration_run_id"], i["style"]): i for i in approval_items(server.store)}
    minimal = items[(GOOD, "minimal_direct")]
    assert (minimal["decision"], minimal["decisions"], minimal["approver"]) == ("reject", 2, "erin")
    assert items[(GOOD, "policy_citing")]["decision"] == "approve"
    assert items[(GOOD, "educational")]["decision"] is None
    shown = erin.http.get(run_url(GOOD) + "?saved=policy_citing").text
    assert "Saved your decision on Policy-citing." in shown
    log = shown.split('id="decision-log"')[1].split("</table>")[0]
    notes = re.findall(r"<td>(names the clause|on reflection: too curt|short and clear)</td>", log)
    # newest first
    assert notes == ["names the clause", "on reflection: too curt", "short and clear"]
    queue = erin.http.get("/calibration").text
    good_group = queue.split(f'data-run="{GOOD}"')[1].split("</section>")[0]
    assert "rejected" in good_group and "2 decisions" in good_group and "4 pending" in good_group


def test_a_failing_variant_is_shown_and_can_never_be_approved(
    server: ReviewServer, runs: dict[str, CalibrationRun]
) -> None:
    erin = login(server, "erin")
    page = erin.http.get(run_url(MIXED)).text
    assert forms_on(page) == 5  # one per passing variant
    failing = page.split(f'id="variant-{FAILING_STYLE}"')[1].split("</section>")[0]
    assert "can never be approved" in failing and "suite_failed" in failing
    assert "tone; too familiar for this clause" in failing
    assert "decision-form" not in failing
    mixed = runs[MIXED]
    assert mixed.output is not None
    assert str(escape(mixed.output.request_summary)) in page
    assert str(escape(mixed.output.policy_applied)) in page
    assert "engine: local · model templates" in page and "prompt none" in page
    reply = decide(erin, MIXED, FAILING_STYLE, "approve", "I like it", nonce="f" * 22)
    assert reply.status_code == 403 and "can never be approved" in reply.text
    assert decision_rows(server.store) == []


def test_form_errors_keep_what_was_typed(server: ReviewServer) -> None:
    erin = login(server, "erin")
    empty = decide(erin, GOOD, "minimal_direct", "approve", "   ")
    assert empty.status_code == 422
    assert "a note is required: say why." in empty.text and 'id="form-error"' in empty.text
    assert forms_on(empty.text) == 6  # the page again, with its forms
    long_note = "too long " * 250
    too_long = decide(erin, GOOD, "educational", "reject", long_note)
    assert too_long.status_code == 422 and "longer than 2000 characters" in too_long.text
    assert long_note in too_long.text  # kept in the textarea
    nothing = decide(erin, GOOD, "educational", "", "kept words")
    assert nothing.status_code == 422 and "decision must be one of approve, reject" in nothing.text
    assert "kept words" in nothing.text
    control = decide(erin, GOOD, "educational", "reject", "bad\x00byte")
    assert control.status_code == 422 and "not text" in control.text
    no_nonce = erin.post("/calibration/decision", run_id=GOOD, style="educational",
                         decision="reject", note="fine")  # fmt: skip
    assert no_nonce.status_code == 422 and "reload the run" in no_nonce.text
    unknown = decide(erin, GOOD, "no_such_style", "reject", "x", nonce="g" * 22)
    assert unknown.status_code == 404
    assert decision_rows(server.store) == []


def test_a_double_submit_is_one_decision(server: ReviewServer) -> None:
    erin = login(server, "erin")
    nonce = nonce_of(erin.http.get(run_url(GOOD)).text, "educational")
    replies = [decide(erin, GOOD, "educational", "approve", "good tone", nonce=nonce)
               for _ in range(3)]  # fmt: skip
    assert [r.status_code for r in replies] == [303, 303, 303]
    assert len(decision_rows(server.store)) == 1
    # a new form (a new nonce) is a new decision, even with the same words
    assert decide(erin, GOOD, "educational", "approve", "good tone").status_code == 303
    assert len(decision_rows(server.store)) == 2


def test_a_warehouse_failure_keeps_the_note(server: ReviewServer) -> None:
    erin = login(server, "erin")
    nonce = nonce_of(erin.http.get(run_url(GOOD)).text, "alternative_offering")
    original = server.store.insert_rows
    calls = {"n": 0}

    def failing_once(table: str, columns: object, rows: object) -> None:
        if table == "calibration_decisions":
            calls["n"] += 1
            if calls["n"] == 1:
                raise WarehouseError("connection refused (simulated outage)")
        original(table, columns, rows)  # type: ignore[arg-type]

    server.store.insert_rows = failing_once  # type: ignore[method-assign]
    try:
        failed = decide(erin, GOOD, "alternative_offering", "approve", "my careful note",
                        nonce=nonce)  # fmt: skip
        assert failed.status_code == 503
        assert "Nothing was saved" in failed.text and "my careful note" in failed.text
        assert f'name="nonce" value="{nonce}"' in failed.text  # the resend is the same form
        assert decision_rows(server.store) == []
        resent = decide(erin, GOOD, "alternative_offering", "approve", "my careful note",
                        nonce=nonce)  # fmt: skip
        assert resent.status_code == 303
    finally:
        server.store.insert_rows = original  # type: ignore[method-assign]
    assert [r["note"] for r in decision_rows(server.store)] == ["my careful note"]


def test_add_reviewer_accepts_the_approver_role(
    cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from refusal_audit.cli import app
    from refusal_audit.config import load_settings
    from warehouse.review import reviewer_accounts

    runner = CliRunner()
    made = runner.invoke(app, ["review", "add-reviewer", "pat", "--role", "approver"],
                         input="approver password 1\n", env=cli_env)  # fmt: skip
    assert made.exit_code == 0, made.output
    assert "reviewer pat saved (role approver)" in made.output
    bad = runner.invoke(app, ["review", "add-reviewer", "eve", "--role", "approvers"],
                        input="long enough pw\n", env=cli_env)  # fmt: skip
    assert bad.exit_code == 2 and "use reviewer, approver or admin" in bad.output
    for key, value in cli_env.items():
        monkeypatch.setenv(key, value)
    store = Warehouse.open(load_settings())
    accounts = reviewer_accounts(store)
    store.close()
    assert accounts["pat"].role == "approver" and "eve" not in accounts


# -- in the browser -----------------------------------------------------------------------------
def open_as(browser: Any, server: ReviewServer, name: str) -> Any:  # noqa: F811
    """A new browser context logged in as ``name``."""
    page = browser.new_context(viewport={"width": 1366, "height": 900}).new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    page.goto(server.url + "/calibration")
    assert "/login" in page.url
    page.fill("input[name=name]", name)
    page.fill("input[name=password]", ALL_PASSWORDS[name])
    page.press("input[name=password]", "Enter")
    page.wait_for_url(server.url + "/calibration")
    return page


def test_the_approval_flow_in_the_browser(
    browser: Any,  # noqa: F811
    server: ReviewServer,
    tmp_path: Path,
) -> None:
    erin = open_as(browser, server, "erin")
    erin.goto(server.url + "/")
    erin.click("nav >> text=Calibration")
    erin.wait_for_selector("#approval-queue")
    assert "5 pending" in erin.locator(f'[data-run="{MIXED}"]').inner_text()
    erin.click(f'[data-run="{MIXED}"] h2 a')
    erin.wait_for_selector(".decision-form")
    assert erin.locator(".decision-form").count() == 5  # none for the failing variant
    failing = erin.locator(f"#variant-{FAILING_STYLE}").inner_text()
    assert "can never be approved" in failing and "suite_failed" in failing
    minimal = erin.locator("#variant-minimal_direct")
    minimal.locator("textarea[name=note]").fill("short, plain and polite")
    with erin.expect_navigation():
        minimal.locator("button[value=approve]").click()
    assert "Minimal and direct" in erin.locator("#saved-note").inner_text()
    offer = erin.locator("#variant-alternative_offering")
    offer.locator("textarea[name=note]").fill("the offer reads as a brush-off here")
    with erin.expect_navigation():
        offer.locator("button[value=reject]").click()
    log = erin.locator("#decision-log").inner_text()
    assert "the offer reads as a brush-off here" in log and "short, plain and polite" in log
    assert log.index("brush-off") < log.index("short, plain")  # newest first
    assert "approved" in erin.locator("#variant-minimal_direct .current").inner_text()
    assert "rejected" in erin.locator("#variant-alternative_offering .current").inner_text()
    erin.locator("#variant-educational textarea[name=note]").fill("clear about the rule")
    screenshot(erin, tmp_path, "calibration-approval.png")
    items = {i["style"]: i["decision"] for i in approval_items(server.store) if
             i["calibration_run_id"] == MIXED}  # fmt: skip
    assert (items["minimal_direct"], items["alternative_offering"]) == ("approve", "reject")
    assert items["educational"] is None and FAILING_STYLE not in items
    assert not erin.errors

    dana = open_as(browser, server, "dana")  # an approver, but she started this run
    dana.goto(server.url + run_url(MIXED))
    assert dana.locator(".decision-form").count() == 0
    assert "You started this run" in dana.locator("#no-forms").inner_text()
    assert "brush-off" in dana.locator("#decision-log").inner_text()

    bob = open_as(browser, server, "bob")
    bob.click(f'[data-run="{GOOD}"] h2 a')
    bob.wait_for_selector("#decision-log")
    assert bob.locator(".decision-form").count() == 0
    assert "only an approver" in bob.locator("#no-forms").inner_text()
    assert not dana.errors and not bob.errors
