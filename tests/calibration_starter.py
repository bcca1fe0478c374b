"""A verified starter for ``calibrate run`` in CLI tests: a review-app account and an API
token of it (``review token create``), given to the CLI by ``REFUSAL_AUDIT_CALIBRATION_TOKEN``."""

from __future__ import annotations

from typer.testing import CliRunner

from refusal_audit.cli import app


def add_account(env: dict[str, str], name: str, password: str, role: str = "approver") -> None:
    """Create the review-app account ``name`` in ``env``'s warehouse (the CLI)."""
    made = CliRunner().invoke(app, ["review", "add-reviewer", name, "--role", role],
                              input=password + "\n", env=env)  # fmt: skip
    assert made.exit_code == 0, made.output


def make_token(env: dict[str, str], name: str) -> str:
    """A new API token of the account ``name`` (``review token create``, stdout)."""
    made = CliRunner().invoke(app, ["review", "token", "create", "--reviewer", name], env=env)
    assert made.exit_code == 0, made.output
    return str(made.stdout.strip())


def verified(env: dict[str, str], name: str = "priya") -> dict[str, str]:
    """``env`` with ``calibrate run`` verified as the new approver account ``name`` (by an
    API token of it)."""
    add_account(env, name, f"{name}-password-1")
    return {**env, "REFUSAL_AUDIT_CALIBRATION_TOKEN": make_token(env, name)}
