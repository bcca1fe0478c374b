"""The review web app (``refusal-audit review serve``): server-rendered pages over
``ReviewService`` (issue 10).

Every page but ``/login``, ``/healthz`` and ``/static`` needs a logged-in, active reviewer.
Sessions are signed cookies (Starlette's ``SessionMiddleware``: HttpOnly, SameSite=Lax,
Secure when ``review_cookie_secure``); every POST carries a CSRF token bound to the session
and must come from the app's own origin (``refusal_audit.review.web.csrf``); logins are throttled
(``LoginThrottle``);
responses carry a strict Content-Security-Policy (scripts and styles only from the app).
The basic flow works without JavaScript; ``static/review.js`` adds keyboard shortcuts.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from processors.review import validation_message
from refusal_audit.review.accounts import AccountBook, LoginThrottle, fingerprint
from refusal_audit.review.service import ReviewRefused, ReviewService
from refusal_audit.review.web.approvals import approval_routes
from refusal_audit.review.web.clarifications import clarification_routes
from refusal_audit.review.web.csrf import CSRF_MESSAGE, SessionCsrf, plain_reply
from refusal_audit.review.web.disagreements import disagreement_routes
from refusal_audit.review.web.visible_text import visible, visible_plain
from schemas.review import REVIEW_REASONS, ReviewerAccount, ReviewQueue, VerdictInput
from warehouse.client import WarehouseError

HERE = Path(__file__).resolve().parent
MAX_NOTE = 4000
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


def item_url(bundle: str, log_id: str, queue: str | None = None) -> str:
    """The item page's URL (``queue`` kept for "submit and next"). Bundle and log id travel
    as query parameters: a log id may hold ``/`` or be ``..``, which paths would not keep."""
    params = {"bundle": bundle, "log_id": log_id, **({"queue": queue} if queue else {})}
    return f"/item?{urlencode(params)}"


def _blank(value: Any) -> str | None:
    text = str(value).strip() if value is not None else ""
    return text or None


def verdict_from_form(form: Mapping[str, Any], reviewer: str, log_id: str) -> VerdictInput:
    """A ``VerdictInput`` from the item form. On ``agree`` the correction fields are ignored
    (the form keeps them, hidden, for a change of mind). ``corrected_clause`` = ``none``
    means no clause applies (a policy gap). Raises ``ValueError`` with a message for the
    reviewer."""
    verdict = _blank(form.get("verdict"))
    if verdict not in ("agree", "disagree"):
        raise ValueError("choose Agree or Disagree")
    note = _blank(form.get("note")) or ""
    if len(note) > MAX_NOTE:
        raise ValueError(f"the note may have at most {MAX_NOTE} characters ({len(note)} given)")
    if "\ufffd" in note or any(ord(ch) < 32 and ch not in "\t\r\n" for ch in note):
        raise ValueError("the note holds bytes that are not text; retype it")
    if verdict == "agree":
        return VerdictInput(log_id=log_id, reviewer=reviewer, verdict="agree", note=note)
    fp = _blank(form.get("corrected_false_positive"))
    if fp not in ("yes", "no"):
        raise ValueError("on Disagree, say whether the refusal was a false positive")
    category = _blank(form.get("corrected_category"))
    if category is None:
        raise ValueError("on Disagree, choose the corrected category")
    clause = _blank(form.get("corrected_clause"))
    try:
        return VerdictInput(
            log_id=log_id,
            reviewer=reviewer,
            verdict="disagree",
            corrected_category=category,
            corrected_false_positive=fp == "yes",
            corrected_clause=None if clause in (None, "none") else clause,
            note=note,
        )
    except ValidationError as exc:
        raise ValueError(validation_message(exc)) from None


def queue_from_form(form: Mapping[str, Any]) -> ReviewQueue:
    """A ``ReviewQueue`` from the admin form (empty fields mean "any"). Raises
    ``ValueError`` with a message naming the field."""
    values: dict[str, Any] = {}
    for name in ReviewQueue.model_fields:
        raw = _blank(form.get(name))
        values[name] = raw if raw is not None else ("" if name == "description" else None)
    try:
        return ReviewQueue.model_validate(values)
    except ValidationError as exc:
        raise ValueError(
            "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'queue'}: {e['msg']}" for e in exc.errors()
            )
        ) from None


def create_app(
    service: ReviewService,
    accounts: AccountBook,
    options: WebOptions,
    extra_routes: list[Route] | None = None,
) -> ASGIApp:
    """The review app as an ASGI application (serve it with uvicorn).

    ``extra_routes`` are mounted before the app's own (the embedded store's owner channel).
    """
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.trim_blocks = True
    templates.env.lstrip_blocks = True
    # logged text: isolated, invisible and bidirectional controls shown as markers
    templates.env.filters.update(visible=visible, visible_plain=visible_plain)
    throttle = LoginThrottle(options.login_attempts_per_minute)
    proxy_header = options.proxy_user_header.lower() if options.proxy_user_header else None

    def client_address(request: Request) -> str:
        """The client's address: the peer, or for a trusted proxy the address it forwards
        (the right-most ``X-Forwarded-For`` entry). uvicorn runs with proxy headers off, so
        the peer is the real one."""
        peer = request.client.host if request.client else ""
        forwarded = request.headers.get("x-forwarded-for")
        if forwarded and peer in options.trusted_proxies:
            return forwarded.split(",")[-1].strip() or peer
        return peer

    def current(request: Request) -> ReviewerAccount | None:
        client = request.client.host if request.client else ""
        if proxy_header and client in options.trusted_proxies:
            name = request.headers.get(proxy_header)
            return accounts.get(name) if name else None
        name = request.session.get("reviewer")
        if not isinstance(name, str):
            return None
        account = accounts.get(name)
        if account is None or request.session.get("fp") != fingerprint(account):
            request.session.clear()
            return None
        return account

    def render(request: Request, template: str, status: int = 200, **context: Any) -> Response:
        csrf = request.scope.get("csrftoken")
        context.setdefault("user", None)
        return templates.TemplateResponse(
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

    Handler = Callable[[Request, ReviewerAccount], Awaitable[Response]]

    def login_required(handler: Handler, admin: bool = False) -> Callable[..., Any]:
        async def endpoint(request: Request) -> Response:
            try:
                user = await run_in_threadpool(current, request)
            except WarehouseError as exc:
                return render(request, "error.html", 503, message=_unavailable(exc, kept=False))
            if user is None:
                if request.method == "GET":
                    return RedirectResponse(
                        f"/login?next={quote(str(request.url.path), safe='/')}", 303
                    )
                return render(request, "error.html", 401, message="Please log in first.")
            if admin and user.role != "admin":
                return render(request, "error.html", 403, user=user,
                              message="This page is for admins.")  # fmt: skip
            try:
                return await handler(request, user)
            except ReviewRefused as exc:
                return render(request, "error.html", exc.status, user=user, message=str(exc))
            except WarehouseError as exc:
                return render(request, "error.html", 503, user=user,
                              message=_unavailable(exc, kept=False))  # fmt: skip

        return endpoint

    # ---- login ------------------------------------------------------------------------

    async def login_page(request: Request) -> Response:
        return render(request, "login.html", next=_safe_next(request.query_params.get("next")))

    async def login(request: Request) -> Response:
        form = await request.form()
        name = str(form.get("name") or "").strip()
        password = str(form.get("password") or "")
        target = _safe_next(str(form.get("next") or ""))
        wait = throttle.attempt(name, client_address(request))
        if wait is not None:
            return render(request, "login.html", 429, next=target, name=name,
                          error=f"Too many login attempts: try again in {wait:.0f} s.")  # fmt: skip
        try:
            account = await run_in_threadpool(accounts.authenticate, name, password)
        except WarehouseError as exc:
            return render(request, "login.html", 503, next=target, name=name,
                          error=_unavailable(exc, kept=False))  # fmt: skip
        if account is None:
            throttle.failed(name, client_address(request))
            return render(request, "login.html", 401, next=target, name=name,
                          error="Wrong name or password.")  # fmt: skip
        throttle.succeeded(name, client_address(request))
        request.session.clear()
        request.session.update({"reviewer": account.name, "fp": fingerprint(account)})
        return RedirectResponse(target, 303)

    async def logout(request: Request) -> Response:
        """End the session here and, by a new version of the account, every other session of
        the reviewer (a copied cookie stops working too)."""
        name = request.session.get("reviewer")
        request.session.clear()
        if isinstance(name, str):
            # on failure the cookie is still cleared; other sessions end at their expiry
            with contextlib.suppress(WarehouseError):
                await run_in_threadpool(accounts.end_sessions, name)
        return RedirectResponse("/login", 303)

    # ---- queues -----------------------------------------------------------------------

    async def index(request: Request, user: ReviewerAccount) -> Response:
        overview = await run_in_threadpool(service.overview)
        skipped = service.skipped(user.name)
        return render(request, "index.html", user=user, overview=overview, skipped=skipped,
                      reviews_per_item=service.reviews_per_item,
                      message=request.query_params.get("message"))  # fmt: skip

    async def claim(request: Request, user: ReviewerAccount) -> Response:
        queue = request.path_params["queue"]
        item = await run_in_threadpool(service.claim, user.name, queue)
        return _next_response(queue, item is not None and item.key, user)

    def _next_response(queue: str, key: Any, user: ReviewerAccount) -> Response:
        if not key:
            skipped = service.skipped(user.name)
            message = f"Queue {queue} has nothing left for you."
            if skipped:
                message += f" You skipped {skipped} item(s): offer them again below."
            return RedirectResponse(f"/?message={quote(message)}", 303)
        return RedirectResponse(item_url(key[0], key[1], queue), 303)

    async def unskip(request: Request, user: ReviewerAccount) -> Response:
        service.unskip(user.name)
        return RedirectResponse("/", 303)

    # ---- items ------------------------------------------------------------------------

    async def item_page(request: Request, user: ReviewerAccount) -> Response:
        return await _item(request, user, None, None, 200)

    async def _item(
        request: Request,
        user: ReviewerAccount,
        form: FormData | None,
        error: str | None,
        status: int,
    ) -> Response:
        if form is not None:
            bundle, log_id = str(form.get("bundle") or ""), str(form.get("log_id") or "")
        else:
            bundle = request.query_params.get("bundle", "")
            log_id = request.query_params.get("log_id", "")
        queue = request.query_params.get("queue") or (form and str(form.get("queue") or ""))
        view = await run_in_threadpool(
            service.view, user.name, bundle, log_id, user.role == "admin"
        )
        history = await run_in_threadpool(service.history, user.name, 50)
        previous = next(
            (v for v in history
             if (v.policy_bundle, v.log_id) != (bundle, log_id)
             and (view.mine is None or v.submitted_at < view.mine.submitted_at)),
            None,
        )  # fmt: skip
        categories = sorted(view.bundle.taxonomy, key=lambda t: (t.parent is not None, t.code))
        clause = view.bundle.clause(view.assessment["policy_clause_cited"] or "")
        return render(request, "item.html", status, user=user, view=view, queue=queue or "",
                      categories=categories, clause=clause, previous=previous, error=error,
                      form=form, audited_at=view.key[2].isoformat())  # fmt: skip

    async def posted(request: Request) -> tuple[str, str, FormData, str]:
        """(bundle, log id, form, queue) of a POST on an item."""
        form = await request.form()
        bundle, log_id = str(form.get("bundle") or ""), str(form.get("log_id") or "")
        return bundle, log_id, form, str(form.get("queue") or "")

    async def submit(request: Request, user: ReviewerAccount) -> Response:
        bundle, log_id, form, queue = await posted(request)
        try:
            audited_at = _audited_at(form)
            item = verdict_from_form(form, user.name, log_id)
        except ValueError as exc:
            return await _item(request, user, form, str(exc), 422)
        try:
            await run_in_threadpool(service.submit, item, bundle, audited_at)
        except ReviewRefused as exc:
            if exc.status == 422:
                return await _item(request, user, form, str(exc), 422)
            raise
        except WarehouseError as exc:  # the page cannot be rebuilt: offer the form again
            return render(request, "retry.html", 503, user=user, message=_unavailable(exc),
                          fields=[(k, str(v)) for k, v in form.multi_items()
                                  if k not in ("csrftoken", "note")],
                          note=str(form.get("note") or ""))  # fmt: skip
        if queue and form.get("next") != "stay":
            try:
                nxt = await run_in_threadpool(service.claim, user.name, queue)
            except ReviewRefused:  # the queue is gone: the verdict is stored all the same
                return RedirectResponse(f"/?message={quote('Saved; that queue is gone.')}", 303)
            return _next_response(queue, nxt is not None and nxt.key, user)
        return RedirectResponse(item_url(bundle, log_id, queue) + "#saved", 303)

    async def skip(request: Request, user: ReviewerAccount) -> Response:
        bundle, log_id, form, queue = await posted(request)
        try:
            audited_at = _audited_at(form)
        except ValueError as exc:
            return render(request, "error.html", 422, user=user, message=str(exc))
        service.skip(user.name, (bundle, log_id, audited_at))  # refuses an item not held
        if not queue:
            return RedirectResponse("/", 303)
        nxt = await run_in_threadpool(service.claim, user.name, queue)
        return _next_response(queue, nxt is not None and nxt.key, user)

    async def history(request: Request, user: ReviewerAccount) -> Response:
        verdicts = await run_in_threadpool(service.history, user.name, 500)
        return render(request, "history.html", user=user, verdicts=verdicts)

    # ---- admin: queues ----------------------------------------------------------------

    async def queues_page(request: Request, user: ReviewerAccount) -> Response:
        return await _queues(request, user, None, None, 200)

    async def _queues(
        request: Request,
        user: ReviewerAccount,
        form: FormData | None,
        error: str | None,
        status: int,
    ) -> Response:
        overview = await run_in_threadpool(service.overview)
        edit = request.query_params.get("edit")
        current_values: dict[str, Any] = {}
        if form is not None:
            current_values = {k: str(form.get(k) or "") for k in ReviewQueue.model_fields}
        elif edit:
            found = next((q for q, _ in overview if q.name == edit), None)
            if found is not None:
                current_values = {k: "" if v is None else str(v)
                                  for k, v in found.model_dump().items()}  # fmt: skip
        items = await run_in_threadpool(service.items)
        codes = sorted({t.code for b in service.bundles.values() for t in b.taxonomy})
        return render(request, "queues.html", status, user=user, overview=overview,
                      values=current_values, error=error, bundles=sorted(service.bundles),
                      models=sorted({i.model for i in items}),
                      products=sorted({i.product for i in items}), categories=codes,
                      reviews_per_item=service.reviews_per_item)  # fmt: skip

    async def save_queue(request: Request, user: ReviewerAccount) -> Response:
        form = await request.form()
        try:
            queue = queue_from_form(form)
            await run_in_threadpool(service.save_queue, queue, user.name)
        except ValueError as exc:
            return await _queues(request, user, form, str(exc), 422)
        except ReviewRefused as exc:
            return await _queues(request, user, form, str(exc), exc.status)
        return RedirectResponse("/admin/queues", 303)

    async def delete_queue(request: Request, user: ReviewerAccount) -> Response:
        await run_in_threadpool(service.delete_queue, request.path_params["queue"], user.name)
        return RedirectResponse("/admin/queues", 303)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    routes = [
        *(extra_routes or []),
        Route("/healthz", healthz),
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/", login_required(index)),
        Route("/history", login_required(history)),
        *clarification_routes(service.store, login_required, render),
        *disagreement_routes(service.store, login_required, render),
        *approval_routes(service.store, login_required, render),
        Route("/unskip", login_required(unskip), methods=["POST"]),
        Route("/queues/{queue}/claim", login_required(claim), methods=["POST"]),
        Route("/item", login_required(item_page)),
        Route("/item/verdict", login_required(submit), methods=["POST"]),
        Route("/item/skip", login_required(skip), methods=["POST"]),
        Route("/admin/queues", login_required(queues_page, admin=True)),
        Route("/admin/queues", login_required(save_queue, admin=True), methods=["POST"]),
        Route(
            "/admin/queues/{queue}/delete",
            login_required(delete_queue, admin=True),
            methods=["POST"],
        ),
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


def _safe_next(target: str | None) -> str:
    """A local path to go to after login (never another site)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _unavailable(exc: Exception, kept: bool = True) -> str:
    if not kept:
        return f"The warehouse is unavailable ({exc}). Try again in a moment."
    return (
        f"The warehouse is unavailable ({exc}). Nothing was saved: your answer is below, "
        "send it again in a moment."
    )


def _audited_at(form: Mapping[str, Any]) -> datetime:
    """The form's ``audited_at`` (the judged assessment's audit time, ISO 8601 with its
    offset). Raises ``ValueError``."""
    try:
        value = datetime.fromisoformat(str(form.get("audited_at") or ""))
    except ValueError:
        raise ValueError("the form lacks the assessment's audit time: reload the item") from None
    if value.tzinfo is None:
        raise ValueError("the assessment's audit time needs its UTC offset: reload the item")
    return value
