"""What every page of the review app shares: ``WebOptions`` (how it authenticates) and
``WebContext`` (the service, the accounts, the templates and the login throttle, with the
app's ``current`` reviewer, ``render`` and ``login_required``).

The pages are module-level handlers taking the ``WebContext`` first (``auth``, ``queues``,
``items``, ``admin``); ``WebContext.page`` binds one to the context behind the login check.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from refusal_audit.review.accounts import AccountBook, LoginThrottle, fingerprint
from refusal_audit.review.service import ReviewRefused, ReviewService
from refusal_audit.review.web.visible_text import visible, visible_plain
from schemas.review import MAX_NOTE_CHARS, REVIEW_REASONS, ReviewerAccount
from warehouse.client import WarehouseError

HERE = Path(__file__).resolve().parent

#: A page behind the login: ``(request, reviewer) -> response``.
Handler = Callable[[Request, ReviewerAccount], Awaitable[Response]]
#: A page of the review app itself, taking the context first (bound by ``WebContext.page``).
Page = Callable[["WebContext", Request, ReviewerAccount], Awaitable[Response]]


@dataclass(frozen=True)
class WebOptions:
    """How the app authenticates: ``secret`` signs sessions and CSRF tokens;
    ``proxy_user_header`` (lower-case header name or None) and the forwarding headers
    (``X-Forwarded-For``, ``X-Forwarded-Host``) are believed only from ``trusted_proxies``
    (peer addresses; none by default)."""

    secret: str
    session_max_age: int = 12 * 3600
    cookie_secure: bool = False
    login_attempts_per_minute: int = 5
    proxy_user_header: str | None = None
    trusted_proxies: tuple[str, ...] = ()


def item_url(bundle: str, log_id: str, queue: str | None = None) -> str:
    """The item page's URL (``queue`` kept for "submit and next"). Bundle and log id travel
    as query parameters: a log id may hold ``/`` or be ``..``, which paths would not keep."""
    params = {"bundle": bundle, "log_id": log_id, **({"queue": queue} if queue else {})}
    return f"/item?{urlencode(params)}"


def unavailable(exc: Exception, kept: bool = True) -> str:
    """The reviewer's message when the warehouse failed: ``kept`` when the page offers the
    reviewer's answer again."""
    if not kept:
        return f"The warehouse is unavailable ({exc}). Try again in a moment."
    return (
        f"The warehouse is unavailable ({exc}). Nothing was saved: your answer is below, "
        "send it again in a moment."
    )


@dataclass(frozen=True)
class WebContext:
    """The app's dependencies, shared by every page: the review ``service``, the reviewer
    ``accounts``, the ``options``, the Jinja ``templates`` and the login ``throttle``."""

    service: ReviewService
    accounts: AccountBook
    options: WebOptions
    templates: Jinja2Templates
    throttle: LoginThrottle

    @classmethod
    def build(
        cls, service: ReviewService, accounts: AccountBook, options: WebOptions
    ) -> WebContext:
        """The context over the app's templates (``templates/``, with the ``visible``
        filters) and a fresh login throttle."""
        templates = Jinja2Templates(directory=str(HERE / "templates"))
        templates.env.trim_blocks = True
        templates.env.lstrip_blocks = True
        # logged text: isolated, invisible and bidirectional controls shown as markers
        templates.env.filters.update(visible=visible, visible_plain=visible_plain)
        templates.env.globals["max_review_note"] = MAX_NOTE_CHARS  # the note fields' maxlength
        throttle = LoginThrottle(options.login_attempts_per_minute)
        return cls(service, accounts, options, templates, throttle)

    @property
    def proxy_header(self) -> str | None:
        """The lower-cased proxy user header, or None."""
        header = self.options.proxy_user_header
        return header.lower() if header else None

    def client_address(self, request: Request) -> str:
        """The client's address: the peer, or for a trusted proxy the address it forwards
        (the right-most ``X-Forwarded-For`` entry). uvicorn runs with proxy headers off, so
        the peer is the real one."""
        peer = request.client.host if request.client else ""
        forwarded = request.headers.get("x-forwarded-for")
        if forwarded and peer in self.options.trusted_proxies:
            return forwarded.split(",")[-1].strip() or peer
        return peer

    def current(self, request: Request) -> ReviewerAccount | None:
        """The logged-in, active reviewer (by the trusted proxy's header or the session),
        or None; a session of an account changed since login is cleared. Raises
        ``WarehouseError``."""
        client = request.client.host if request.client else ""
        proxy_header = self.proxy_header
        if proxy_header and client in self.options.trusted_proxies:
            name = request.headers.get(proxy_header)
            return self.accounts.get(name) if name else None
        name = request.session.get("reviewer")
        if not isinstance(name, str):
            return None
        account = self.accounts.get(name)
        if account is None or request.session.get("fp") != fingerprint(account):
            request.session.clear()
            return None
        return account

    def render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> Response:
        """``template`` rendered with ``context``, the CSRF token, the review reasons and
        ``item_url``; ``user`` None unless given."""
        csrf = request.scope.get("csrftoken")
        context.setdefault("user", None)
        return self.templates.TemplateResponse(
            request,
            template,
            {
                "csrftoken": csrf() if callable(csrf) else "",
                "reasons": REVIEW_REASONS,
                "item_url": item_url,
                **context,
            },
            status_code=status,
        )

    def login_required(self, handler: Handler, admin: bool = False) -> Callable[..., Any]:
        """An endpoint calling ``handler`` with the logged-in reviewer (an admin when
        ``admin``): a GET without login goes to ``/login``, other requests get 401, a
        non-admin 403; ``ReviewRefused`` and ``WarehouseError`` become the error page."""

        async def endpoint(request: Request) -> Response:
            try:
                user = await run_in_threadpool(self.current, request)
            except WarehouseError as exc:
                return self.render(request, "error.html", 503, message=unavailable(exc, kept=False))
            if user is None:
                if request.method == "GET":
                    return RedirectResponse(
                        f"/login?next={quote(str(request.url.path), safe='/')}", 303
                    )
                return self.render(request, "error.html", 401, message="Please log in first.")
            if admin and user.role != "admin":
                return self.render(request, "error.html", 403, user=user,
                                   message="This page is for admins.")  # fmt: skip
            try:
                return await handler(request, user)
            except ReviewRefused as exc:
                return self.render(request, "error.html", exc.status, user=user, message=str(exc))
            except WarehouseError as exc:
                return self.render(request, "error.html", 503, user=user,
                                   message=unavailable(exc, kept=False))  # fmt: skip

        return endpoint

    def page(self, handler: Page, admin: bool = False) -> Callable[..., Any]:
        """``login_required`` over a module-level page ``handler(context, request, user)``
        bound to this context."""
        return self.login_required(functools.partial(handler, self), admin)
