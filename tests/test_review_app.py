"""The review web app over HTTP, without JavaScript (issue 10): login and refusals, CSRF,
the login rate limit, leases and claims (also under concurrency), verdicts in ClickHouse,
revisions, re-audits, and a warehouse failure during a submit."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from review_app_harness import (
    PASSWORDS,
    Reviewer,
    ReviewServer,
    add_accounts,
    audit_in_review,
    audited_at,
    example_docs,
    key_of,
    plain,
    serve,
)
from test_pipeline import settings

from refusal_audit.audit.batch import run_batch
from refusal_audit.review.accounts import deactivate_reviewer
from schemas.review import MAX_NOTE_CHARS, ReviewQueue
from warehouse import Warehouse
from warehouse.client import WarehouseError
from warehouse.review import current_verdicts, review_item_rows

pytestmark = pytest.mark.integration


@pytest.fixture
def server(warehouse: Warehouse, tmp_path: Path) -> Iterator[ReviewServer]:
    with serve(warehouse, tmp_path / "data") as running:
        yield running


def login(server: ReviewServer, name: str) -> Reviewer:
    return Reviewer(server.url, name, PASSWORDS[name])


GET_PAGES = ["/", "/history", "/admin/queues", "/item?bundle=default&log_id=x"]
POST_ACTIONS = [
    "/queues/all/claim",
    "/item/verdict",
    "/item/skip",
    "/unskip",
    "/admin/queues",
    "/admin/queues/q/delete",
]


def test_every_page_and_action_needs_a_login(server: ReviewServer) -> None:
    anonymous = Reviewer(server.url, "nobody")  # has a CSRF token, no session
    some_log_id = review_item_rows(server.store)[0]["log_id"]
    for path in [*GET_PAGES, f"/item?bundle=default&log_id={some_log_id}"]:
        reply = anonymous.http.get(path)
        assert reply.status_code == 303, path
        assert reply.headers["location"].startswith("/login?next=")
        assert some_log_id not in reply.text
    for path in POST_ACTIONS:
        reply = anonymous.post(path, verdict="agree", audited_at="2026-01-01T00:00:00+00:00",
                               bundle="default", log_id=some_log_id)  # fmt: skip
        assert reply.status_code == 401, path
    assert current_verdicts(server.store) == []
    assert server.service.leases.held_by("nobody") is None


def test_a_post_without_a_valid_csrf_token_is_refused(server: ReviewServer) -> None:
    alice = login(server, "alice")
    no_token = alice.http.post("/queues/all/claim", data={"queue": "all"})
    forged = alice.http.post("/queues/all/claim", data={"csrftoken": "forged.token"})
    assert (no_token.status_code, forged.status_code) == (403, 403)
    assert "CSRF" in no_token.text
    assert server.service.leases.held_by("alice") is None
    # a cross-site login form (no cookies at all) is refused as well
    fresh = Reviewer(server.url, "alice")
    fresh.http.cookies.clear()
    reply = fresh.http.post("/login", data={"name": "alice", "password": PASSWORDS["alice"]})
    assert reply.status_code == 403
    assert alice.claim() is not None  # with the token it works


def test_cookies_are_httponly_and_samesite(server: ReviewServer) -> None:
    bob = Reviewer(server.url, "bob")
    reply = bob.login(PASSWORDS["bob"])
    cookie = next(v for k, v in reply.headers.multi_items() if k == "set-cookie")
    assert "refusal_review_session=" in cookie
    assert "httponly" in cookie.lower() and "samesite=lax" in cookie.lower()
    page = bob.http.get("/")
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]


def test_wrong_passwords_past_the_rate_limit_are_refused(server: ReviewServer) -> None:
    mallory = Reviewer(server.url, "bob")
    statuses = [mallory.login("wrong-password").status_code for _ in range(5)]
    assert statuses == [401] * 5
    limited = mallory.login(PASSWORDS["bob"])  # even the right password, for now
    assert limited.status_code == 429
    assert "Too many login attempts" in limited.text
    assert mallory.http.get("/").status_code == 303  # not logged in
    unknown = Reviewer(server.url, "no-such-user").login("whatever-password")
    assert unknown.status_code == 401 and "Wrong name or password" in unknown.text


def test_two_reviewers_never_hold_one_item_and_verdicts_reach_clickhouse(
    server: ReviewServer,
) -> None:
    alice, bob = login(server, "alice"), login(server, "bob")
    first = alice.claim()
    assert first is not None
    assert alice.claim() == first  # one at a time: claiming again gives the held item
    second = bob.claim()
    assert second is not None and key_of(second) != key_of(first)
    # bob cannot judge the item alice holds
    held = bob.submit(plain(first), verdict="agree")
    assert held.status_code == 409 and "another reviewer holds" in held.text
    reply = alice.submit(first, verdict="agree", note="fine")
    assert reply.status_code == 303 and reply.headers["location"].startswith("/item?")
    assert key_of(reply.headers["location"]) not in (key_of(first), key_of(second))
    fix = bob.submit(
        second,
        verdict="disagree",
        corrected_category="over_refusal",
        corrected_false_positive="yes",
        corrected_clause="none",
        note="harmless request",
    )
    assert fix.status_code == 303
    stored = {(v.reviewer, v.log_id): v for v in current_verdicts(server.store)}
    assert stored[("alice", key_of(first)[1])].verdict == "agree"
    correction = stored[("bob", key_of(second)[1])]
    assert (correction.verdict, correction.corrected_category) == ("disagree", "over_refusal")
    assert correction.corrected_false_positive is True and correction.corrected_clause is None
    assert correction.source == "web" and correction.note == "harmless request"
    # the item is done (1 verdict each): bob may not add one, nor see alice's verdict
    late = bob.submit(plain(first), verdict="disagree", corrected_category="privacy",
                      corrected_false_positive="no")  # fmt: skip
    assert late.status_code == 409 and "already has its 1 verdict" in late.text
    assert "fine" not in bob.http.get(plain(first)).text
    assert "harmless request" not in bob.http.get("/history").text.split("<main>")[0]


def test_a_reviewer_revises_their_verdict_and_the_history_is_kept(server: ReviewServer) -> None:
    alice = login(server, "alice")
    item = alice.claim()
    assert item is not None
    path = plain(item)
    assert alice.submit(path, verdict="agree").status_code == 303
    revised = alice.submit(path, verdict="disagree", corrected_category="over_refusal",
                           corrected_false_positive="yes", corrected_clause="none")  # fmt: skip
    assert revised.status_code == 303
    _, log_id = key_of(item)
    (current,) = [v for v in current_verdicts(server.store) if v.log_id == log_id]
    assert current.verdict == "disagree"
    history = server.store.select(
        "SELECT verdict FROM {db:Identifier}.review_verdicts FINAL WHERE log_id = {id:String} "
        "ORDER BY submitted_at",
        {"id": log_id},
    )
    assert [r["verdict"] for r in history] == ["agree", "disagree"]


def test_bad_form_fields_get_a_message_and_keep_the_values(server: ReviewServer) -> None:
    bob = login(server, "bob")
    item = bob.claim()
    assert item is not None
    no_fp = bob.submit(item, verdict="disagree", corrected_category="over_refusal",
                       note="kept note")  # fmt: skip
    assert no_fp.status_code == 422
    assert "say whether the refusal was a false positive" in no_fp.text
    assert "kept note" in no_fp.text
    bad_category = bob.submit(item, verdict="disagree", corrected_category="made_up",
                              corrected_false_positive="no")  # fmt: skip
    assert bad_category.status_code == 422 and "not in the taxonomy" in bad_category.text
    nothing = bob.submit(item)
    assert nothing.status_code == 422 and "choose Agree or Disagree" in nothing.text
    assert current_verdicts(server.store) == []
    assert bob.submit(item, verdict="agree").status_code == 303


def test_an_expired_lease_returns_the_item(server: ReviewServer) -> None:
    alice, carol = login(server, "alice"), login(server, "carol")
    first = alice.claim()
    assert first is not None
    server.clock.advance(server.settings.review_lease_seconds + 1)
    assert carol.claim() == first  # returned to the queue, oldest first
    late = alice.submit(plain(first), verdict="agree")
    assert late.status_code == 409


def test_skip_hands_out_the_next_item_and_offers_the_skipped_again(
    server: ReviewServer,
) -> None:
    carol = login(server, "carol")
    first = carol.claim()
    assert first is not None
    page = carol.http.get(first)
    reply = carol.post_item("skip", first, audited_at=audited_at(page.text), queue="all")
    assert reply.status_code == 303 and key_of(reply.headers["location"]) != key_of(first)
    assert server.service.skipped("carol") == 1
    second = reply.headers["location"]
    assert carol.post("/unskip").status_code == 303
    assert carol.claim() == second  # she still holds the item the skip handed her
    assert carol.submit(second, verdict="agree").status_code == 303
    assert carol.claim() == first  # the skipped item is offered again


def test_queues_filter_items_and_only_admins_manage_them(server: ReviewServer) -> None:
    alice, bob = login(server, "alice"), login(server, "bob")
    assert bob.http.get("/admin/queues").status_code == 403
    denied = bob.post("/admin/queues", name="sampled", review_reason="random_sample")
    assert denied.status_code == 403
    bad = alice.post("/admin/queues", name="bad name!", review_reason="random_sample")
    assert bad.status_code == 422 and "name" in bad.text
    saved = alice.post("/admin/queues", name="sampled", review_reason="random_sample",
                       description="the random sample")  # fmt: skip
    assert saved.status_code == 303
    assert "sampled" in bob.http.get("/").text
    item = bob.claim("sampled")
    assert item is not None
    row = server.store.select(
        "SELECT review_reason FROM {db:Identifier}.current_assessments WHERE log_id = {id:String}",
        {"id": key_of(item)[1]},
    )
    assert row[0]["review_reason"] == "random_sample"
    assert alice.post("/admin/queues/sampled/delete").status_code == 303
    assert bob.post("/queues/sampled/claim").status_code == 404


def test_a_queue_of_uncertainty_sampled_items(warehouse: Warehouse, tmp_path: Path) -> None:
    from review_app_harness import EXAMPLE_LOG
    from test_pipeline import options

    run_batch(settings(review_uncertainty_band=0.3), [EXAMPLE_LOG], options(), sink=warehouse)
    with serve(warehouse, tmp_path / "data", audit_log=False) as server:
        alice, bob = login(server, "alice"), login(server, "bob")
        form = alice.http.get("/admin/queues").text
        assert '<option value="uncertainty"' in form
        saved = alice.post("/admin/queues", name="near", review_reason="uncertainty")
        assert saved.status_code == 303
        assert "review_reason: uncertainty" in alice.http.get("/").text
        item = bob.claim("near")
        assert item is not None
        page = bob.http.get(item)
        assert page.status_code == 200
        assert '<span class="chip reason">uncertainty</span>' in page.text
        row = server.store.select(
            "SELECT review_reason, requires_human_review FROM {db:Identifier}"
            ".current_assessments WHERE log_id = {id:String}",
            {"id": key_of(item)[1]},
        )
        assert (row[0]["review_reason"], row[0]["requires_human_review"]) == (
            "uncertainty", False,
        )  # fmt: skip
        assert bob.submit(item, verdict="agree").status_code == 303


def test_a_deactivated_reviewer_is_logged_out(server: ReviewServer) -> None:
    bob = login(server, "bob")
    assert bob.http.get("/").status_code == 200
    deactivate_reviewer(server.store, "bob")
    server.accounts.refresh()  # (the server re-reads accounts every 10 s by itself)
    assert bob.http.get("/").status_code == 303
    assert Reviewer(server.url, "bob").login(PASSWORDS["bob"]).status_code == 401


def test_a_warehouse_failure_during_submit_loses_nothing(server: ReviewServer) -> None:
    alice = login(server, "alice")
    item = alice.claim()
    assert item is not None
    original = server.store.insert_rows
    calls = {"n": 0}

    def failing_once(table: str, columns: object, rows: object) -> None:
        calls["n"] += 1
        if table == "review_verdicts" and calls["n"] == 1:
            raise WarehouseError("connection refused (simulated outage)")
        original(table, columns, rows)  # type: ignore[arg-type]

    server.store.insert_rows = failing_once  # type: ignore[method-assign]
    try:
        failed = alice.submit(item, verdict="agree", note="my careful note")
        assert failed.status_code == 503
        assert "Nothing was saved" in failed.text and "my careful note" in failed.text
        assert current_verdicts(server.store) == []
        assert server.service.leases.held_by("alice") is not None  # still hers
        retried = alice.submit(item, verdict="agree", note="my careful note")
        assert retried.status_code == 303
    finally:
        server.store.insert_rows = original  # type: ignore[method-assign]
    assert [v.note for v in current_verdicts(server.store)] == ["my careful note"]


def test_a_reaudit_makes_a_new_item_and_old_verdicts_stay(server: ReviewServer) -> None:
    alice = login(server, "alice")
    item = alice.claim()
    assert item is not None
    old_page = alice.http.get(item).text
    assert alice.submit(item, verdict="agree").status_code == 303
    _, log_id = key_of(item)
    # the same events audited again with another engine configuration: new assessments
    from review_app_harness import EXAMPLE_LOG
    from test_pipeline import options

    run_batch(settings(local_false_positive_threshold=0.45), [EXAMPLE_LOG], options(),
              sink=server.store)  # fmt: skip
    (old,) = [v for v in current_verdicts(server.store) if v.log_id == log_id]
    rows = server.store.select(
        "SELECT audited_at, requires_human_review, sampled_for_review "
        "FROM {db:Identifier}.current_assessments WHERE log_id = {id:String}",
        {"id": log_id},
    )
    assert rows[0]["audited_at"] > old.assessment_audited_at  # the verdict kept its assessment
    stale = alice.post_item("verdict", item, audited_at=audited_at(old_page), verdict="agree")
    assert stale.status_code == 409 and "re-audited" in stale.text
    if rows[0]["requires_human_review"] or rows[0]["sampled_for_review"]:
        page = alice.http.get(plain(item)).text
        assert "verdicts: 0 / 1" in page  # a new item, not yet judged


def test_claims_under_concurrency_give_each_item_exactly_its_verdicts(
    warehouse: Warehouse, tmp_path: Path
) -> None:
    with serve(warehouse, tmp_path / "data", review_reviews_per_item=2) as server:
        server.service.save_queue(ReviewQueue(name="code", product="code-helper"), "alice")
        expected = {
            (r["policy_bundle"], r["log_id"])
            for r in server.store.select(
                "SELECT policy_bundle, log_id FROM {db:Identifier}.current_assessments "
                "WHERE (requires_human_review OR sampled_for_review) AND product = 'code-helper'"
            )
        }
        assert len(expected) >= 10
        extra = {name: f"{name}-password-9" for name in ("dave", "erin", "frank")}
        add_accounts(server.store, extra)
        passwords = {**PASSWORDS, **extra}
        names = sorted(passwords)  # six reviewers, concurrently
        spans: dict[tuple[str, str], list[tuple[float, float, str]]] = defaultdict(list)
        errors: list[str] = []
        lock = threading.Lock()

        def work(name: str) -> None:
            client = Reviewer(server.url, name, passwords[name])
            while True:
                item = client.claim("code")
                if item is None:
                    return
                claimed = time.monotonic()
                page = client.http.get(item)
                sent = time.monotonic()
                reply = client.post_item(
                    "verdict", item, queue="", audited_at=audited_at(page.text), verdict="agree"
                )
                with lock:
                    spans[key_of(item)].append((claimed, sent, name))
                    if reply.status_code not in (303, 409):
                        errors.append(f"{reply.status_code}: {reply.text[:200]}")

        threads = [threading.Thread(target=work, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors
        # no item was held by two reviewers at once
        for key, held in spans.items():
            ordered = sorted(held)
            for (_, end, a), (start, _, b) in itertools.pairwise(ordered):
                assert end <= start, f"{key} held by {a} and {b} at once"
        verdicts = defaultdict(set)
        for v in current_verdicts(server.store):
            verdicts[(v.policy_bundle, v.log_id)].add(v.reviewer)
        assert set(verdicts) == expected  # none lost, none outside the queue
        wrong = {key: sorted(who) for key, who in verdicts.items() if len(who) != 2}
        assert wrong == {}, (wrong, {k: spans.get(k) for k in wrong})


@pytest.mark.parametrize(("trusted", "logged_in"), [("127.0.0.1", True), ("10.9.9.9", False)])
def test_the_proxy_header_is_believed_only_from_trusted_addresses(
    warehouse: Warehouse, tmp_path: Path, trusted: str, logged_in: bool
) -> None:
    with serve(
        warehouse,
        tmp_path / "data",
        review_proxy_user_header="X-Forwarded-User",
        review_trusted_proxies=[trusted],
    ) as server:
        client = Reviewer(server.url, "bob")
        # a forwarded address never makes a peer trusted (uvicorn's proxy headers are off)
        spoofed = {"X-Forwarded-User": "bob", "X-Forwarded-For": trusted}
        page = client.http.get("/", headers=spoofed)
        assert (page.status_code == 200) is logged_in
        if logged_in:
            assert "bob (reviewer)" in page.text
            unknown = client.http.get("/", headers={"X-Forwarded-User": "mallory"})
            assert unknown.status_code == 303  # the header must name an account
            # no session cookie with proxy logins, yet a POST still needs the CSRF token
            bare = httpx.post(server.url + "/queues/all/claim", data={"queue": "all"},
                              headers={"X-Forwarded-User": "bob"})  # fmt: skip
            assert bare.status_code == 403
            with_bearer = client.http.post(
                "/queues/all/claim", data={"queue": "all"},
                headers={"X-Forwarded-User": "bob", "Authorization": "Bearer x"},
            )  # fmt: skip
            assert with_bearer.status_code == 403
            assert server.service.leases.held_by("bob") is None
            good = client.http.post("/queues/all/claim", data={"csrftoken": client.token},
                                    headers={"X-Forwarded-User": "bob"})  # fmt: skip
            assert good.status_code == 303
        else:
            assert page.headers["location"].startswith("/login")


def test_add_reviewer_reads_the_password_from_stdin_and_stores_an_argon2id_hash(
    cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from refusal_audit.cli import app
    from refusal_audit.config import load_settings
    from warehouse.review import reviewer_accounts

    runner = CliRunner()
    made = runner.invoke(app, ["review", "add-reviewer", "dana", "--role", "admin"],
                         input="correct horse battery\n", env=cli_env)  # fmt: skip
    assert made.exit_code == 0, made.output
    short = runner.invoke(app, ["review", "add-reviewer", "eve"], input="short\n", env=cli_env)
    assert short.exit_code == 2 and "at least 8 characters" in short.output
    bad_role = runner.invoke(app, ["review", "add-reviewer", "eve", "--role", "root"],
                             input="long enough pw\n", env=cli_env)  # fmt: skip
    assert bad_role.exit_code == 2
    listed = runner.invoke(app, ["review", "reviewers"], env=cli_env)
    assert "dana" in listed.output and "admin" in listed.output and "eve" not in listed.output
    assert "$argon2" not in listed.output
    for key, value in cli_env.items():
        monkeypatch.setenv(key, value)
    store = Warehouse.open(load_settings())
    account = reviewer_accounts(store)["dana"]
    store.close()
    assert account.password_hash.startswith("$argon2id$")
    assert "correct horse" not in account.password_hash


def test_odd_requests_are_refused_cleanly(server: ReviewServer) -> None:
    bob = login(server, "bob")
    too_big = bob.post("/queues/all/claim", padding="x" * 300_000)
    assert too_big.status_code == 413
    multipart = bob.http.post("/queues/all/claim", files={"f": ("a.txt", b"x")},
                              data={"csrftoken": bob.token})  # fmt: skip
    assert multipart.status_code == 415
    not_utf8 = bob.http.post(
        "/queues/all/claim", content=b"csrftoken=" + bob.token.encode() + b"&x=\xff\xfe",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )  # fmt: skip
    assert not_utf8.status_code == 400
    # the CSRF token lives in the session: the one cookie a login page sets is HttpOnly
    cookies = httpx.get(server.url + "/login").headers.get_list("set-cookie")
    assert len(cookies) == 1 and "refusal_review_session=" in cookies[0]
    assert "httponly" in cookies[0].lower()
    # skipping an item one does not hold
    row = review_item_rows(server.store)[0]
    made_up = bob.post("/item/skip", bundle="default", log_id=row["log_id"],
                       audited_at=row["audited_at"].isoformat(), queue="all")  # fmt: skip
    assert made_up.status_code == 409 and server.service.skipped("bob") == 0
    item = bob.claim()
    assert item is not None
    nul = bob.submit(item, verdict="agree", note="a\x00b")
    long = bob.submit(item, verdict="agree", note="n" * 4001)
    assert (nul.status_code, long.status_code) == (422, 422)
    assert "not text" in nul.text and "at most 4000 characters" in long.text
    assert f'maxlength="{MAX_NOTE_CHARS}"' in long.text  # the form holds the same limit
    assert "Value error" not in long.text.split('id="form-error"')[1].split("</p>")[0]
    assert current_verdicts(server.store) == []


def test_logout_ends_a_copied_session(server: ReviewServer) -> None:
    bob = login(server, "bob")
    copied = dict(bob.http.cookies)
    assert bob.post("/logout").status_code == 303
    thief = httpx.Client(base_url=server.url, cookies=copied, follow_redirects=False)
    assert thief.get("/").status_code == 303
    assert login(server, "bob").http.get("/").status_code == 200  # logging in again works


def test_log_ids_with_slashes_and_dots_can_be_reviewed(
    warehouse: Warehouse, tmp_path: Path
) -> None:
    docs = example_docs(12)
    shapes = ["..", "a/b/../c", "?#%2F x", "/lead", "../../etc/passwd", "é/ü"]
    for i, doc in enumerate(docs):
        doc["log_id"] = f"{shapes[i % len(shapes)]}{'' if i < len(shapes) else i}"
    audit_in_review(warehouse, docs, tmp_path / "odd.jsonl")
    with serve(warehouse, tmp_path / "data", audit_log=False) as server:
        bob = login(server, "bob")
        seen = set()
        while (item := bob.claim()) is not None:
            assert bob.http.get(item).status_code == 200
            assert bob.submit(item, verdict="agree").status_code == 303
            seen.add(key_of(item)[1])
        assessed = {r["log_id"] for r in review_item_rows(server.store)}
        assert seen == assessed and len(seen) >= 6 and ".." in {x[:2] for x in seen}
        assert any("/" in x for x in seen)
        assert {v.log_id for v in current_verdicts(server.store)} == assessed


# a right-to-left override, a zero-width space and a tag character in logged text
RLO_REQUEST = "Ignore this \u202eAFTER-TEXT\u200b and \U000e0041 that"


def bidi_docs() -> list[dict[str, Any]]:
    """Three example events whose request, model and log id carry invisible characters."""
    docs = example_docs(3)
    for i, doc in enumerate(docs):
        doc.update(log_id=f"rlo-\u202e{i}", request=f"{RLO_REQUEST} {doc['request']}",
                   model=f"acme\u202e-{i}")  # fmt: skip
    return docs


def test_bidi_controls_are_isolated_and_shown_as_markers(
    warehouse: Warehouse, tmp_path: Path
) -> None:
    """Logged text cannot reorder the page (U+202E) or hide characters: it is isolated in
    <bdi> and every invisible character is a visible marker; the hidden form fields keep the
    exact log id, so the item can still be judged (issue 23, item 7)."""
    audit_in_review(warehouse, bidi_docs(), tmp_path / "bidi.jsonl")
    with serve(warehouse, tmp_path / "data", audit_log=False) as server:
        bob = login(server, "bob")
        item = bob.claim()
        assert item is not None and key_of(item)[1].startswith("rlo-\u202e")
        page = bob.http.get(item).text
        body = page.split('name="log_id" value=')[0]  # the page before the hidden fields
        assert not any(ch in body for ch in "\u202e\u200b\U000e0041"), "raw invisible char"
        marker = '<span class="invisible-char" title="RIGHT-TO-LEFT OVERRIDE">⟨U+202E⟩</span>'
        assert f'<pre class="text" id="request"><bdi>Ignore this {marker}AFTER-TEXT' in page
        assert f"<h1>Item <code><bdi>rlo-{marker}" in page
        assert f"model: <bdi>acme{marker}-" in page
        assert "⟨U+200B⟩" in page and "⟨U+E0041⟩" in page
        assert "<title>rlo-⟨U+202E⟩" in page  # the title takes no markup: the marker as text
        assert f'name="log_id" value="{key_of(item)[1]}"' in page  # exact, for the submit
        assert bob.submit(item, verdict="agree").status_code == 303
        assert [v.log_id for v in current_verdicts(server.store)] == [key_of(item)[1]]
        history = bob.http.get("/history").text
        assert f"<bdi>rlo-{marker}" in history and "\u202e" not in history
