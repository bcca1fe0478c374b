"""The review app's defences found wanting in issue 23: forwarding headers believed only from
named proxies (item 4), CSRF tokens bound to the session plus an origin check (item 5), and
login limits by name and address together with growing delays (item 8)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from review_app_harness import PASSWORDS, Reviewer, csrf_token, serve
from test_pipeline import settings

from refusal_audit.config import ConfigError
from refusal_audit.review.accounts import LoginThrottle
from refusal_audit.review.web.server import web_options
from warehouse import Warehouse

pytestmark = pytest.mark.integration


def _login_as(url: str, name: str, password: str, forwarded_for: str) -> httpx.Response:
    client = Reviewer(url, name)
    client.http.headers["X-Forwarded-For"] = forwarded_for
    return client.login(password)


def test_a_spoofed_forwarded_for_does_not_dodge_the_login_limit(
    warehouse: Warehouse, tmp_path: Path
) -> None:
    # default settings: no trusted proxy, so X-Forwarded-For from loopback names nobody
    with serve(warehouse, tmp_path / "data") as server:
        per_address = 4 * server.settings.review_login_attempts_per_minute
        statuses = [
            _login_as(server.url, f"guess{i}", "wrong-password", f"198.51.100.{i}").status_code
            for i in range(per_address + 3)
        ]
    assert statuses[:per_address] == [401] * per_address
    assert statuses[per_address:] == [429] * 3


def test_a_proxy_user_header_needs_a_named_proxy(tmp_path: Path) -> None:
    cfg = settings(data_dir=tmp_path, review_session_secret="s" * 40,
                   review_proxy_user_header="X-Forwarded-User")  # fmt: skip
    assert cfg.review_trusted_proxies == []
    with pytest.raises(ConfigError, match="review_trusted_proxies"):
        web_options(cfg)


def test_a_csrf_token_works_only_with_its_own_session_and_origin(
    warehouse: Warehouse, tmp_path: Path
) -> None:
    with serve(warehouse, tmp_path / "data") as server:
        bob = Reviewer(server.url, "bob", PASSWORDS["bob"])
        mallory = Reviewer(server.url, "mallory")  # an anonymous GET /login: a token
        # mallory's token and cookies (a cookie planted from another port of the host)
        # with bob's session cookie
        planted = dict(mallory.http.cookies.items())
        planted["refusal_review_session"] = bob.http.cookies["refusal_review_session"]
        crossed = httpx.post(
            server.url + "/queues/all/claim",
            data={"csrftoken": mallory.token},
            cookies=planted,
            headers={"Origin": server.url},
        )
        assert crossed.status_code == 403 and "CSRF" in crossed.text
        # the token issued before the login does not outlive it
        stale = Reviewer(server.url, "carol")
        before = stale.token
        assert stale.login(PASSWORDS["carol"]).status_code == 303
        assert stale.http.post("/unskip", data={"csrftoken": before}).status_code == 403
        # bob's own token, but from another site, or with no origin at all
        foreign = bob.http.post("/queues/all/claim", data={"csrftoken": bob.token},
                                headers={"Origin": "http://evil.example"})  # fmt: skip
        null = bob.http.post("/queues/all/claim", data={"csrftoken": bob.token},
                             headers={"Origin": "null"})  # fmt: skip
        del bob.http.headers["Origin"]
        bare = bob.http.post("/queues/all/claim", data={"csrftoken": bob.token})
        assert (foreign.status_code, null.status_code, bare.status_code) == (403, 403, 403)
        # the refusal names the origin check, not the (valid) token
        assert all("origin check failed" in r.text for r in (foreign, null, bare))
        assert "CSRF" not in bare.text
        assert server.service.leases.held_by("bob") is None
        # a same-origin Referer stands in for a missing Origin; then the claim works
        good = bob.http.post("/queues/all/claim", data={"csrftoken": bob.token},
                             headers={"Referer": server.url + "/"})  # fmt: skip
        assert good.status_code == 303
        assert server.service.leases.held_by("bob") is not None
        # the login form checks the origin too (login CSRF)
        eve = Reviewer(server.url, "bob")
        eve.http.headers["Origin"] = "http://evil.example"
        assert eve.login(PASSWORDS["bob"]).status_code == 403
        assert csrf_token(eve.http.get("/login").text) == eve.token  # still anonymous


def test_wrong_passwords_from_one_address_do_not_lock_the_owner_out(
    warehouse: Warehouse, tmp_path: Path
) -> None:
    with serve(warehouse, tmp_path / "data", review_trusted_proxies=["127.0.0.1"]) as server:
        attacker, owner = "203.0.113.9", "198.51.100.7"
        wrong = [_login_as(server.url, "bob", "wrong-password", attacker).status_code
                 for _ in range(5)]  # fmt: skip
        assert wrong == [401] * 5
        blocked = _login_as(server.url, "bob", PASSWORDS["bob"], attacker)
        assert blocked.status_code == 429 and "Too many login attempts" in blocked.text
        assert _login_as(server.url, "bob", PASSWORDS["bob"], owner).status_code == 303
        # the attacker's address may still try other names (its own limit is 4x higher)
        assert _login_as(server.url, "carol", PASSWORDS["carol"], attacker).status_code == 303


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_login_delays_grow_per_name_and_address_and_reset_on_success() -> None:
    clock = _Clock()
    throttle = LoginThrottle(3, clock=clock)
    for _ in range(3):
        assert throttle.attempt("Bob", "10.0.0.1") is None
        throttle.failed("Bob", "10.0.0.1")
    waits = []
    for _ in range(3):  # each further failure doubles the wait: 60 s, 120 s, 240 s
        wait = throttle.attempt("bob", "10.0.0.1")
        assert wait is not None
        waits.append(round(wait))
        clock.now += wait + 0.5
        assert throttle.attempt("bob", "10.0.0.1") is None
        throttle.failed("bob", "10.0.0.1")
    assert waits == [60, 120, 240]
    assert throttle.attempt("bob", "10.0.0.2") is None  # the owner, elsewhere
    assert throttle.attempt("carol", "10.0.0.1") is None  # another name from there
    clock.now += 10_000
    assert throttle.attempt("bob", "10.0.0.1") is None
    throttle.succeeded("bob", "10.0.0.1")
    throttle.failed("bob", "10.0.0.1")
    assert throttle.attempt("bob", "10.0.0.1") is None  # the streak started again
