"""``refusal-audit report``: the period's audit as one self-contained HTML file."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import typer

from refusal_audit.cli_common import console, err, fail_usage, open_store, settings
from refusal_audit.config import Settings
from warehouse.client import Client, WarehouseError, redact_dsn

MAX_LISTED = 20


def _period(
    since: datetime | None, until: datetime | None, stored: tuple[date, date] | None
) -> tuple[date, date]:
    """The event days to report: as given; a missing bound is the first / last stored day
    (today on an empty store), moved to the given bound when that would reverse the range."""
    today = datetime.now(UTC).date()
    first, last = stored if stored is not None else (today, today)
    start = since.date() if since else None
    end = until.date() if until else None
    if start is not None and end is None:
        end = max(last, start)
    if end is not None and start is None:
        start = min(first, end)
    return start or first, end or last


def _check_filter(client: Client, database: str, column: str, value: str | None) -> None:
    from rich.markup import escape

    from refusal_audit.report.html.chart_base import clean_text
    from warehouse.report_queries import stored_values

    if value is None:
        return
    known = stored_values(client, database, column)
    if value not in known:
        # logged names may hold terminal escapes, bidi controls or rich markup: show them inert
        shown = [escape(clean_text(k)) for k in known[:MAX_LISTED]]
        listed = ", ".join(shown) + (" ..." if len(known) > MAX_LISTED else "")
        raise fail_usage(
            f"no stored event has {column} {escape(repr(clean_text(value)))}; the warehouse "
            f"holds: {listed or 'none'}"
        )


def _warehouse_name(cfg: Settings, database: str) -> str:
    dsn = cfg.resolved_warehouse_dsn
    if dsn.startswith("chdb:"):
        return f"the embedded chDB store (database {database})"
    return f"{redact_dsn(dsn)} (database {database})"


def report(
    since: datetime | None = typer.Option(
        None, formats=["%Y-%m-%d"], help="First event day (UTC); default: the first stored."
    ),
    until: datetime | None = typer.Option(
        None, formats=["%Y-%m-%d"], help="Last event day (UTC); default: the last stored."
    ),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="The HTML file to write."),
    png: Path | None = typer.Option(
        None, "--png", help="Also write each chart as DIR/<chart>.png (for slides)."
    ),
    model: str | None = typer.Option(None, help="Only this model."),
    product: str | None = typer.Option(None, help="Only this product."),
) -> None:
    """Write a self-contained HTML audit report of a period (no network needed to open it):
    summary, false-positive rate per model with Wilson bands, category mix over time, top
    policy gaps, alerts, review agreement and notes on rates resting on few events."""
    from refusal_audit.alerts.gaps import track_configured_gaps
    from refusal_audit.report.html import collect, write_report
    from warehouse.report_queries import ReportFilter, event_day_range

    if since and until and since > until:
        raise fail_usage(f"--since {since.date()} is after --until {until.date()}")
    cfg = settings()
    store = open_store(cfg)
    try:
        stored = event_day_range(store.client, store.database)
        _check_filter(store.client, store.database, "model", model)
        _check_filter(store.client, store.database, "product", product)
        first, last = _period(since, until, stored)
        # group the flags audited since the last run into gaps first, as `refusal-audit gaps`
        # does (idempotent): the report's gaps are the tracked ones
        track_configured_gaps(store, cfg, now=datetime.now(UTC))
        data = collect(
            store.client,
            store.database,
            ReportFilter(first, last, model, product),
            warehouse=_warehouse_name(cfg, store.database),
            max_width=cfg.report_max_interval_width,
        )
    except WarehouseError as exc:
        raise fail_usage(f"cannot read the warehouse: {exc}") from exc
    if stored is None:
        err.print("[yellow]the warehouse holds no audited refusal yet: the report is empty")
    try:
        written = write_report(data, out, png)
    except (FileExistsError, NotADirectoryError) as exc:  # a file where a directory must be
        raise fail_usage(f"cannot write the report: {exc.filename} is not a directory") from exc
    except OSError as exc:
        where = exc.filename or out
        raise fail_usage(f"cannot write {where}: {exc.strerror or exc}") from exc
    pngs = f", {len(written) - 1} chart PNG(s)" if png is not None else ""
    console.print(
        f"report of {first} to {last}: {data.counts['audited']:,} audited refusal(s){pngs}"
    )
    for path in written:
        console.print(f"  {path}")
