"""``refusal-audit review token create|list|revoke``: API tokens of review-app accounts
(``refusal_audit.review.api_tokens``; ``calibrate run`` verifies its starter with one, for CI and
scripts: docs/calibration.md, "Security"). Registered on ``review`` by
``refusal_audit.cli``.

Exit codes: 0 done; 2 usage error (no such active account or token, a file that cannot be
written) or the warehouse cannot be read or written.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.table import Table

from refusal_audit.cli_common import console, err, fail_usage, open_store, settings

token_app = typer.Typer(
    help="API tokens of review-app accounts (calibrate run without a password).",
    no_args_is_help=True,
)


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to a new file ``path`` with mode 0600 (never over an existing file).
    Raises ``OSError``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text + "\n")


@token_app.command("create")
def token_create(
    reviewer: str = typer.Option(..., "--reviewer", help="The account the token acts as."),
    out: Path | None = typer.Option(
        None, "--out", help="Write the token to this new file (mode 0600) instead of stdout."
    ),
) -> None:
    """Make an API token acting as an active review-app account; it is shown once (stdout,
    or a new 0600 file with --out) and only an argon2id hash of it is stored."""
    from refusal_audit.review.api_tokens import create_token
    from warehouse.client import WarehouseError

    if out is not None and out.exists():
        raise fail_usage(f"{out} exists: name a new file")
    try:
        made = create_token(open_store(settings()), reviewer, os.environ.get("USER") or "")
    except (ValueError, WarehouseError) as exc:
        raise fail_usage(str(exc)) from exc
    if out is None:
        console.file.write(made.token + "\n")
    else:
        try:
            _write_private(out, made.token)
        except OSError as exc:
            raise fail_usage(
                f"cannot write {out}: {exc} (revoke token {made.row.token_id})"
            ) from exc
    err.print(
        f"API token {made.row.token_id} for {made.row.reviewer} made"
        + (f", written to {out}" if out else "")
        + ": it is shown only once (revoke it with review token revoke "
        f"{made.row.token_id})"
    )


@token_app.command("list")
def token_list() -> None:
    """The API tokens (id, account, who made it and when, revoked): never their secrets."""
    from warehouse.client import WarehouseError
    from warehouse.tokens import list_tokens

    try:
        rows = list_tokens(open_store(settings()))
    except WarehouseError as exc:
        raise fail_usage(str(exc)) from exc
    table = Table(title=f"{len(rows)} API tokens")
    for column in ("token id", "account", "created by", "created", "revoked"):
        table.add_column(column)
    for r in rows:
        table.add_row(r.token_id, r.reviewer, r.created_by or "-",
                      f"{r.created_at:%Y-%m-%d %H:%M}", "yes" if r.revoked else "no")  # fmt: skip
    console.print(table)


@token_app.command("revoke")
def token_revoke(
    token_id: str = typer.Argument(..., help="The token's id (review token list)."),
) -> None:
    """Revoke an API token: it no longer verifies anyone."""
    from refusal_audit.review.api_tokens import revoke_token
    from warehouse.client import WarehouseError

    try:
        found = revoke_token(open_store(settings()), token_id)
    except WarehouseError as exc:
        raise fail_usage(str(exc)) from exc
    if not found:
        raise fail_usage(f"no API token {token_id!r}")
    err.print(f"API token {token_id} revoked")
