"""CSRF protection of the review app: a token bound to the session, and an origin check.

OWASP's synchronizer-token pattern on Starlette's signed session: each session holds a
random nonce (made when a page first needs a token, made anew at login because login
clears the session), and the form token is HMAC-SHA256(key, nonce). A token therefore only
works with the session it was issued to: one from an anonymous ``GET /login``, or from
another reviewer, is refused, and a cookie planted from another port or subdomain of the
host cannot make a known token valid. Every unsafe method must also come from the app's
own origin: ``Origin`` (or, without it, ``Referer``) must name the host the request was
sent to (``Host``, or ``X-Forwarded-Host`` from a trusted proxy); a request with neither
is refused (OWASP CSRF cheat sheet, "Verifying origin with standard headers").
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

#: the form field that carries the token (the templates' ``csrftoken``)
FORM_FIELD = "csrftoken"
#: the session key of the nonce
SESSION_KEY = "csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
CSRF_MESSAGE = (
    "This form is out of date or did not come from the review app (CSRF check failed). "
    "Go back, reload the page and try again."
)
#: the refusal of an unsafe request without the app's own Origin (or Referer)
ORIGIN_MESSAGE = (
    "This request did not come from a page of the review app: its Origin (or Referer) "
    "header is missing or names another site (origin check failed). Browsers send it; a "
    "scripted client must send Origin: the app's own scheme://host:port."
)


async def plain_reply(send: Send, status: int, text: str) -> None:
    """A short HTML page with ``status`` (the app's refusals before any route runs)."""
    body = f"<!doctype html><title>Refused</title><p>{text}</p>".encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/html; charset=utf-8")]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def session_token(session: MutableMapping[str, Any], key: bytes) -> str:
    """The CSRF token of ``session`` (hex HMAC-SHA256 of its nonce under ``key``); makes
    the nonce (128 random bits) when the session has none."""
    nonce = session.get(SESSION_KEY)
    if not isinstance(nonce, str):
        nonce = secrets.token_urlsafe(16)
        session[SESSION_KEY] = nonce
    return hmac.new(key, nonce.encode(), hashlib.sha256).hexdigest()


def _host(netloc: str) -> str:
    netloc = netloc.strip().lower()
    for default in (":80", ":443"):
        if netloc.endswith(default):
            return netloc[: -len(default)]
    return netloc


def same_origin(scope: Scope, trusted_proxies: tuple[str, ...]) -> bool:
    """True when the request's ``Origin`` (else ``Referer``) names the host it was sent to;
    False for a foreign, ``null`` or missing origin."""
    headers = Headers(scope=scope)
    source = headers.get("origin") or headers.get("referer")
    if not source or source == "null":
        return False
    allowed = {_host(headers.get("host", ""))}
    peer = scope["client"][0] if scope.get("client") else ""
    forwarded = headers.get("x-forwarded-host")
    if forwarded and peer in trusted_proxies:
        allowed.add(_host(forwarded.split(",")[0]))
    return _host(urlsplit(source).netloc) in allowed - {""}


class SessionCsrf:
    """ASGI middleware inside Starlette's ``SessionMiddleware`` (it reads
    ``scope["session"]``): puts ``scope["csrftoken"]`` (a function returning the session's
    token, for the templates) on every request, and lets an unsafe method through only with
    the app's own origin and the session's token in the URL-encoded form field
    ``csrftoken``; 403 otherwise. Paths starting with one of ``exempt_prefixes`` (the owner
    channel, which checks its own bearer token) are not checked. The body is read whole:
    bound it before (``MAX_FORM_BYTES``)."""

    def __init__(
        self,
        app: ASGIApp,
        key: bytes,
        trusted_proxies: tuple[str, ...] = (),
        exempt_prefixes: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.key = key
        self.trusted_proxies = trusted_proxies
        self.exempt_prefixes = exempt_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        session = scope["session"]
        token: Callable[[], str] = lambda: session_token(session, self.key)  # noqa: E731
        scope = {**scope, "csrftoken": token}
        path = str(scope.get("path", ""))
        if scope["method"] in SAFE_METHODS or path.startswith(self.exempt_prefixes):
            await self.app(scope, receive, send)
            return
        if not same_origin(scope, self.trusted_proxies):
            await plain_reply(send, 403, ORIGIN_MESSAGE)
            return
        messages: list[Any] = []
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            messages.append(message)
            more = message.get("more_body", False)
        body = b"".join(m.get("body", b"") for m in messages)
        given = parse_qs(body.decode("utf-8", "replace")).get(FORM_FIELD, [""])[0]
        nonce = session.get(SESSION_KEY)
        if not isinstance(nonce, str) or not hmac.compare_digest(given.encode(), token().encode()):
            await plain_reply(send, 403, CSRF_MESSAGE)
            return

        async def replay() -> Any:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)
