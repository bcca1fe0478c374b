"""The clarification room's pages in the review app (``routes``, registered by
``refusal_audit.review.web.app``): the clarification items (issue 12), escalated
clarification conversations and the sampled ones, as an item kind of their own
(``/clarifications``, ``/clarification``).

A reviewer sees the whole history from the audit trail (``warehouse.clarification``): the
request and the refusal, the route, every round's questions (with what each disambiguates and
its guardrail) and answers, the application's re-evaluation, the outcome and the escalation
reason; and records a verdict: should the request be fulfilled or stay refused, and were the
questions neutral (``clarification_verdicts``; the newest verdict per reviewer counts).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from schemas.clarification import ConversationState
from schemas.review import MAX_NOTE_CHARS, ReviewerAccount
from warehouse.clarification import (
    DECISIONS,
    conversation_steps,
    insert_verdict,
    review_items,
    verdicts_on,
)
from warehouse.store import Warehouse

MAX_REVISION = 2**32 - 1  # clarification_steps.revision is a UInt32

Handler = Callable[[Request, ReviewerAccount], Awaitable[Response]]
Render = Callable[..., Response]


def clarification_url(conversation_id: str) -> str:
    """The page of one clarification item (the id travels as a query parameter)."""
    return "/clarification?" + urlencode({"id": conversation_id})


def revision_from_form(form: Mapping[str, Any]) -> int:
    """The form's ``revision`` (the conversation step the reviewer judged): a whole number
    the trail's ``UInt32`` column can hold. Raises ``ValueError`` with a message for the
    reviewer (a tampered or truncated form is fixed by reloading the item)."""
    text = str(form.get("revision") or "").strip()
    if not text.isascii() or not text.isdigit() or len(text) > 10:
        raise ValueError("the form's revision is not a step of this conversation: reload the item")
    revision = int(text)
    if revision > MAX_REVISION:
        raise ValueError("the form's revision is not a step of this conversation: reload the item")
    return revision


def stale_message(judged: int, latest: int) -> str:
    """The reviewer's message when the form judged another step than the conversation's
    latest (the conversation moved on since the page was opened, or the form was altered)."""
    if judged < latest:
        return (
            f"this conversation moved on after you opened it (you judged revision {judged}, "
            f"it is at revision {latest} now): read the new steps below and judge again"
        )
    return (
        f"the conversation has no revision {judged} (it is at revision {latest}): reload the item"
    )


def verdict_from_form(form: Mapping[str, Any], revision: int) -> dict[str, Any]:
    """The decision, questions_ok and note of the form. Raises ``ValueError`` with a message
    for the reviewer."""
    decision = str(form.get("decision") or "")
    if decision not in DECISIONS:
        raise ValueError("choose Fulfil or Keep refused")
    questions_ok = str(form.get("questions_ok") or "")
    if questions_ok not in ("yes", "no"):
        raise ValueError("say whether the questions were neutral")
    note = str(form.get("note") or "").strip()
    if len(note) > MAX_NOTE_CHARS:
        raise ValueError(
            f"the note may have at most {MAX_NOTE_CHARS} characters ({len(note)} given)"
        )
    if any(ord(ch) < 32 and ch not in "\t\r\n" for ch in note):
        raise ValueError("the note holds bytes that are not text; retype it")
    return {"decision": decision, "questions_ok": questions_ok == "yes", "note": note,
            "revision": revision}  # fmt: skip


@dataclass(frozen=True)
class ClarificationPages:
    """The clarification item kind's pages over ``store``, rendered by the review app's
    ``render``; ``clock`` stamps verdicts (UTC)."""

    store: Warehouse
    render: Render
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    async def listing(self, request: Request, user: ReviewerAccount) -> Response:
        """``/clarifications``: the escalated and sampled conversations."""
        items = await run_in_threadpool(review_items, self.store)
        return self.render(request, "clarifications.html", user=user, items=items,
                           clarification_url=clarification_url)  # fmt: skip

    async def page(self, request: Request, user: ReviewerAccount) -> Response:
        """``/clarification?id=``: one conversation and the reviewer's verdict form."""
        return await self.page_response(
            request, user, request.query_params.get("id", ""), None, None, 200
        )

    async def page_response(
        self,
        request: Request,
        user: ReviewerAccount,
        conversation_id: str,
        form: Mapping[str, Any] | None,
        error: str | None,
        status: int,
    ) -> Response:
        """The page of ``conversation_id`` with ``status`` (404 for none), keeping a posted
        ``form`` with its ``error``."""
        store, render = self.store, self.render
        steps = await run_in_threadpool(conversation_steps, store, conversation_id)
        if not steps:
            return render(request, "error.html", 404, user=user,
                          message="No such clarification conversation.")  # fmt: skip
        latest = steps[-1]
        state = ConversationState.model_validate_json(latest["state"])
        verdicts = await run_in_threadpool(verdicts_on, store, conversation_id)
        mine = next((v for v in verdicts if v["reviewer"] == user.name), None)
        return render(request, "clarification.html", status, user=user, state=state,
                      latest=latest, steps=steps, verdicts=verdicts, mine=mine, form=form,
                      error=error, saved=request.query_params.get("saved") == "1")  # fmt: skip

    async def submit(self, request: Request, user: ReviewerAccount) -> Response:
        """``POST /clarification/verdict``: store the reviewer's verdict on the latest step,
        then 303 to the page (``&saved=1``); the form again with 422 to correct or when the
        conversation moved on, 404 for no such conversation."""
        store, render = self.store, self.render
        form = await request.form()
        conversation_id = str(form.get("id") or "")
        try:
            revision = revision_from_form(form)
            values = verdict_from_form(form, revision)
        except ValueError as exc:
            return await self.page_response(request, user, conversation_id, form, str(exc), 422)
        steps = await run_in_threadpool(conversation_steps, store, conversation_id)
        if not steps:
            return render(request, "error.html", 404, user=user,
                          message="No such clarification conversation.")  # fmt: skip
        latest = steps[-1]
        if revision != int(latest["revision"]):
            return await self.page_response(request, user, conversation_id, form,
                                            stale_message(revision, int(latest["revision"])),
                                            422)  # fmt: skip
        row = {
            "conversation_id": conversation_id,
            "reviewer": user.name,
            "outcome": latest["outcome"],
            "escalation_reason": latest["escalation_reason"],
            "submitted_at": self.clock(),
            **values,
        }
        await run_in_threadpool(insert_verdict, store, row)
        return RedirectResponse(clarification_url(conversation_id) + "&saved=1", 303)


def routes(
    store: Warehouse,
    login_required: Callable[[Handler], Any],
    render: Render,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> list[Route]:
    """The routes of the clarification item kind (``ClarificationPages``), guarded by the
    review app's ``login_required`` and rendered by its ``render``: ``/clarifications``,
    ``/clarification`` and ``POST /clarification/verdict``."""
    pages = ClarificationPages(store, render, clock)
    return [
        Route("/clarifications", login_required(pages.listing)),
        Route("/clarification", login_required(pages.page)),
        Route("/clarification/verdict", login_required(pages.submit), methods=["POST"]),
    ]
