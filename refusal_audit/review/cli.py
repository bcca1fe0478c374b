"""``refusal-audit review export``, ``review import``, ``review stats``, ``review labels`` and
``review clarification-labels`` (``refusal_audit.cli`` registers them).

Exit codes: 0 done; 1 some rows of an import were refused (listed with line and reason; the
good rows are stored); 2 usage error (unreadable file, warehouse or configuration).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

import typer

from processors.agreement import DEFAULT_MIN_ITEMS, Agreement, grouping_rule
from refusal_audit.bundles import load_bundles
from refusal_audit.cli_common import (
    EXIT_FAILURES,
    as_utc,
    console,
    default_of,
    fail_usage,
    open_store,
    settings,
)
from refusal_audit.config import ConfigError
from refusal_audit.output import OutputFormat, render
from warehouse.client import WarehouseError


def review_import(
    file: Path = typer.Argument(..., metavar="FILE", help="Verdicts as .csv or .jsonl."),
) -> None:
    """Import reviewer verdicts for assessed log ids (columns: log_id, reviewer, verdict
    agree|disagree, corrected_category, corrected_false_positive, corrected_clause, note,
    optional policy_bundle). Bad rows are listed and left out; re-importing changes nothing."""
    from refusal_audit.review.verdict_files import import_verdicts

    cfg = settings()
    try:
        bundles = load_bundles(cfg.policy_bundles, cfg.data_dir)
        report = import_verdicts(open_store(cfg), bundles, file)
    except (ConfigError, OSError, WarehouseError) as exc:
        raise fail_usage(f"review import {file}: {exc}") from exc
    new = report.imported - report.already_stored
    console.print(
        f"{report.rows} row(s) read, {new} new verdict(s) stored, {report.already_stored} "
        f"already stored (unchanged), {len(report.errors)} refused"
    )
    if report.errors:
        render(["line", "reason"], report.errors, OutputFormat.table, console, "Refused rows")
        raise typer.Exit(EXIT_FAILURES)


def _agreement_cells(a: Agreement) -> list[Any]:
    if a.insufficient_data:
        return [a.n, a.note, ""]
    rate = f"{a.rate:.3f} [{a.rate_low:.3f}, {a.rate_high:.3f}]"
    kappa = "n/a" if a.kappa is None else f"{a.kappa:.3f} [{a.kappa_low:.3f}, {a.kappa_high:.3f}]"
    return [a.n, rate, kappa]


def review_stats(
    min_items: int = typer.Option(
        DEFAULT_MIN_ITEMS, min=1, help="Fewer compared items than this: insufficient data."
    ),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per group."),
) -> None:
    """Agreement of reviewers with the model per model, bundle, engine, prompt version and
    event week (the Monday of the judged event's ISO week, UTC, as in the report and `query
    review_agreement`; and a roll-up per bundle, engine and prompt version): on the false-positive
    judgement and the top-level category, each with a Wilson 95% interval and Cohen's kappa
    with its 95% interval; and the share of over-refusals reviewers found among the randomly
    sampled unflagged items (what the model missed)."""
    from refusal_audit.review.verdict_files import stats_from_store

    cfg = settings()
    try:
        bundles = load_bundles(cfg.policy_bundles, cfg.data_dir)
        groups = stats_from_store(open_store(cfg), bundles, min_items)
    except (ConfigError, WarehouseError) as exc:
        raise fail_usage(str(exc)) from exc
    if as_json:
        rows = [[asdict(g)] for g in groups]
        render(["group"], rows, OutputFormat.json, console)
        return
    if not groups:
        console.print("no verdicts yet: nothing to compare")
        return
    table_rows = []
    for g in groups:
        human, n, low, high = g.verified_fp
        verified = f"{human}/{n} [{low:.3f}, {high:.3f}]" if n else "no random sample"
        table_rows.append(
            [*g.key, *_agreement_cells(g.false_positive),
             *_agreement_cells(g.category)[1:], verified]
        )  # fmt: skip
    render(
        ["model", "bundle", "engine", "prompt", "event week", "items",
         "false-positive agreement", "fp kappa", "category agreement", "category kappa",
         "missed over-refusals (random sample)"],
        table_rows,
        OutputFormat.table,
        console,
        "Human review: agreement with the model",
    )  # fmt: skip
    console.print(grouping_rule(min_items))


def review_export(
    out: Path = typer.Option(..., "--out", help="Write the items here: .csv or .jsonl."),
    bundle: str | None = typer.Option(None, "--bundle", "-b", help="Only this policy bundle."),
    model: str | None = typer.Option(None, help="Only this model."),
    product: str | None = typer.Option(None, help="Only this product."),
    category: str | None = typer.Option(None, help="Only the model's category."),
    since: datetime | None = typer.Option(None, help="Events at/after this time (UTC)."),
    until: datetime | None = typer.Option(None, help="Events before this time (UTC)."),
    reviews_per_item: int | None = typer.Option(
        None, min=1, help="Verdicts an item needs (default: setting review_reviews_per_item)."
    ),
) -> None:
    """Write the open review items (flagged or sampled assessments still short of verdicts)
    with the texts and the model's verdict, for review in a spreadsheet tool; fill in
    reviewer, verdict and corrections and `review import` the file. In CSV, a cell that would
    start like a formula (= + - @, tab, CR) gets a leading ' that `review import` removes."""
    from refusal_audit.review.verdict_files import ItemFilter, open_items, write_items

    cfg = settings()
    where = ItemFilter(bundle, model, product, category, as_utc(since), as_utc(until))
    needed = reviews_per_item or cfg.review_reviews_per_item
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        bundles = load_bundles(cfg.policy_bundles, cfg.data_dir)
        rows = open_items(open_store(cfg), where, needed, bundles)
        write_items(rows, out)
    except (ConfigError, OSError, WarehouseError) as exc:
        raise fail_usage(f"review export: {exc}") from exc
    console.print(f"{len(rows)} open review item(s) written to {out}")


def review_labels(
    out: Path = typer.Option(..., "--out", help="Write the labelled events here (.jsonl)."),
) -> None:
    """Write the reviewed events labelled with the reviewers' verdicts as native JSON Lines,
    so `refusal-audit eval FILE` measures any engine against the team's own reviewers."""
    from refusal_audit.review.verdict_files import labelled_events

    cfg = settings()
    try:
        lines = labelled_events(open_store(cfg), load_bundles(cfg.policy_bundles, cfg.data_dir))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"".join(line + b"\n" for line in lines))
    except (ConfigError, OSError, WarehouseError) as exc:
        raise fail_usage(f"review labels: {exc}") from exc
    console.print(f"{len(lines)} reviewed event(s) written to {out}")


def review_clarification_labels(
    out: Path = typer.Option(
        ..., "--out", help="Write the labelled question sets here (.jsonl, mode 0600)."
    ),
) -> None:
    """Write the reviewed clarification conversations as labelled question sets (the
    datasets/circumvention format, one JSON line each), so `refusal-audit train
    --with-verdicts FILE` trains the circumvention model on them and `refusal-audit clarify
    eval FILE` measures the check against the reviewers. Each conversation is exported at its
    newest revision that has verdicts, with the distinct questions it asked up to it (in
    first-asked order); the label is `reject` when at least half of the reviewers (each
    one's newest verdict ON that revision; verdicts on earlier revisions do not count) said
    the questions were not neutral (a tie rejects: the safe side for a safety check), else
    `acceptable`. The reviewers' notes are redacted as the audit redacts events
    (redaction_enabled, redaction_kinds). The file is made mode 0600, an existing one too. A
    conversation without a verdict is not written; a reviewed one with no question asked
    (its set was rejected before it reached the user) is counted and left out."""
    from refusal_audit.audit.engine_setup import configured_redactor
    from refusal_audit.clarification.verdict_labels import clarification_labels, write_private_lines

    cfg = settings()
    try:
        labels = clarification_labels(open_store(cfg), configured_redactor(cfg))
        out.parent.mkdir(parents=True, exist_ok=True)
        write_private_lines(labels.lines, out)
    except (ConfigError, OSError, WarehouseError) as exc:
        raise fail_usage(f"review clarification-labels: {exc}") from exc
    counts = ", ".join(f"{labels.labels[k]} {k}" for k in ("acceptable", "reject"))
    console.print(f"{len(labels.lines)} reviewed question set(s) written to {out} ({counts})")
    for reason, n in sorted(labels.skipped.items()):
        console.print(f"{n} reviewed conversation(s) not written: {reason}")


def _read_password() -> str:
    """The new password: asked twice on a terminal, else the first line of stdin."""
    import getpass
    import sys

    if sys.stdin.isatty():
        first = getpass.getpass("Password: ")
        if getpass.getpass("Repeat: ") != first:
            raise fail_usage("the passwords differ")
        return first
    return sys.stdin.readline().rstrip("\r\n")


def review_add_reviewer(
    name: str = typer.Argument(..., help="Login name (letters, digits, . _ @ -)."),
    role: str = typer.Option(
        "reviewer",
        help="reviewer, approver or admin (approvers also approve or reject calibration "
        "variants; admins manage queues).",
    ),
    proxy_only: bool = typer.Option(
        False, help="No password: the account logs in only through the trusted proxy header."
    ),
) -> None:
    """Create or update a review app account; the password is read from stdin (asked twice
    on a terminal) and stored as an argon2id hash. Re-running changes role and password."""
    from pydantic import ValidationError

    from refusal_audit.review.accounts import add_reviewer
    from schemas.review import ROLES

    chosen = next((r for r in ROLES if r == role), None)
    if chosen is None:
        raise fail_usage(f"--role {role!r}: use {', '.join(ROLES[:-1])} or {ROLES[-1]}")
    password = None if proxy_only else _read_password()
    cfg = settings()
    try:
        add_reviewer(open_store(cfg), name, chosen, password)
    except ValidationError as exc:
        raise fail_usage(f"reviewer name {name!r}: {exc.errors()[0]['msg']}") from exc
    except (ValueError, WarehouseError) as exc:
        raise fail_usage(str(exc)) from exc
    console.print(f"reviewer {name} saved (role {role})")


def review_remove_reviewer(name: str = typer.Argument(..., help="Login name.")) -> None:
    """Deactivate a review app account (their verdicts stay; their sessions end)."""
    from refusal_audit.review.accounts import deactivate_reviewer

    cfg = settings()
    try:
        found = deactivate_reviewer(open_store(cfg), name)
    except WarehouseError as exc:
        raise fail_usage(str(exc)) from exc
    if not found:
        raise fail_usage(f"no reviewer called {name!r}")
    console.print(f"reviewer {name} deactivated")


def review_reviewers() -> None:
    """List the review app accounts (never their password hashes)."""
    from warehouse.review import reviewer_accounts

    cfg = settings()
    try:
        accounts = reviewer_accounts(open_store(cfg))
    except WarehouseError as exc:
        raise fail_usage(str(exc)) from exc
    render(
        ["name", "role", "active", "login", "updated_at"],
        [
            (
                a.name,
                a.role,
                a.active,
                "password" if a.password_hash else "proxy only",
                a.updated_at.isoformat(),
            )
            for a in accounts.values()
        ],
        OutputFormat.table,
        console,
    )


def review_serve(
    host: str | None = typer.Option(None, help=f"Bind address {default_of('review_web_host')}."),
    port: int | None = typer.Option(None, help=f"Port {default_of('review_web_port')}."),
) -> None:
    """Serve the review web app (login, queues, items, verdicts) until stopped."""
    import signal
    import sys

    from refusal_audit.http_serving import HttpLimits, ListenError, bind_listener, serve_bounded
    from refusal_audit.review.web.server import build_app
    from refusal_audit.streaming.owner import owner_routes
    from warehouse.client import redact_dsn

    overrides: dict[str, object] = {}
    if host is not None:
        overrides["review_web_host"] = host
    if port is not None:
        overrides["review_web_port"] = port
    cfg = settings(**overrides)
    store = open_store(cfg)
    channel = None
    try:
        routes, channel = owner_routes(cfg, store)
        app = build_app(cfg, store, routes).app
    except (ConfigError, WarehouseError) as exc:
        store.close()
        raise fail_usage(str(exc)) from exc
    try:  # listen before saying so: a port in use is one error, no "review app on" line
        limits = HttpLimits.from_settings(cfg)  # bounds against slow and greedy clients
        listener = bind_listener(cfg.review_web_host, cfg.review_web_port, limits.backlog)
    except ListenError as exc:
        if channel is not None:
            channel.close()
        store.close()
        raise fail_usage(str(exc)) from exc
    where = "owned here" if channel is not None and channel.owns else "through its owner"
    if channel is None:
        where = "server"
    console.print(
        f"review app on http://{cfg.review_web_host}:{cfg.review_web_port}/ "
        f"(warehouse {redact_dsn(cfg.resolved_warehouse_dsn)} {where}; Ctrl-C stops)"
    )
    if channel is not None:
        channel.announce_when_listening()
    # uvicorn re-raises the signal that stopped it after its shutdown: exit through the
    # finally below (which withdraws the owner file) instead of dying on it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        # bounded against slow and greedy clients (http_* settings); proxy headers off: the
        # app decides whom to believe (review_trusted_proxies)
        serve_bounded(app, listener, cfg.review_web_host, cfg.review_web_port, limits)
    finally:
        if channel is not None:
            channel.close()
        store.close()
