"""``refusal-audit report``: the period's audit as one self-contained HTML file."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import typer

from refusal_audit.cli_common import console, fail_usage, open_store, settings
from warehouse.client import WarehouseError, redact_dsn


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
    from refusal_audit.html_report import collect, write_report
    from refusal_audit.html_report.data import default_period
    from warehouse.report_queries import ReportFilter, event_day_range

    cfg = settings()
    store = open_store(cfg)
    try:
        first, last = default_period(
            event_day_range(store.client, store.database), datetime.now(UTC).date()
        )
        slice_ = ReportFilter(
            since.date() if since else first, until.date() if until else last, model, product
        )
        if slice_.since > slice_.until:
            raise fail_usage(f"--since {slice_.since} is after --until {slice_.until}")
        data = collect(
            store.client,
            store.database,
            slice_,
            warehouse=f"{redact_dsn(cfg.resolved_warehouse_dsn)} (database {store.database})",
            max_width=cfg.report_max_interval_width,
        )
    except WarehouseError as exc:
        raise fail_usage(f"cannot read the warehouse: {exc}") from exc
    try:
        written = write_report(data, out, png)
    except OSError as exc:
        raise fail_usage(f"cannot write the report: {exc}") from exc
    console.print(
        f"report of {slice_.since} to {slice_.until}: {data.counts['audited']:,} audited "
        f"refusal(s), {len(written) - 1} chart PNG(s)"
    )
    for path in written:
        console.print(f"  {path}")
