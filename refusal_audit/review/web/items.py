"""The review app's item pages (``/item``, ``POST /item/verdict``, ``POST /item/skip``,
``/history``): one assessment with its event and the reviewer's verdict form, submitting a
verdict (then, from a queue, on to its next item), skipping an item, and the reviewer's
own verdicts."""

from __future__ import annotations

from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from refusal_audit.review.service import ReviewRefused
from refusal_audit.review.web.context import WebContext, item_url, unavailable
from refusal_audit.review.web.forms import audited_at as form_audited_at
from refusal_audit.review.web.forms import verdict_from_form
from refusal_audit.review.web.queues import next_response
from schemas.review import ReviewerAccount
from warehouse.client import WarehouseError


async def item_page(web: WebContext, request: Request, user: ReviewerAccount) -> Response:
    """``/item?bundle=&log_id=[&queue=]``: the item and its verdict form."""
    return await item_response(web, request, user, None, None, 200)


async def item_response(
    web: WebContext,
    request: Request,
    user: ReviewerAccount,
    form: FormData | None,
    error: str | None,
    status: int,
) -> Response:
    """The item page with ``status``: of the query's item, or of the posted ``form``'s
    (kept, with ``error``, for the reviewer to correct)."""
    service = web.service
    if form is not None:
        bundle, log_id = str(form.get("bundle") or ""), str(form.get("log_id") or "")
    else:
        bundle = request.query_params.get("bundle", "")
        log_id = request.query_params.get("log_id", "")
    queue = request.query_params.get("queue") or (form and str(form.get("queue") or ""))
    view = await run_in_threadpool(service.view, user.name, bundle, log_id, user.role == "admin")
    history = await run_in_threadpool(service.history, user.name, 50)
    previous = next(
        (v for v in history
         if (v.policy_bundle, v.log_id) != (bundle, log_id)
         and (view.mine is None or v.submitted_at < view.mine.submitted_at)),
        None,
    )  # fmt: skip
    categories = sorted(view.bundle.taxonomy, key=lambda t: (t.parent is not None, t.code))
    clause = view.bundle.clause(view.assessment["policy_clause_cited"] or "")
    return web.render(request, "item.html", status, user=user, view=view, queue=queue or "",
                      categories=categories, clause=clause, previous=previous, error=error,
                      form=form, audited_at=view.key[2].isoformat())  # fmt: skip


async def posted(request: Request) -> tuple[str, str, FormData, str]:
    """(bundle, log id, form, queue) of a POST on an item."""
    form = await request.form()
    bundle, log_id = str(form.get("bundle") or ""), str(form.get("log_id") or "")
    return bundle, log_id, form, str(form.get("queue") or "")


async def submit(web: WebContext, request: Request, user: ReviewerAccount) -> Response:
    """``POST /item/verdict``: store the verdict, then 303 to the queue's next item (or back
    to the item, ``#saved``); the form again with 422 for a verdict to correct, the retry
    page with 503 when the warehouse failed."""
    service = web.service
    bundle, log_id, form, queue = await posted(request)
    try:
        audited_at = form_audited_at(form)
        item = verdict_from_form(form, user.name, log_id)
    except ValueError as exc:
        return await item_response(web, request, user, form, str(exc), 422)
    try:
        await run_in_threadpool(service.submit, item, bundle, audited_at)
    except ReviewRefused as exc:
        if exc.status == 422:
            return await item_response(web, request, user, form, str(exc), 422)
        raise
    except WarehouseError as exc:  # the page cannot be rebuilt: offer the form again
        return web.render(request, "retry.html", 503, user=user, message=unavailable(exc),
                          fields=[(k, str(v)) for k, v in form.multi_items()
                                  if k not in ("csrftoken", "note")],
                          note=str(form.get("note") or ""))  # fmt: skip
    if queue and form.get("next") != "stay":
        try:
            nxt = await run_in_threadpool(service.claim, user.name, queue)
        except ReviewRefused:  # the queue is gone: the verdict is stored all the same
            return RedirectResponse(f"/?message={quote('Saved; that queue is gone.')}", 303)
        return next_response(web, queue, nxt is not None and nxt.key, user)
    return RedirectResponse(item_url(bundle, log_id, queue) + "#saved", 303)


async def skip(web: WebContext, request: Request, user: ReviewerAccount) -> Response:
    """``POST /item/skip``: put the held item aside, then 303 to the queue's next item (or
    to ``/``)."""
    service = web.service
    bundle, log_id, form, queue = await posted(request)
    try:
        audited_at = form_audited_at(form)
    except ValueError as exc:
        return web.render(request, "error.html", 422, user=user, message=str(exc))
    service.skip(user.name, (bundle, log_id, audited_at))  # refuses an item not held
    if not queue:
        return RedirectResponse("/", 303)
    nxt = await run_in_threadpool(service.claim, user.name, queue)
    return next_response(web, queue, nxt is not None and nxt.key, user)


async def history(web: WebContext, request: Request, user: ReviewerAccount) -> Response:
    """``/history``: the reviewer's newest 500 verdicts."""
    verdicts = await run_in_threadpool(web.service.history, user.name, 500)
    return web.render(request, "history.html", user=user, verdicts=verdicts)


def routes(web: WebContext) -> list[Route]:
    """``/history``, ``/item``, ``POST /item/verdict`` and ``POST /item/skip`` behind the
    login, bound to ``web``."""
    return [
        Route("/history", web.page(history)),
        Route("/item", web.page(item_page)),
        Route("/item/verdict", web.page(submit), methods=["POST"]),
        Route("/item/skip", web.page(skip), methods=["POST"]),
    ]
