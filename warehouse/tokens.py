"""API tokens of review-app accounts in ClickHouse (``reviewer_tokens``, migration 0020): one
row per token version (a revocation is a newer row), read with ``FINAL``. The rows hold an
argon2id hash of each token's secret, never the secret (``refusal_audit.review.api_tokens``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from warehouse.store import Warehouse, to_utc

TOKEN_COLUMNS = (
    "token_id", "reviewer", "token_hash", "created_by", "created_at", "revoked", "updated_at",
)  # fmt: skip


@dataclass(frozen=True)
class TokenRow:
    """One stored token: its public ``token_id``, the ``reviewer`` account it acts as, the
    argon2id PHC string of its secret, who made it and when, whether it is ``revoked``, and
    the version time ``updated_at`` (UTC)."""

    token_id: str
    reviewer: str
    token_hash: str
    created_by: str
    created_at: datetime
    revoked: bool
    updated_at: datetime


def save_token(store: Warehouse, row: TokenRow) -> None:
    """Store a version of a token (the newest ``updated_at`` counts). Raises
    ``WarehouseError``."""
    values = asdict(row)
    values["created_at"] = to_utc(row.created_at)
    values["updated_at"] = to_utc(row.updated_at)
    store.insert_rows("reviewer_tokens", TOKEN_COLUMNS, [[values[c] for c in TOKEN_COLUMNS]])


def get_token(store: Warehouse, token_id: str) -> TokenRow | None:
    """The current version of token ``token_id``, or None. Raises ``WarehouseError``."""
    rows = store.select(
        "SELECT * FROM {db:Identifier}.reviewer_tokens FINAL WHERE token_id = {id:String}",
        {"id": token_id},
    )
    return TokenRow(**{c: rows[0][c] for c in TOKEN_COLUMNS}) if rows else None


def list_tokens(store: Warehouse) -> list[TokenRow]:
    """Every token's current version (revoked ones too), oldest first. Raises
    ``WarehouseError``."""
    rows = store.select(
        "SELECT * FROM {db:Identifier}.reviewer_tokens FINAL ORDER BY created_at, token_id"
    )
    return [TokenRow(**{c: r[c] for c in TOKEN_COLUMNS}) for r in rows]
