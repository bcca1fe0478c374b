"""API tokens of review-app accounts (issue 23): for a command-line tool or a CI job to act
as an account without its password (``calibrate run`` records the token's account as the
verified starter of its runs).

An admin makes one with ``refusal-audit review token create --reviewer NAME``; it is shown
once and looks like ``rat_<token id>_<secret>``: 16 hex digits of public id (to find the
row) and 256 random bits of secret (``secrets.token_urlsafe(32)``). Only an argon2id hash of
the secret is stored (argon2-cffi's ``PasswordHasher``, the hashing of the review app's
passwords; ``warehouse.tokens``), so the warehouse, a backup or ``review token list`` never
reveal a usable token. A token acts for its account only while the account is active and
the token is not revoked.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from schemas.review import ReviewerAccount
from warehouse.review import reviewer_accounts
from warehouse.store import Warehouse
from warehouse.tokens import TokenRow, get_token, save_token

TOKEN_PREFIX = "rat_"
_TOKEN = re.compile(r"^rat_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
_hasher = PasswordHasher()
# verified against when the token id is unknown, so an unknown id costs as much as a wrong
# secret (no probing of token ids through timing)
_DUMMY_HASH = _hasher.hash("not a real token secret, only for timing")


class TokenError(ValueError):
    """A token that does not authenticate (malformed, unknown, revoked, wrong secret, or its
    account is gone or inactive); the message never holds the token."""


@dataclass(frozen=True)
class NewToken:
    """A token just made: ``token`` (the whole text, shown once) and its stored ``row``."""

    token: str
    row: TokenRow


def create_token(
    store: Warehouse, reviewer: str, created_by: str, now: datetime | None = None
) -> NewToken:
    """Make and store a token acting as the active account ``reviewer``. Raises
    ``ValueError`` when there is no such active account, ``WarehouseError``."""
    account = reviewer_accounts(store).get(reviewer)
    if account is None or not account.active:
        raise ValueError(f"no active review-app account {reviewer!r} (review add-reviewer)")
    token_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    when = now or datetime.now(UTC)
    row = TokenRow(token_id=token_id, reviewer=account.name, token_hash=_hasher.hash(secret),
                   created_by=created_by, created_at=when, revoked=False,
                   updated_at=when)  # fmt: skip
    save_token(store, row)
    return NewToken(f"{TOKEN_PREFIX}{token_id}_{secret}", row)


def revoke_token(store: Warehouse, token_id: str, now: datetime | None = None) -> bool:
    """Revoke token ``token_id`` (a new version of its row). False when there is no such
    token. Raises ``WarehouseError``."""
    row = get_token(store, token_id)
    if row is None:
        return False
    when = max(now or datetime.now(UTC), row.updated_at)
    save_token(store, TokenRow(**{**row.__dict__, "revoked": True, "updated_at": when}))
    return True


def token_account(store: Warehouse, token: str) -> ReviewerAccount:
    """The active account ``token`` acts as. Raises :class:`TokenError` (the same cost for an
    unknown id as for a wrong secret), ``WarehouseError``."""
    match = _TOKEN.match(token.strip())
    if match is None:
        raise TokenError(f"not an API token (expected {TOKEN_PREFIX}<id>_<secret>)")
    token_id, secret = match.groups()
    row = get_token(store, token_id)
    try:
        _hasher.verify(row.token_hash if row is not None else _DUMMY_HASH, secret)
    except (VerificationError, InvalidHashError):
        raise TokenError("the API token is not valid (unknown or wrong)") from None
    if row is None:
        raise TokenError("the API token is not valid (unknown or wrong)")
    if row.revoked:
        raise TokenError(f"the API token {token_id} is revoked")
    account = reviewer_accounts(store).get(row.reviewer)
    if account is None or not account.active:
        raise TokenError(f"the account {row.reviewer!r} of API token {token_id} is not active")
    return account
