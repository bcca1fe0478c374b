"""A real review server for tests: the example log audited into a fresh warehouse database,
three accounts, and the review app served by uvicorn on 127.0.0.1 (an ephemeral port) in a
thread of the test process (which owns the session's chDB store)."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import uvicorn
from test_pipeline import audit, settings

from refusal_audit.config import Settings
from refusal_audit.review.accounts import AccountBook, add_reviewer
from refusal_audit.review.service import ReviewService
from refusal_audit.review.web.server import build_app
from warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"
PASSWORDS = {"alice": "alice-password-1", "bob": "bob-password-22", "carol": "carol-password-3"}
ROLES = {"alice": "admin", "bob": "reviewer", "carol": "reviewer"}


class FakeClock:
    """A monotonic clock the test moves (lease expiry without waiting)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


@dataclass
class ReviewServer:
    url: str
    service: ReviewService
    accounts: AccountBook
    store: Warehouse
    settings: Settings
    clock: FakeClock


def add_accounts(store: Warehouse, names: dict[str, str] = PASSWORDS) -> None:
    for name, password in names.items():
        add_reviewer(store, name, ROLES.get(name, "reviewer"), password)  # type: ignore[arg-type]


def example_docs(n: int) -> list[dict[str, Any]]:
    """The first ``n`` events of the example log as dicts (to change and audit)."""
    import orjson

    return [orjson.loads(line) for line in EXAMPLE_LOG.read_text().splitlines()[:n]]


def audit_in_review(store: Warehouse, docs: list[dict[str, Any]], path: Path) -> None:
    """Write ``docs`` to ``path`` as JSON Lines, audit them into ``store`` and put every
    assessment in review (``requires_human_review``), whatever the engine decided."""
    import orjson

    path.write_bytes(b"\n".join(orjson.dumps(d) for d in docs) + b"\n")
    audit([path], store)
    store.client.command(
        f"ALTER TABLE {store.database}.assessments UPDATE requires_human_review = true "
        "WHERE 1 SETTINGS mutations_sync = 1"
    )


@contextmanager
def serve(
    store: Warehouse, data_dir: Path, audit_log: bool = True, **overrides: Any
) -> Iterator[ReviewServer]:
    """Serve the review app over ``store`` until the block ends."""
    if audit_log:  # in a thread: Playwright's sync API keeps an event loop in this one
        with ThreadPoolExecutor(1) as pool:
            pool.submit(audit, [EXAMPLE_LOG], store).result()
    add_accounts(store)
    cfg = settings(
        data_dir=data_dir,
        warehouse_database=store.database,
        review_session_secret="test-secret-" + "x" * 32,
        **overrides,
    )
    clock = FakeClock()
    built = build_app(cfg, store, clock=clock)
    app, service = built.app, built.service
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", proxy_headers=False)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("review server did not start")
        time.sleep(0.02)
    try:
        yield ReviewServer(f"http://127.0.0.1:{port}", service, built.accounts, store, cfg, clock)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


_TOKEN = re.compile(r'name="csrftoken" value="([^"]+)"')
_AUDITED = re.compile(r'name="audited_at" value="([^"]+)"')


def csrf_token(html: str) -> str:
    match = _TOKEN.search(html)
    assert match, "no CSRF token in the page"
    return match.group(1)


def audited_at(html: str) -> str:
    match = _AUDITED.search(html)
    assert match, "no audited_at in the page"
    return match.group(1)


def key_of(item_url: str) -> tuple[str, str]:
    """(bundle, log id) of an item page URL."""
    query = parse_qs(urlsplit(item_url).query)
    return query["bundle"][0], query["log_id"][0]


def plain(item_url: str) -> str:
    """The item page URL without its queue."""
    bundle, log_id = key_of(item_url)
    return "/item?" + urlencode({"bundle": bundle, "log_id": log_id})


class Reviewer:
    """An HTTP client logged in as one reviewer (the no-JavaScript flow)."""

    def __init__(self, url: str, name: str, password: str | None = None) -> None:
        self.name = name
        # a browser sends its page's origin with every form (the app's CSRF origin check)
        self.http = httpx.Client(
            base_url=url, follow_redirects=False, timeout=30, headers={"Origin": url}
        )
        page = self.http.get("/login")
        self.token = csrf_token(page.text)
        if password is not None:
            reply = self.login(password)
            assert reply.status_code == 303, reply.text

    def login(self, password: str) -> httpx.Response:
        """POST the login form; on success the token of the new session is kept (a login
        starts a new session, and the anonymous session's token no longer works)."""
        reply = self.http.post(
            "/login",
            data={"csrftoken": self.token, "name": self.name, "password": password, "next": "/"},
        )
        if reply.status_code == 303:
            self.token = csrf_token(self.http.get("/login").text)
        return reply

    def post(self, path: str, **data: str) -> httpx.Response:
        return self.http.post(path, data={"csrftoken": self.token, **data})

    def claim(self, queue: str = "all") -> str | None:
        """The claimed item's path (with ``?queue=``), or None when the queue is empty."""
        reply = self.post(f"/queues/{queue}/claim")
        assert reply.status_code == 303, reply.text
        target = reply.headers["location"]
        return target if target.startswith("/item?") else None

    def submit(self, item_url: str, **fields: str) -> httpx.Response:
        """GET the item page (for its audited_at), then POST the verdict form."""
        page = self.http.get(item_url)
        assert page.status_code == 200, page.text
        queue = parse_qs(urlsplit(item_url).query).get("queue", [""])[0]
        return self.post_item("verdict", item_url, audited_at=audited_at(page.text),
                              queue=queue, **fields)  # fmt: skip

    def post_item(self, action: str, item_url: str, **fields: str) -> httpx.Response:
        """POST ``/item/<action>`` (verdict, skip) for the item of ``item_url``."""
        bundle, log_id = key_of(item_url)
        return self.post(f"/item/{action}", bundle=bundle, log_id=log_id, **fields)

    def close(self) -> None:
        self.http.close()
