"""The approval gate of refusal variants: who may decide, and what the decisions add up to.

Rules (issue 13; docs/calibration.md, "Approval"):

- only an account with the ``approver`` role decides (``APPROVER_ROLE``);
- nobody decides on a run they started (``CalibrationRun.started_by``, compared without case
  and surrounding white space; a run whose starter is unknown, or was not verified as a
  review-app account by ``calibrate run`` (``starter_verified_by``: password or API token),
  cannot be approved at all: the rule could not be checked);
- only a variant that passed every regression check, of a run that was not escalated, may be
  approved; a failing variant may be rejected (to close it) but never approved;
- every decision needs a note (why), at most ``MAX_DECISION_NOTE_CHARS`` characters;
- decisions are a log: a new decision on the same variant supersedes the previous one, and
  the newest counts (:func:`current_decisions`).

Pure: the web app and the CLI pass the run, the user and the stored decisions.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from schemas.calibration import CalibrationRun

APPROVER_ROLE = "approver"
"""The review-app role that may approve or reject variants."""
DECISIONS: tuple[str, ...] = ("approve", "reject")
MAX_DECISION_NOTE_CHARS = 2_000

Decision = Literal["approve", "reject"]
VERIFIED_BY = frozenset({"password", "token"})
"""How ``calibrate run`` verifies a run's starter (``CalibrationRun.starter_verified_by``)."""
PAST_TENSE = {"approve": "approved", "reject": "rejected"}
"""How a decision reads once taken ("approved", "rejected")."""


class ApprovalError(ValueError):
    """A decision the gate refuses: ``code`` (``not_approver``, ``own_run``,
    ``unknown_starter``, ``unverified_starter``, ``unknown_style``, ``failed_checks``,
    ``escalated``, ``bad_decision``, ``note_required``, ``note_too_long``) and a message for
    the user."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def same_person(a: str, b: str) -> bool:
    """Whether two account names name the same person: compared after Unicode NFKC
    normalisation, without surrounding white space and case (``Ann`` started the run,
    ``ann`` may not approve it). Look-alikes from other scripts are not folded: the gate
    also requires the starter to be a review-app account (:func:`check_decider`)."""

    def key(name: str) -> str:
        return unicodedata.normalize("NFKC", name).strip().casefold()

    return key(a) == key(b)


def check_decider(
    run: CalibrationRun, user: str, role: str, accounts: Collection[str] | None = None
) -> None:
    """Whether ``user`` (with review-app ``role``) may decide on ``run``'s variants at all.
    ``accounts``: the review app's account names; when given, the run's starter must be one
    of them (a starter that names no account, e.g. a look-alike spelling of the approver's
    own name, could be anyone). The starter must also be verified
    (``run.starter_verified_by``): a name typed on the command line, or a Kafka request's
    ``requested_by``, could be a colleague's. Raises :class:`ApprovalError`
    (``not_approver``, ``unknown_starter``, ``own_run``, ``unverified_starter``,
    ``escalated``); returns None when they may."""
    if role != APPROVER_ROLE:
        raise ApprovalError("not_approver", "only an approver may approve or reject variants")
    starter = (run.started_by or "").strip()
    if not starter:
        raise ApprovalError(
            "unknown_starter", "the run names nobody who started it, so self-approval "
            "cannot be ruled out: start it again with calibrate run (logged in as your "
            "review-app account)",
        )  # fmt: skip
    if same_person(starter, user):
        raise ApprovalError("own_run", "you started this run: another approver must decide")
    if accounts is not None and not any(same_person(starter, a) for a in accounts):
        raise ApprovalError(
            "unknown_starter", f"the run's starter {starter!r} is not an account of the review "
            "app, so self-approval cannot be ruled out: start it again with --started-by "
            "naming your account",
        )  # fmt: skip
    if run.starter_verified_by not in VERIFIED_BY:
        raise ApprovalError(
            "unverified_starter", f"the run's starter {starter!r} was not verified (a name as "
            "typed or sent, not a login), so self-approval cannot be ruled out: start it "
            "again with calibrate run, logged in as your review-app account",
        )  # fmt: skip
    if run.status == "escalated":
        raise ApprovalError(
            "escalated", "the run was escalated (no complete, checked answer), so none of "
            "its variants can be decided on: start a new run",
        )  # fmt: skip


def check_decision(
    run: CalibrationRun,
    style: str,
    user: str,
    role: str,
    decision: str,
    note: str,
    accounts: Collection[str] | None = None,
) -> Decision:
    """The decision, if ``user`` (with review-app ``role``) may take it on ``style`` of
    ``run`` (:func:`check_decider` first). Raises :class:`ApprovalError` naming the rule
    that forbids it."""
    check_decider(run, user, role, accounts)
    if decision not in DECISIONS:
        raise ApprovalError("bad_decision", f"decision must be one of {', '.join(DECISIONS)}")
    validation = next((v for v in run.validations if v.style == style), None)
    if validation is None:
        raise ApprovalError("unknown_style", f"run has no variant of style {style!r}")
    if decision == "approve" and not validation.passed:
        reasons = ", ".join(validation.reasons)
        raise ApprovalError(
            "failed_checks", f"this variant failed its safety checks ({reasons}) and can "
            "never be approved",
        )  # fmt: skip
    text = note.strip()
    if not text:
        raise ApprovalError("note_required", "a note is required: say why")
    if len(text) > MAX_DECISION_NOTE_CHARS:
        raise ApprovalError(
            "note_too_long", f"the note is longer than {MAX_DECISION_NOTE_CHARS} characters"
        )
    return "approve" if decision == "approve" else "reject"


@dataclass(frozen=True)
class CurrentDecision:
    """The decision that counts for one variant: the newest one."""

    calibration_run_id: str
    style: str
    decision: str
    approver: str
    note: str
    decided_at: datetime


def current_decisions(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], CurrentDecision]:
    """(run id, style) -> its newest decision, from decision rows (``calibration_decisions``
    columns; ties on ``decided_at`` broken by ``decision_id``, so the answer does not depend
    on the rows' order)."""
    out: dict[tuple[str, str], CurrentDecision] = {}
    order = sorted(rows, key=lambda r: (r["decided_at"], r["decision_id"]))
    for r in order:
        out[(r["calibration_run_id"], r["style"])] = CurrentDecision(
            r["calibration_run_id"], r["style"], r["decision"], r["approver"], r["note"],
            r["decided_at"],
        )  # fmt: skip
    return out
