"""The review app's login and logout (``/login``, ``POST /login``, ``POST /logout``):
throttled logins (``LoginThrottle`` in the ``WebContext``), session cookies bound to the
account's fingerprint, and a ``next`` page that is always a local path."""

from __future__ import annotations

import contextlib
import functools

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from refusal_audit.review.accounts import fingerprint
from refusal_audit.review.web.context import WebContext, unavailable
from warehouse.client import WarehouseError


async def login_page(web: WebContext, request: Request) -> Response:
    """``GET /login``: the login form, keeping a safe ``next``."""
    return web.render(request, "login.html", next=_safe_next(request.query_params.get("next")))


async def login(web: WebContext, request: Request) -> Response:
    """``POST /login``: 303 to ``next`` on success; the form again with 401 (wrong name or
    password), 429 (throttled) or 503 (warehouse unavailable)."""
    form = await request.form()
    name = str(form.get("name") or "").strip()
    password = str(form.get("password") or "")
    target = _safe_next(str(form.get("next") or ""))
    wait = web.throttle.attempt(name, web.client_address(request))
    if wait is not None:
        return web.render(request, "login.html", 429, next=target, name=name,
                          error=f"Too many login attempts: try again in {wait:.0f} s.")  # fmt: skip
    try:
        account = await run_in_threadpool(web.accounts.authenticate, name, password)
    except WarehouseError as exc:
        return web.render(request, "login.html", 503, next=target, name=name,
                          error=unavailable(exc, kept=False))  # fmt: skip
    if account is None:
        web.throttle.failed(name, web.client_address(request))
        return web.render(request, "login.html", 401, next=target, name=name,
                          error="Wrong name or password.")  # fmt: skip
    web.throttle.succeeded(name, web.client_address(request))
    request.session.clear()
    request.session.update({"reviewer": account.name, "fp": fingerprint(account)})
    return RedirectResponse(target, 303)


async def logout(web: WebContext, request: Request) -> Response:
    """End the session here and, by a new version of the account, every other session of
    the reviewer (a copied cookie stops working too)."""
    name = request.session.get("reviewer")
    request.session.clear()
    if isinstance(name, str):
        # on failure the cookie is still cleared; other sessions end at their expiry
        with contextlib.suppress(WarehouseError):
            await run_in_threadpool(web.accounts.end_sessions, name)
    return RedirectResponse("/login", 303)


def routes(web: WebContext) -> list[Route]:
    """``/login`` (GET, POST) and ``POST /logout``, bound to ``web``."""
    return [
        Route("/login", functools.partial(login_page, web), methods=["GET"]),
        Route("/login", functools.partial(login, web), methods=["POST"]),
        Route("/logout", functools.partial(logout, web), methods=["POST"]),
    ]


def _safe_next(target: str | None) -> str:
    """A local path to go to after login (never another site)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
