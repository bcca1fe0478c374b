"""The review app's listing of the events on which the platform classifier's refusal verdict
and our own refusal detection disagree (issue 25): ``/disagreements``, read-only.

The rows are the ``refusal_disagreement_events`` named query's (``warehouse.queries``, the
same as ``refusal-audit query refusal_disagreement_events --all``), newest event first; the
``direction`` query parameter keeps one direction. The page shows the newest
``MAX_LISTED`` and says how many more there are, never fewer silently: both read by
``warehouse.disagreement_listing`` from the newest days that hold them.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from refusal_audit.review.web.context import WebContext
from schemas.events import DISAGREEMENT_DIRECTIONS
from schemas.review import ReviewerAccount
from warehouse.disagreement_listing import LISTED, newest_disagreements
from warehouse.queries import listing_params
from warehouse.store import Warehouse

#: Rows shown on one page; the rest are counted and named by the command that lists them.
MAX_LISTED = LISTED


def disagreement_rows(store: Warehouse, direction: str = "") -> tuple[list[dict[str, Any]], int]:
    """The newest ``MAX_LISTED`` stored disagreements, newest first, of one ``direction`` ("" for
    both), and how many are stored. Raises ``ValueError`` for an unknown direction,
    ``WarehouseError`` when the query fails."""
    params = listing_params(store.database)
    listing = newest_disagreements(store.client, store.database, params, MAX_LISTED, direction)
    return listing.rows.as_dicts(), listing.total


async def listing(web: WebContext, request: Request, user: ReviewerAccount) -> Response:
    """``/disagreements[?direction=]``: the newest ``MAX_LISTED`` disagreements and how many
    more there are; 400 for an unknown direction."""
    direction = request.query_params.get("direction", "")
    try:
        rows, total = await run_in_threadpool(disagreement_rows, web.service.store, direction)
    except ValueError as exc:
        return web.render(request, "error.html", 400, user=user, message=str(exc))
    return web.render(request, "disagreements.html", user=user, rows=rows,
                      more=max(0, total - len(rows)), direction=direction,
                      directions=DISAGREEMENT_DIRECTIONS)  # fmt: skip


def routes(web: WebContext) -> list[Route]:
    """The ``/disagreements`` route behind the login, bound to ``web``."""
    return [Route("/disagreements", web.page(listing))]
