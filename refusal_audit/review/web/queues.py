"""The review app's start page and queue claims (``/``, ``POST /queues/{queue}/claim``,
``POST /unskip``): the queues' overview, claiming the next item of a queue, and offering
skipped items again."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from refusal_audit.review.web.context import WebContext, item_url
from schemas.review import ReviewerAccount


async def index(web: WebContext, request: Request, user: ReviewerAccount) -> Response:
    """``/``: every queue with its counts, the reviewer's skipped items and a message."""
    service = web.service
    overview = await run_in_threadpool(service.overview)
    skipped = service.skipped(user.name)
    return web.render(request, "index.html", user=user, overview=overview, skipped=skipped,
                      reviews_per_item=service.reviews_per_item,
                      message=request.query_params.get("message"))  # fmt: skip


async def claim(web: WebContext, request: Request, user: ReviewerAccount) -> Response:
    """``POST /queues/{queue}/claim``: to the queue's next item for the reviewer."""
    queue = request.path_params["queue"]
    item = await run_in_threadpool(web.service.claim, user.name, queue)
    return next_response(web, queue, item is not None and item.key, user)


def next_response(web: WebContext, queue: str, key: Any, user: ReviewerAccount) -> Response:
    """303 to the claimed item ``key`` of ``queue``, or (no key) to ``/`` with a message
    saying the queue has nothing left (and how many items the reviewer skipped)."""
    if not key:
        skipped = web.service.skipped(user.name)
        message = f"Queue {queue} has nothing left for you."
        if skipped:
            message += f" You skipped {skipped} item(s): offer them again below."
        return RedirectResponse(f"/?message={quote(message)}", 303)
    return RedirectResponse(item_url(key[0], key[1], queue), 303)


async def unskip(web: WebContext, request: Request, user: ReviewerAccount) -> Response:
    """``POST /unskip``: the reviewer's skipped items are offered again."""
    web.service.unskip(user.name)
    return RedirectResponse("/", 303)


def routes(web: WebContext) -> list[Route]:
    """``/``, ``POST /unskip`` and ``POST /queues/{queue}/claim`` behind the login, bound to
    ``web``."""
    return [
        Route("/", web.page(index)),
        Route("/unskip", web.page(unskip), methods=["POST"]),
        Route("/queues/{queue}/claim", web.page(claim), methods=["POST"]),
    ]
