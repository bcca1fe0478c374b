"""The review app's queue administration, for admins (``/admin/queues``, ``POST
/admin/queues``, ``POST /admin/queues/{queue}/delete``): the queues with their filters, the
form that creates or edits one, and deleting one."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from refusal_audit.review.service import ReviewRefused
from refusal_audit.review.web.context import WebContext
from refusal_audit.review.web.forms import queue_from_form
from schemas.review import ReviewerAccount, ReviewQueue


async def queues_page(web: WebContext, request: Request, user: ReviewerAccount) -> Response:
    """``/admin/queues[?edit=<queue>]``: the queues and the form (filled to edit one)."""
    return await queues_response(web, request, user, None, None, 200)


async def queues_response(
    web: WebContext,
    request: Request,
    user: ReviewerAccount,
    form: FormData | None,
    error: str | None,
    status: int,
) -> Response:
    """The queues page with ``status``: the form empty, filled with the queue named by
    ``?edit=``, or holding the posted ``form`` (kept, with ``error``, to correct)."""
    service = web.service
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
    return web.render(request, "queues.html", status, user=user, overview=overview,
                      values=current_values, error=error, bundles=sorted(service.bundles),
                      models=sorted({i.model for i in items}),
                      products=sorted({i.product for i in items}), categories=codes,
                      reviews_per_item=service.reviews_per_item)  # fmt: skip


async def save_queue(web: WebContext, request: Request, user: ReviewerAccount) -> Response:
    """``POST /admin/queues``: create or replace a queue; the form again with 422 (or the
    service's status) to correct."""
    form = await request.form()
    try:
        queue = queue_from_form(form)
        await run_in_threadpool(web.service.save_queue, queue, user.name)
    except ValueError as exc:
        return await queues_response(web, request, user, form, str(exc), 422)
    except ReviewRefused as exc:
        return await queues_response(web, request, user, form, str(exc), exc.status)
    return RedirectResponse("/admin/queues", 303)


async def delete_queue(web: WebContext, request: Request, user: ReviewerAccount) -> Response:
    """``POST /admin/queues/{queue}/delete``: delete the queue."""
    await run_in_threadpool(web.service.delete_queue, request.path_params["queue"], user.name)
    return RedirectResponse("/admin/queues", 303)


def routes(web: WebContext) -> list[Route]:
    """The ``/admin/queues`` routes, for admins only, bound to ``web``."""
    return [
        Route("/admin/queues", web.page(queues_page, admin=True)),
        Route("/admin/queues", web.page(save_queue, admin=True), methods=["POST"]),
        Route(
            "/admin/queues/{queue}/delete",
            web.page(delete_queue, admin=True),
            methods=["POST"],
        ),
    ]
