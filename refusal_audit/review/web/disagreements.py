"""The review app's listing of the events on which the platform classifier's refusal verdict
and our own refusal detection disagree (issue 25): ``/disagreements``, read-only.

The rows are the ``refusal_disagreement_events`` named query's (``warehouse.queries``, the
same as ``refusal-audit query refusal_disagreement_events``), newest event first; the
``direction`` query parameter keeps one direction. The page shows the newest
``MAX_LISTED`` and says how many more there are, never fewer silently.
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
from warehouse.queries import run_named
from warehouse.store import Warehouse

#: Rows shown on one page; the rest are counted and named by the command that lists them.
MAX_LISTED = 500


def disagreement_rows(store: Warehouse, direction: str = "") -> list[dict[str, Any]]:
    """The stored disagreements, newest first, of one ``direction`` ("" for both). Raises
    ``ValueError`` for an unknown direction, ``WarehouseError`` when the query fails."""
    if direction and direction not in DISAGREEMENT_DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}")
    rows = run_named(store.client, store.database, "refusal_disagreement_events").as_dicts()
    return [r for r in rows if not direction or r["direction"] == direction]


async def listing(web: WebContext, request: Request, user: ReviewerAccount) -> Response:
    """``/disagreements[?direction=]``: the newest ``MAX_LISTED`` disagreements and how many
    more there are; 400 for an unknown direction."""
    direction = request.query_params.get("direction", "")
    try:
        rows = await run_in_threadpool(disagreement_rows, web.service.store, direction)
    except ValueError as exc:
        return web.render(request, "error.html", 400, user=user, message=str(exc))
    return web.render(request, "disagreements.html", user=user, rows=rows[:MAX_LISTED],
                      more=max(0, len(rows) - MAX_LISTED), direction=direction,
                      directions=DISAGREEMENT_DIRECTIONS)  # fmt: skip


def routes(web: WebContext) -> list[Route]:
    """The ``/disagreements`` route behind the login, bound to ``web``."""
    return [Route("/disagreements", web.page(listing))]
