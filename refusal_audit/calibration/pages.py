"""The calibration room's pages in the review app (``routes``, registered by
``refusal_audit.review.web.app``): the approval gate for refusal-style calibration variants
(issue 13): the queue (``/calibration``), one run (``/calibration/runs/{run_id}``) and the
decision form (``POST /calibration/decision``).

Runs come from the warehouse (``warehouse.calibration``: ``calibration_runs``,
``calibration_variants``, ``calibration_decisions``). Every decision is checked here, on the
server, with ``processors.calibration.approval.check_decision`` whatever the page showed:
only an account with the ``approver`` role decides, never on a run it started (the run's
starter verified as a review-app account by ``calibrate run``), a variant that
failed a check is never approved, and every decision carries a note. Decisions are a log (the
newest per variant counts); each form carries a nonce, and the decision id is a hash of the
form's fields and that nonce (``warehouse.calibration.decision_id``), so a form sent twice is
one row.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from processors.calibration.approval import (
    MAX_DECISION_NOTE_CHARS,
    ApprovalError,
    CurrentDecision,
    check_decider,
    check_decision,
    current_decisions,
)
from schemas.calibration import CalibrationRun, VariantValidation
from schemas.review import ReviewerAccount
from warehouse.calibration import (
    approval_items,
    decision_id,
    decision_rows,
    get_run,
    insert_decision,
    runs_by_id,
)
from warehouse.client import WarehouseError
from warehouse.review import reviewer_accounts
from warehouse.store import Warehouse

QUEUE_LIMIT = 500
"""Most variants the queue page lists (pending ones first)."""
_NONCE = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
_FORBIDDEN = {"not_approver", "own_run", "unknown_starter", "unverified_starter", "failed_checks"}
"""Rule codes answered with 403; the other codes are a form to correct (422) or, for
``unknown_style``, a variant that does not exist (404)."""

Handler = Callable[[Request, ReviewerAccount], Awaitable[Response]]
Render = Callable[..., Response]


def run_url(calibration_run_id: str) -> str:
    """The page of one run (the id percent-encoded into the path)."""
    return "/calibration/runs/" + quote(calibration_run_id, safe="")


def new_nonce() -> str:
    """A fresh per-form nonce (22 URL-safe characters)."""
    return secrets.token_urlsafe(16)


@dataclass(frozen=True)
class QueueGroup:
    """One run of the approval queue: the run's facts and its passing variants (rows of
    ``warehouse.calibration.approval_items``, in spectrum order), ``pending`` of them without
    a decision."""

    calibration_run_id: str
    clause_id: str
    clause_title: str
    policy_bundle: str
    started_by: str
    created_at: datetime
    status: str
    variants: list[dict[str, Any]] = field(default_factory=list)
    starter_verified_by: str | None = None
    """How ``calibrate run`` verified the starter (None: not verified, or the run is missing
    from ``runs``: no one can decide on it)."""

    @property
    def pending(self) -> int:
        """How many of the variants have no decision yet."""
        return sum(1 for v in self.variants if v["decision"] is None)


def queue_groups(
    items: Sequence[Mapping[str, Any]], runs: Mapping[str, CalibrationRun]
) -> list[QueueGroup]:
    """The queue items (``approval_items`` rows) grouped by run: runs with a pending variant
    first, then oldest run first; in a run, the variants in spectrum order. ``runs``
    (``runs_by_id``) gives each run's clause title and status; a run missing from it is
    listed with what its items say."""
    groups: dict[str, QueueGroup] = {}
    for item in items:
        run_id = item["calibration_run_id"]
        if run_id not in groups:
            run = runs.get(run_id)
            groups[run_id] = QueueGroup(
                calibration_run_id=run_id,
                clause_id=item["clause_id"],
                clause_title=run.clause_title if run else "",
                policy_bundle=item["policy_bundle"],
                started_by=item["started_by"],
                created_at=item["created_at"],
                status=run.status if run else "",
                starter_verified_by=run.starter_verified_by if run else None,
            )
        groups[run_id].variants.append(dict(item))
    for group in groups.values():
        run = runs.get(group.calibration_run_id)
        order = run.spectrum.ids() if run else []
        group.variants.sort(
            key=lambda v: (order.index(v["style"]) if v["style"] in order else len(order),
                           v["style"])
        )  # fmt: skip
    return sorted(
        groups.values(),
        key=lambda g: (g.pending == 0, g.created_at, g.calibration_run_id),
    )


@dataclass(frozen=True)
class VariantView:
    """One variant of a run as the run page shows it: the spectrum style's ``label`` and
    ``base``, the text, the UX note, its ``validation`` and its ``current`` decision (None
    while pending)."""

    style: str
    label: str
    base: str
    description: str
    response_text: str
    ux_impact_note: str
    validation: VariantValidation
    current: CurrentDecision | None


def variant_views(
    run: CalibrationRun, current: Mapping[tuple[str, str], CurrentDecision]
) -> list[VariantView]:
    """Every variant of ``run`` (passing and failing, in the output's order) with its
    check and current decision (``current``: ``approval.current_decisions``). Empty for a
    run without output (escalated before any valid answer)."""
    if run.output is None:
        return []
    views = []
    for variant, check in zip(run.output.variants, run.validations, strict=True):
        style = run.spectrum.get(variant.style)
        views.append(
            VariantView(
                style=variant.style,
                label=style.label if style else variant.style,
                base=style.base if style else "",
                description=style.description if style else "",
                response_text=variant.response_text,
                ux_impact_note=variant.ux_impact_note,
                validation=check,
                current=current.get((run.calibration_run_id, variant.style)),
            )
        )
    return views


@dataclass(frozen=True)
class DecisionForm:
    """The fields of a posted decision form (``decision`` and ``note`` as typed: the rules
    are checked by ``check_decision``)."""

    calibration_run_id: str
    style: str
    decision: str
    note: str
    nonce: str


def decision_form(form: Mapping[str, Any]) -> DecisionForm:
    """The decision form's fields. Raises ``ValueError`` with a message for the approver
    when the form lacks its run, variant or nonce (a truncated or altered form: reloading
    the page fixes it)."""
    values = {k: str(form.get(k) or "") for k in ("run_id", "style", "decision", "note", "nonce")}
    if not values["run_id"].strip() or not values["style"].strip():
        raise ValueError("the form does not name its run and variant: reload the run's page")
    if not _NONCE.match(values["nonce"]):
        raise ValueError("the form lacks its one-time token: reload the run's page")
    return DecisionForm(values["run_id"], values["style"], values["decision"], values["note"],
                        values["nonce"])  # fmt: skip


def note_problem(note: str) -> str | None:
    """Why ``note`` cannot be stored as typed (control characters, or bytes that were not
    UTF-8 text), or None. Emptiness and length are ``check_decision``'s rules."""
    if "\ufffd" in note or any(ord(ch) < 32 and ch not in "\t\r\n" for ch in note):
        return "the note holds bytes that are not text; retype it"
    return None


def decided_at(
    now: datetime, rows: Sequence[Mapping[str, Any]], calibration_run_id: str, style: str
) -> datetime:
    """The time to store a new decision with: ``now``, or 1 ms after the variant's newest
    stored decision when that is not earlier (the column keeps milliseconds: two decisions
    within one millisecond, or a clock step back, must still keep their order)."""
    times: list[datetime] = [
        r["decided_at"]
        for r in rows
        if r["calibration_run_id"] == calibration_run_id and r["style"] == style
    ]
    if not times:
        return now
    return max(now, max(times) + timedelta(milliseconds=1))


def decider_problem(
    run: CalibrationRun, user: ReviewerAccount, accounts: Collection[str] | None = None
) -> str | None:
    """Why ``user`` may not decide on ``run``'s variants (``approval.check_decider``'s
    message; ``accounts``: the review app's account names), or None when they may."""
    try:
        check_decider(run, user.name, user.role, accounts)
    except ApprovalError as exc:
        if exc.code == "not_approver":
            return (
                f"You are logged in as a{'n' if user.role[0] in 'aeiou' else ''} "
                f"{user.role}: only an approver may approve or reject variants."
            )
        return str(exc)[0].upper() + str(exc)[1:] + "."
    return None


def _unavailable(exc: Exception) -> str:
    return (
        f"The warehouse is unavailable ({exc}). Nothing was saved: your decision and note are "
        "below, send them again in a moment."
    )


@dataclass(frozen=True)
class ApprovalPages:
    """The approval gate's pages over ``store``, rendered by the review app's ``render``;
    ``clock`` stamps decisions (UTC)."""

    store: Warehouse
    render: Render
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    async def queue(self, request: Request, user: ReviewerAccount) -> Response:
        """``GET /calibration`` (``?clause=`` filters by clause id): the runs with passing
        variants, pending ones first."""
        store, render = self.store, self.render
        clause = request.query_params.get("clause", "").strip() or None
        every = await run_in_threadpool(approval_items, store, limit=QUEUE_LIMIT)
        items = every
        if clause is not None:
            items = await run_in_threadpool(
                approval_items, store, clause_id=clause, limit=QUEUE_LIMIT
            )
        ids = sorted({i["calibration_run_id"] for i in items})
        runs = await run_in_threadpool(runs_by_id, store, ids)
        clauses = sorted({i["clause_id"] for i in every} | ({clause} if clause else set()))
        return render(request, "calibration.html", user=user, groups=queue_groups(items, runs),
                      clause=clause or "", clauses=clauses, truncated=len(items) >= QUEUE_LIMIT,
                      limit=QUEUE_LIMIT, run_url=run_url)  # fmt: skip

    async def run_page(self, request: Request, user: ReviewerAccount) -> Response:
        """``GET /calibration/runs/{run_id}``: one run, its variants and decision forms."""
        saved = request.query_params.get("saved")
        return await self.run_response(request, user, request.path_params["run_id"], saved=saved)

    async def run_response(
        self,
        request: Request,
        user: ReviewerAccount,
        run_id: str,
        *,
        posted: DecisionForm | None = None,
        error: str | None = None,
        status: int = 200,
        saved: str | None = None,
    ) -> Response:
        """The page of run ``run_id`` with ``status`` (404 for no such run), keeping a
        ``posted`` form with its ``error``."""
        store, render = self.store, self.render
        run = await run_in_threadpool(get_run, store, run_id)
        if run is None:
            return render(request, "error.html", 404, user=user,
                          message=f"No calibration run {run_id!r}.")  # fmt: skip
        rows = await run_in_threadpool(decision_rows, store, calibration_run_id=run_id)
        current = current_decisions(rows)
        log = sorted(rows, key=lambda r: (r["decided_at"], r["decision_id"]), reverse=True)
        variants = variant_views(run, current)
        nonces = {v.style: new_nonce() for v in variants}
        if posted is not None and posted.style in nonces:
            nonces[posted.style] = posted.nonce  # the same form again: a resend stays one row
        labels = {v.style: v.label for v in variants}
        accounts = list(await run_in_threadpool(reviewer_accounts, store))
        return render(request, "calibration_run.html", status, user=user, run=run,
                      variants=variants, log=log, labels=labels, nonces=nonces,
                      problem=decider_problem(run, user, accounts), posted=posted, error=error,
                      saved=saved if saved in labels else None, max_note=MAX_DECISION_NOTE_CHARS,
                      run_url=run_url)  # fmt: skip

    def retry(
        self, request: Request, user: ReviewerAccount, posted: DecisionForm, exc: Exception
    ) -> Response:
        """The 503 page offering the ``posted`` decision again after a warehouse failure."""
        return self.render(request, "calibration_retry.html", 503, user=user, posted=posted,
                           message=_unavailable(exc), max_note=MAX_DECISION_NOTE_CHARS,
                           run_url=run_url)  # fmt: skip

    async def decide(self, request: Request, user: ReviewerAccount) -> Response:
        """``POST /calibration/decision``: check and store one decision, then 303 to the run;
        403, 404 or 422 (the form again) when refused, 503 (retry page) when the warehouse
        failed."""
        store, render = self.store, self.render
        form = await request.form()
        run_id = str(form.get("run_id") or "")
        try:
            posted = decision_form(form)
        except ValueError as exc:
            if not run_id.strip():
                return render(request, "error.html", 422, user=user, message=str(exc))
            return await self.run_response(request, user, run_id, error=str(exc), status=422)
        try:
            run = await run_in_threadpool(get_run, store, posted.calibration_run_id)
            if run is None:
                return render(request, "error.html", 404, user=user,
                              message=f"No calibration run {run_id!r}.")  # fmt: skip
            accounts = list(await run_in_threadpool(reviewer_accounts, store))
            try:
                decision = check_decision(run, posted.style, user.name, user.role,
                                          posted.decision, posted.note, accounts)  # fmt: skip
            except ApprovalError as exc:
                if exc.code in _FORBIDDEN:
                    return render(request, "error.html", 403, user=user,
                                  message=f"Not saved: {exc}.")  # fmt: skip
                if exc.code == "unknown_style":
                    return render(request, "error.html", 404, user=user, message=f"{exc}.")
                return await self.run_response(request, user, run_id, posted=posted,
                                               error=f"{exc}.", status=422)  # fmt: skip
            problem = note_problem(posted.note)
            if problem is not None:
                return await self.run_response(request, user, run_id, posted=posted,
                                               error=f"{problem}.", status=422)  # fmt: skip
            note = posted.note.strip()
            ident = decision_id(run.calibration_run_id, posted.style, user.name, decision,
                                note, posted.nonce)  # fmt: skip
            rows = await run_in_threadpool(
                decision_rows, store, calibration_run_id=run.calibration_run_id
            )
            if not any(r["decision_id"] == ident for r in rows):  # else: a resent form
                when = decided_at(self.clock(), rows, run.calibration_run_id, posted.style)
                row = {
                    "decision_id": ident,
                    "calibration_run_id": run.calibration_run_id,
                    "style": posted.style,
                    "policy_bundle": run.policy_bundle,
                    "clause_id": run.clause_id,
                    "approver": user.name,
                    "decision": decision,
                    "note": note,
                    "decided_at": when,
                }
                await run_in_threadpool(insert_decision, store, row)
        except WarehouseError as exc:  # nothing (or nothing new) stored: offer the form again
            return self.retry(request, user, posted, exc)
        target = run_url(run.calibration_run_id) + "?" + urlencode({"saved": posted.style})
        return RedirectResponse(f"{target}#variant-{posted.style}", 303)


def routes(
    store: Warehouse,
    login_required: Callable[[Handler], Any],
    render: Render,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> list[Route]:
    """The routes of the approval gate (``ApprovalPages``), guarded by the review app's
    ``login_required`` and rendered by its ``render``: ``GET /calibration`` (the queue,
    ``?clause=`` filters by clause id), ``GET /calibration/runs/{run_id}`` and
    ``POST /calibration/decision``."""
    pages = ApprovalPages(store, render, clock)
    return [
        Route("/calibration", login_required(pages.queue)),
        Route("/calibration/runs/{run_id:path}", login_required(pages.run_page)),
        Route("/calibration/decision", login_required(pages.decide), methods=["POST"]),
    ]
