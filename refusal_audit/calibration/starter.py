"""The verified starter of ``calibrate run`` (issue 23): the review-app account that starts
the runs, authenticated, so the approval gate (``processors.calibration.approval``) compares
verified identities, not a name typed on the command line.

Two ways (docs/calibration.md, "Security"): the account's password (``--started-by NAME``,
the password asked on a terminal or read from the first line of stdin), or an API token of
the account (``review token create``; given by ``--token-file`` or the
``calibration_token`` setting, ``REFUSAL_AUDIT_CALIBRATION_TOKEN``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from processors.calibration.approval import same_person
from refusal_audit.review.accounts import AccountBook
from refusal_audit.review.api_tokens import TokenError, token_account
from warehouse.store import Warehouse

Method = Literal["password", "token"]


class StarterError(ValueError):
    """The starter could not be verified (the message says why, never a secret)."""


@dataclass(frozen=True)
class VerifiedStarter:
    """A review-app account ``name`` verified by ``method`` (``password`` or ``token``)."""

    name: str
    method: Method


def starter_by_password(store: Warehouse, name: str, password: str) -> VerifiedStarter:
    """``name`` verified by its review-app password. Raises :class:`StarterError` (the same
    message for an unknown name and a wrong password), ``WarehouseError``."""
    account = AccountBook(store, ttl=0.0).authenticate(name, password)
    if account is None:
        raise StarterError(
            f"cannot verify the starter {name!r}: no active review-app account with that name "
            "and password (an admin creates it: refusal-audit review add-reviewer NAME)"
        )
    return VerifiedStarter(account.name, "password")


def starter_by_token(store: Warehouse, token: str, claimed: str | None = None) -> VerifiedStarter:
    """The account of API ``token``; with ``claimed`` (``--started-by``), it must be that
    account. Raises :class:`StarterError`, ``WarehouseError``."""
    try:
        account = token_account(store, token)
    except TokenError as exc:
        raise StarterError(f"cannot verify the starter: {exc}") from None
    if claimed is not None and not same_person(claimed, account.name):
        raise StarterError(
            f"--started-by {claimed!r} is not the account of the API token ({account.name!r})"
        )
    return VerifiedStarter(account.name, "token")


def read_token_file(path: Path) -> str:
    """The API token in ``path`` (its first line). Raises :class:`StarterError` when the file
    cannot be read or is empty."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StarterError(f"cannot read the token file {path}: {exc}") from None
    lines = text.strip().splitlines()
    if not lines:
        raise StarterError(f"the token file {path} is empty")
    return lines[0].strip()
