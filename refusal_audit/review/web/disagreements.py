"""The review app's listing of the events on which the platform classifier's refusal verdict
and our own refusal detection disagree (issue 25): ``/disagreements``, read-only.

The rows are the ``refusal_disagreement_events`` named query's (``warehouse.queries``, the
same as ``refusal-audit query refusal_disagreement_events``), newest event first; the
``direction`` query parameter keeps one direction. The page shows the newest
``MAX_LISTED`` and says how many more there are, never fewer silently.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from schemas.events import DISAGREEMENT_DIRECTIONS
from schemas.review import ReviewerAccount
from warehouse.queries import run_named
from warehouse.store import Warehouse

#: Rows shown on one page; the rest are counted and named by the command that lists them.
MAX_LISTED = 500

Handler = Callable[[Request, ReviewerAccount], Awaitable[Response]]
Render = Callable[..., Response]


def disagreement_rows(store: Warehouse, direction: str = "") -> list[dict[str, Any]]:
    """The stored disagreements, newest first, of one ``direction`` ("" for both). Raises
    ``ValueError`` for an unknown direction, ``WarehouseError`` when the query fails."""
    if direction and direction not in DISAGREEMENT_DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}")
    rows = run_named(store.client, store.database, "refusal_disagreement_events").as_dicts()
    return [r for r in rows if not direction or r["direction"] == direction]


def disagreement_routes(
    store: Warehouse, login_required: Callable[[Handler], Any], render: Render
) -> list[Route]:
    """The ``/disagreements`` route, guarded by the app's ``login_required`` and rendered by
    its ``render``."""

    async def listing(request: Request, user: ReviewerAccount) -> Response:
        direction = request.query_params.get("direction", "")
        try:
            rows = await run_in_threadpool(disagreement_rows, store, direction)
        except ValueError as exc:
            return render(request, "error.html", 400, user=user, message=str(exc))
        return render(request, "disagreements.html", user=user, rows=rows[:MAX_LISTED],
                      more=max(0, len(rows) - MAX_LISTED), direction=direction,
                      directions=DISAGREEMENT_DIRECTIONS)  # fmt: skip

    return [Route("/disagreements", login_required(listing))]
