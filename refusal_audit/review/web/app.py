"""The review app (``refusal-audit review serve``): server-rendered pages over
``ReviewService`` (issue 10).

Every page but ``/login``, ``/healthz`` and ``/static`` needs a logged-in, active reviewer.
Sessions are signed cookies (Starlette's ``SessionMiddleware``: HttpOnly, SameSite=Lax,
Secure when ``review_cookie_secure``); every POST carries a CSRF token bound to the session
and must come from the app's own origin (``refusal_audit.review.web.csrf``); logins are throttled
(``LoginThrottle``);
responses carry a strict Content-Security-Policy (scripts and styles only from the app).
The basic flow works without JavaScript; ``static/review.js`` adds keyboard shortcuts.

``create_app`` only assembles the pages; each is a named handler in a module per page:
``auth`` (login, logout), ``queues`` (start page, claims), ``items`` (item, verdict, skip,
history), ``admin`` (queue administration), ``disagreements``; the shared dependencies are a
``context.WebContext``. The calibration and clarification rooms register their own pages
(``refusal_audit.calibration.pages.routes``, ``refusal_audit.clarification.pages.routes``).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from refusal_audit.calibration import pages as calibration_pages
from refusal_audit.clarification import pages as clarification_pages
from refusal_audit.review.accounts import AccountBook
from refusal_audit.review.service import ReviewService
from refusal_audit.review.web import admin, auth, disagreements, items, queues
from refusal_audit.review.web.context import HERE, WebContext, WebOptions
from refusal_audit.review.web.csrf import CSRF_MESSAGE, SessionCsrf, plain_reply

__all__ = ["MAX_FORM_BYTES", "SESSION_COOKIE", "WebOptions", "create_app", "healthz"]

#: Largest request body the app reads (forms); the owner channel has its own cap.
MAX_FORM_BYTES = 256 * 1024
SESSION_COOKIE = "refusal_review_session"
_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def _derive(secret: str, label: str) -> str:
    return hmac.new(secret.encode(), label.encode(), hashlib.sha256).hexdigest()


class _SecurityHeaders:
    """Adds ``_HEADERS`` to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                for name, value in _HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


class _RequestGuard:
    """Before the CSRF check: every state-changing request (but the owner channel, which
    checks its own token) must be a URL-encoded form of at most ``MAX_FORM_BYTES`` in UTF-8,
    sent with cookies (the session cookie at least), and never skips the CSRF check through an
    ``Authorization`` header. Answers 400, 403, 413 or 415 otherwise."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] in ("GET", "HEAD", "OPTIONS")
            or str(scope.get("path", "")).startswith("/_owner/")
        ):
            await self.app(scope, receive, send)
            return
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"authorization"]
        given = dict(headers)
        kind = given.get(b"content-type", b"").split(b";")[0].strip().lower()
        if kind != b"application/x-www-form-urlencoded":
            await plain_reply(send, 415, "Send the app's own forms (URL-encoded).")
            return
        if b"cookie" not in given:
            await plain_reply(send, 403, CSRF_MESSAGE)
            return
        try:
            length = int(given.get(b"content-length", b"0"))
        except ValueError:
            length = 0
        if length > MAX_FORM_BYTES:
            await plain_reply(send, 413, "The form is too large.")
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > MAX_FORM_BYTES:
                await plain_reply(send, 413, "The form is too large.")
                return
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            await plain_reply(send, 400, "The form is not UTF-8 text.")
            return
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app({**scope, "headers": headers}, replay, send)


async def healthz(request: Request) -> Response:
    """``/healthz``: ``{"ok": true}``, without login."""
    return JSONResponse({"ok": True})


def create_app(
    service: ReviewService,
    accounts: AccountBook,
    options: WebOptions,
    extra_routes: list[Route] | None = None,
) -> ASGIApp:
    """The review app as an ASGI application (serve it with uvicorn).

    ``extra_routes`` are mounted before the app's own (the embedded store's owner channel).
    """
    web = WebContext.build(service, accounts, options)
    routes = [
        *(extra_routes or []),
        Route("/healthz", healthz),
        *auth.routes(web),
        *queues.routes(web),
        *items.routes(web),
        *clarification_pages.routes(service.store, web.login_required, web.render),
        *disagreements.routes(web),
        *calibration_pages.routes(service.store, web.login_required, web.render),
        *admin.routes(web),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(
                SessionMiddleware,
                secret_key=_derive(options.secret, "session"),
                session_cookie=SESSION_COOKIE,
                max_age=options.session_max_age,
                same_site="lax",
                https_only=options.cookie_secure,
            ),
            Middleware(
                SessionCsrf,
                key=_derive(options.secret, "csrf").encode(),
                trusted_proxies=options.trusted_proxies,
                exempt_prefixes=("/_owner/",),
            ),
        ],
    )
    return _SecurityHeaders(_RequestGuard(app))
