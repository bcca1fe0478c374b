"""``calibrate run`` records a verified starter (issue 23): the review-app account it is
run as, verified by its password or by an API token (``review token create``, stored as an
argon2id hash only), so an approver can no longer name a colleague as the starter of a run
and then approve it (the approval gate: tests/test_calibration_approval.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from calibration_starter import add_account, make_token
from typer.testing import CliRunner

from refusal_audit.cli import app
from refusal_audit.config import Settings
from warehouse.store import Warehouse

pytestmark = pytest.mark.integration

REQUEST = {"log_id": "v-1", "refusal": "I can't help with that.", "clause_id": "AUP-2.3"}


def calibrate(env: dict[str, str], tmp_path: Path, *extra: str, stdin: str = "") -> Any:
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps(REQUEST) + "\n", encoding="utf-8")
    return CliRunner().invoke(app, ["calibrate", "run", "--file", str(requests), "--json",
                                    *extra], input=stdin, env=env)  # fmt: skip


def starters(env: dict[str, str]) -> list[tuple[str, str | None]]:
    """(started_by, starter_verified_by) of every stored run, oldest first."""
    store = Warehouse.open(Settings(warehouse_dsn=env["REFUSAL_AUDIT_WAREHOUSE_DSN"],
                                    warehouse_database=env["REFUSAL_AUDIT_WAREHOUSE_DATABASE"]))
    rows = store.select("SELECT run FROM {db:Identifier}.calibration_runs FINAL "
                        "ORDER BY created_at, calibration_run_id")  # fmt: skip
    store.close()
    return [(r["started_by"], r.get("starter_verified_by"))
            for r in (json.loads(row["run"]) for row in rows)]  # fmt: skip


def test_the_starter_is_verified_by_password(cli_env: dict[str, str], tmp_path: Path) -> None:
    add_account(cli_env, "priya", "priya-password-1", role="reviewer")
    add_account(cli_env, "omar", "omar-password-1")
    ok = calibrate(cli_env, tmp_path, "--started-by", "priya", stdin="priya-password-1\n")
    assert ok.exit_code == 0, ok.output
    assert [(r["started_by"], r["starter_verified_by"]) for r in json.loads(ok.stdout)] == [
        ("priya", "password")
    ]
    # the attack: omar, an approver, names priya without knowing her password
    forged = calibrate(cli_env, tmp_path, "--started-by", "priya", stdin="omar-password-1\n")
    assert forged.exit_code == 2
    assert "cannot verify the starter 'priya'" in forged.output
    # a name that is no account: refused with the same words (no account enumeration)
    unknown = calibrate(cli_env, tmp_path, "--started-by", "zoe", stdin="priya-password-1\n")
    assert unknown.exit_code == 2 and "cannot verify the starter 'zoe'" in unknown.output
    empty = calibrate(cli_env, tmp_path, "--started-by", "priya", stdin="")
    assert empty.exit_code == 2 and "no password for 'priya'" in empty.output
    # without --started-by: $USER, verified the same way
    by_user = calibrate({**cli_env, "USER": "omar"}, tmp_path, stdin="omar-password-1\n")
    assert by_user.exit_code == 0, by_user.output
    assert starters(cli_env) == [("priya", "password"), ("omar", "password")]


def test_the_starter_is_verified_by_an_api_token(cli_env: dict[str, str], tmp_path: Path) -> None:
    add_account(cli_env, "priya", "priya-password-1")
    token = make_token(cli_env, "priya")
    assert token.startswith("rat_")
    by_env = calibrate({**cli_env, "REFUSAL_AUDIT_CALIBRATION_TOKEN": token}, tmp_path)
    assert by_env.exit_code == 0, by_env.output
    token_file = tmp_path / "priya.token"
    token_file.write_text(token + "\n", encoding="utf-8")
    by_file = calibrate(cli_env, tmp_path, "--token-file", str(token_file),
                        "--started-by", "priya")  # fmt: skip
    assert by_file.exit_code == 0, by_file.output
    assert starters(cli_env) == [("priya", "token"), ("priya", "token")]

    # only an argon2id hash of the secret is stored; the listing shows the id, not the secret
    store = Warehouse.open(Settings(warehouse_dsn=cli_env["REFUSAL_AUDIT_WAREHOUSE_DSN"],
                                    warehouse_database=cli_env["REFUSAL_AUDIT_WAREHOUSE_DATABASE"]))
    rows = store.select("SELECT * FROM {db:Identifier}.reviewer_tokens FINAL")
    store.close()
    token_id, secret = token.removeprefix("rat_").split("_", 1)
    assert len(rows) == 1 and rows[0]["token_id"] == token_id
    assert rows[0]["token_hash"].startswith("$argon2id$")
    assert not any(secret in str(value) for value in rows[0].values())
    listed = CliRunner().invoke(app, ["review", "token", "list"], env=cli_env)
    assert token_id in listed.stdout and secret not in listed.stdout

    refusals = {
        "not the account of the API token": ("--token-file", str(token_file),
                                             "--started-by", "omar"),
        "not valid": ("--token-file", str(_write(tmp_path, token[:-1] + "AB"[token[-1] == "A"]))),
        "not an API token": ("--token-file", str(_write(tmp_path, "hunter2"))),
    }  # fmt: skip
    for message, extra in refusals.items():
        refused = calibrate(cli_env, tmp_path, *extra)
        assert refused.exit_code == 2 and message in refused.output, (message, refused.output)
    revoked = CliRunner().invoke(app, ["review", "token", "revoke", token_id], env=cli_env)
    assert revoked.exit_code == 0, revoked.output
    after = calibrate(cli_env, tmp_path, "--token-file", str(token_file))
    assert after.exit_code == 2 and f"API token {token_id} is revoked" in after.output
    fresh = make_token(cli_env, "priya")
    gone = CliRunner().invoke(app, ["review", "remove-reviewer", "priya"], env=cli_env)
    assert gone.exit_code == 0, gone.output
    inactive = calibrate({**cli_env, "REFUSAL_AUDIT_CALIBRATION_TOKEN": fresh}, tmp_path)
    assert inactive.exit_code == 2 and "'priya'" in inactive.output and "not active" in (
        inactive.output
    )
    assert len(starters(cli_env)) == 2  # nothing was run for a refused starter
    nobody = CliRunner().invoke(app, ["review", "token", "create", "--reviewer", "priya"],
                                env=cli_env)  # fmt: skip
    assert nobody.exit_code == 2 and "no active review-app account 'priya'" in nobody.output


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / f"token-{abs(hash(text))}.txt"
    path.write_text(text + "\n", encoding="utf-8")
    return path
