"""``refusal-audit alerts list`` and ``alerts evaluate`` (``refusal_audit.cli`` registers them).

``list`` reads alerts back from ClickHouse with filters; ``evaluate`` runs the drift
detectors over the warehouse now (or at ``--at``) and prints every finding, including
"insufficient data", and with ``--publish`` also tracks policy gaps and sends and stores the
new alerts exactly like the worker's leader does.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import orjson
import typer

from refusal_audit.cli_common import (
    EXIT_FAILURES,
    EXIT_USAGE,
    as_utc,
    console,
    err,
    fail_usage,
    open_store,
    settings,
)
from refusal_audit.output import OutputFormat, render
from schemas.alerts import DRIFT_KINDS
from warehouse.client import WarehouseError

if TYPE_CHECKING:
    from refusal_audit.alerts.drift import WindowEvaluation
    from refusal_audit.config import Settings
    from schemas.alerts import Alert

KINDS = (*DRIFT_KINDS, "policy_gap")
# the warehouse's event-time range (DateTime64 and toStartOfInterval work from 1970)
EARLIEST = datetime(1970, 2, 1, tzinfo=UTC)
LATEST = datetime(2299, 1, 1, tzinfo=UTC)


def _period(seconds: int) -> str:
    """``1h``, ``6h``, ``1d``, ``7d``: the period a finding tested (ending with its window)."""
    if seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    return f"{seconds // 3600}h" if seconds % 3600 == 0 else f"{seconds}s"


def alerts_list(
    kind: list[str] = typer.Option([], "--kind", "-k", help=f"Alert kind(s): {', '.join(KINDS)}."),
    severity: str | None = typer.Option(None, help="warning or critical."),
    bundle: str | None = typer.Option(None, "--bundle", "-b", help="Scope: policy bundle."),
    model: str | None = typer.Option(None, help="Scope: model ('all' for roll-ups)."),
    product: str | None = typer.Option(None, help="Scope: product ('all' for roll-ups)."),
    since: datetime | None = typer.Option(None, help="Only windows starting at/after (UTC)."),
    limit: int = typer.Option(50, min=1, help="At most this many alerts (newest first)."),
    as_json: bool = typer.Option(False, "--json", help="Print each alert as a JSON line."),
) -> None:
    """List stored alerts, newest window first."""
    from warehouse.alerts import list_alerts

    unknown = sorted(set(kind) - set(KINDS))
    if unknown:
        raise fail_usage(f"unknown alert kind(s) {unknown}; choose from {', '.join(KINDS)}")
    if severity not in (None, "warning", "critical"):
        raise fail_usage("--severity must be warning or critical")
    store = open_store(settings())
    try:
        found = list_alerts(
            store,
            kinds=kind,
            severity=severity,
            policy_bundle=bundle,
            model=model,
            product=product,
            since=as_utc(since),
            limit=limit,
        )
    except WarehouseError as exc:
        raise fail_usage(str(exc)) from exc
    finally:
        store.close()
    if as_json:
        for alert in found:
            console.file.write(alert.model_dump_json() + "\n")
        return
    if not found:
        console.print("no alerts")
        return
    rows = [
        (
            a.window.start,
            a.kind,
            a.severity,
            a.scope.key,
            f"{a.statistic.effect_size:.3g} {a.statistic.effect_size_name}",
            "-" if a.statistic.q_value is None else f"{a.statistic.q_value:.2g}",
            a.alert_id,
            a.summary.split(" Reproduce")[0],
        )
        for a in found
    ]
    columns = ["window", "kind", "severity", "scope", "effect", "q", "alert_id", "summary"]
    render(columns, rows, OutputFormat.table, console)


def coverage_summary(rows: list[dict[str, Any]]) -> str:
    """The closing line of ``alerts evaluate``: findings by status, so "no alert" reads apart
    from "could not look" (``insufficient_data``), and the tested ones by the period tested,
    e.g. ``12 finding(s): 1 alerting (2 continuing), 8 no change, 3 could not look; tested
    over 1h 5, 6h 4``. ``rows`` are the command's finding records (``status``,
    ``resolution_seconds``, ``continued``)."""
    by_status = Counter(str(r["status"]) for r in rows)
    continuing = sum(1 for r in rows if r["status"] == "alert" and r.get("continued"))
    periods = Counter(
        int(r["resolution_seconds"]) for r in rows if r["status"] in ("alert", "no_change")
    )
    alerting = by_status["alert"] - continuing
    parts = [
        f"{alerting} alerting"
        + (f" ({continuing} more continuing earlier alerts)" if continuing else ""),
        f"{by_status['no_change']} no change",
        f"{by_status['insufficient_data']} could not look (insufficient data)",
    ]
    tested = ", ".join(f"{_period(s)} {n}" for s, n in sorted(periods.items()))
    return (
        f"{len(rows)} finding(s): "
        + ", ".join(parts)
        + (f"; tested over {tested}" if tested else "")
    )


def alerts_evaluate(
    at: datetime | None = typer.Option(
        None, help="Evaluate as if now were this time (UTC); default: now."
    ),
    window: list[datetime] = typer.Option(
        [], "--window", "-w", help="Evaluate the window holding this time (repeatable)."
    ),
    until: datetime | None = typer.Option(
        None, help="With one --window: evaluate every window from it to the one holding this."
    ),
    replay: bool = typer.Option(
        False,
        help="Historical replay: count every event in the window of its event time, however"
        " late it was stored (no grace-period rule); needs --window.",
    ),
    publish: bool = typer.Option(
        False, help="Also track policy gaps, send new alerts to their topics and store them."
    ),
    store_only: bool = typer.Option(
        False, "--store", help="Like --publish but only store the new alerts (no broker)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print findings as JSON lines."),
) -> None:
    """Run the drift detectors over the warehouse and print every finding.

    Without --window: the latest closed windows (``alerts_lookback_windows``). Exit 2 when
    the warehouse cannot be read or, with --publish, the broker or topics are unavailable.
    """
    cfg = settings()
    now = as_utc(at) or datetime.now(UTC)
    windows, cfg = _windows_to_evaluate(cfg, now, window, until, replay)
    evaluations, published = _run_evaluation(cfg, now, windows, publish, store_only)
    rows = _finding_records(evaluations, cfg.alerts_window_seconds)
    _print_findings(rows, as_json)
    if not replay:
        _note_open_windows(evaluations, cfg.alerts_grace_seconds, now)
    msg = f"{len(evaluations)} window(s), {coverage_summary(rows)}"
    if publish or store_only:
        msg += f"; {len(published)} new alert(s) {'published' if publish else 'stored'}"
    err.print(msg)


def _windows_to_evaluate(
    cfg: Settings, now: datetime, window: list[datetime], until: datetime | None, replay: bool
) -> tuple[list[datetime] | None, Settings]:
    """The windows ``alerts evaluate`` names (None: the latest closed ones) and the settings
    to evaluate them with (replay: the grace period of ``REPLAY_GRACE_SECONDS``); a usage
    error (exit 2) for times out of range or options that do not go together."""
    from refusal_audit.alerts.drift import REPLAY_GRACE_SECONDS, replay_windows

    windows = [w for w in (as_utc(x) for x in window) if w is not None] or None
    last = as_utc(until)
    if any(
        not (EARLIEST <= w <= LATEST) for w in [now, *(windows or []), *([last] if last else [])]
    ):
        raise fail_usage(
            f"--at, --window and --until must lie between {EARLIEST:%Y} and {LATEST:%Y}"
        )
    if replay and not windows:
        raise fail_usage("--replay needs --window (the windows to evaluate)")
    if last is not None:
        if windows is None or len(windows) != 1:
            raise fail_usage("--until needs exactly one --window (the first window)")
        try:
            windows = replay_windows(windows[0], last, cfg.alerts_window_seconds)
        except ValueError as exc:
            raise fail_usage(str(exc)) from exc
    if replay:  # by event time: the settings' validation caps the grace period, not the views
        cfg = cfg.model_copy(update={"alerts_grace_seconds": REPLAY_GRACE_SECONDS})
    return windows, cfg


def _run_evaluation(
    cfg: Settings,
    now: datetime,
    windows: list[datetime] | None,
    publish: bool,
    store_only: bool,
) -> tuple[list[WindowEvaluation], list[Alert]]:
    """The windows' evaluations, and the new alerts published or stored (``--publish``,
    ``--store``; none otherwise). Exit 2 when the warehouse cannot be read or the broker
    does not acknowledge the alerts."""
    from refusal_audit.alerts.drift import DriftConfig, evaluate_windows
    from refusal_audit.alerts.publisher import AlertPublisher, run_detectors

    store = open_store(cfg)
    try:
        if publish or store_only:
            from streams.clients import KafkaException
            from streams.producer import DeliveryError, TopicWriter, make_producer
            from streams.topics import Topics

            publisher = AlertPublisher(store)
            if publish:
                from streams.alert_log import read_alerts

                topics = Topics.from_prefix(cfg.kafka_topic_prefix)
                publisher.writer = TopicWriter(make_producer(cfg.kafka()))
                publisher.topics = topics
                publisher.read_topics = lambda: read_alerts(cfg.kafka(), topics.alert_topics())
            try:
                run = run_detectors(cfg, publisher, now=now, windows=windows)
            except (DeliveryError, KafkaException) as exc:
                err.print(f"[red]error:[/red] alerts not acknowledged by the broker: {exc}")
                raise typer.Exit(EXIT_USAGE) from exc
            return run.evaluations, run.published
        evaluations = evaluate_windows(
            store.client,
            store.database,
            DriftConfig.from_settings(cfg),
            now=now,
            windows=windows,
        )
        return evaluations, []
    except WarehouseError as exc:
        raise fail_usage(str(exc)) from exc
    finally:
        store.close()


def _finding_records(
    evaluations: list[WindowEvaluation], window_seconds: int
) -> list[dict[str, Any]]:
    """One record per finding (what ``--json`` prints, one JSON line each)."""
    rows = []
    for e in evaluations:
        for f in e.evaluation.findings:
            record = {
                "window_start": e.window.start.isoformat(),
                "scope": f.scope.key,
                "kind": f.kind,
                "status": f.status,
                "continued": f.continued,
                "resolution_seconds": f.resolution * window_seconds,
                "severity": f.severity if f.status == "alert" else "",
                "statistic": f.statistic_name,
                "value": f.statistic,
                "p_value": f.p_value,
                "q_value": f.q_value,
                "effect": f.effect,
                "effect_name": f.effect_name,
                "note": f.note or "; ".join(f.moved),
            }
            rows.append(record)
    return rows


def _print_findings(rows: list[dict[str, Any]], as_json: bool) -> None:
    """The finding records as JSON lines, or as a table (or a line saying there are none)."""
    if as_json:
        for record in rows:
            console.file.write(orjson.dumps(record).decode() + "\n")
    elif rows:
        columns = ["window", "scope", "kind", "status", "period", "severity", "effect", "q", "note"]
        render(
            columns,
            [
                (
                    str(r["window_start"])[:16].replace("T", " "),  # UTC, to the minute
                    r["scope"],
                    r["kind"],
                    r["status"],
                    _period(int(str(r["resolution_seconds"]))),
                    r["severity"],
                    "-"
                    if r["status"] == "insufficient_data"
                    else f"{r['effect']:.3g} {r['effect_name']}".strip(),
                    "-" if r["q_value"] is None else f"{r['q_value']:.2g}",
                    r["note"],
                )
                for r in rows
            ],
            OutputFormat.table,
            console,
        )
    else:
        console.print(
            "no refusals counted in the evaluated windows or their baselines (events that "
            "reached the warehouse after a window's end + alerts_grace_seconds count in the "
            "window they arrived in)"
        )


def _note_open_windows(
    evaluations: list[WindowEvaluation], grace_seconds: int, now: datetime
) -> None:
    """A note on stderr for each evaluated window still open at ``now`` (its end plus the
    grace period not passed yet)."""
    grace = timedelta(seconds=grace_seconds)
    for e in evaluations:
        if e.window.end + grace > now:
            err.print(
                f"[yellow]note:[/yellow] window {e.window.start:%Y-%m-%d %H:%M} is still open "
                f"(closes at {e.window.end + grace:%Y-%m-%d %H:%M:%S} UTC): events may still "
                "join it"
            )


def alerts_tail(
    kind: list[str] = typer.Option(
        ["drift", "policy-gap"], "--kind", "-k", help="Alert kind(s): drift, policy-gap."
    ),
    from_beginning: bool = typer.Option(False, help="Start at the oldest retained alert."),
    max_messages: int | None = typer.Option(None, "--max", min=1, help="Stop after N alerts."),
    idle_timeout: float | None = typer.Option(
        None, min=0.0, help="Stop after this many seconds without an alert."
    ),
) -> None:
    """Print alerts from the alert topics as JSON lines (for piping into a pager).

    Exit codes: 0 stopped by --max or --idle-timeout; 1 the broker was lost while tailing
    (unreachable for 30 s, or when the idle timeout ran out); 2 usage error, the broker
    cannot be reached at the start (10 s), or an alert topic does not exist.
    """
    from streams.tail import TailError, alert_consumer, tail
    from streams.topics import Topics

    cfg = settings()
    try:
        topic_names = Topics.from_prefix(cfg.kafka_topic_prefix).alert_topics(tuple(kind))
    except ValueError as exc:
        raise fail_usage(str(exc)) from exc
    try:
        consumer = alert_consumer(cfg.kafka(), topic_names, from_beginning, quiet=True)
    except TailError as exc:
        raise fail_usage(str(exc)) from exc
    try:
        for item in tail(consumer, max_messages, idle_timeout):
            console.file.write(orjson.dumps(item).decode() + "\n")
            console.file.flush()
    except TailError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(EXIT_FAILURES) from exc
