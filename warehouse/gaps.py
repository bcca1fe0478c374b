"""Policy-gap tracking in ClickHouse: the SQL of ``refusal_audit.alerts.gaps``.

Reads the audited batches' policy-gap flags (``audit_batches FINAL``), stores and reads the
sightings (``policy_gap_sightings``), the gaps' evidence dated by event time and named after
their most common member, and the policy-gap alerts already stored (``alerts``). Every
function takes a ``GapDb`` (a client and its database, ``gap_db``) and plain values, and
raises ``WarehouseError`` when the warehouse fails.

The evidence (``evidence_rows``) and the open gaps (``open_gap_rows``) read the sightings
dated by event time from migration 0029's daily aggregate (``warehouse.gap_reads.dated`` /
``summary`` over ``daily_gap_sightings``, dirty days computed live), with the same rows as
0019's views ``policy_gap_dated`` / ``policy_gap_summary`` (tested against them): the views
look up every sighting's event in ``refusal_events``, which read nearly every granule of it
at 100 M stored events (the detectors' evidence read 20 s per pass, ``refusal-audit gaps``
35 s). ``evidence_sql``, the statement an alert carries for a person to paste, still reads
the view: one short statement, run by hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from clickhouse_connect.driver.exceptions import ClickHouseError

from processors.gap_text import describe_gap
from processors.gaps import MAX_EXAMPLES, MAX_GAP_DESCRIPTIONS, GapEvidence, KnownGap
from warehouse import daily, day_holds, gap_reads
from warehouse.client import Client, WarehouseError, quote_identifier, validate_identifier
from warehouse.daily import clickhouse_day
from warehouse.store import Warehouse, dedup_token, to_utc

__all__ = [
    "DATED",
    "EVIDENCE_SQL",
    "OPEN_GAPS_SQL",
    "SIGHTING_COLUMNS",
    "SUMMARY",
    "GapDb",
    "evidence_rows",
    "evidence_sql",
    "flagged_batches",
    "gap_alerts_of",
    "gap_db",
    "gap_evidence",
    "insert_sightings",
    "known_gaps",
    "newest_sighting",
    "open_gap_rows",
    "stored_gap_alerts",
    "tracked_sightings",
]

SIGHTING_COLUMNS = (
    "policy_bundle",
    "gap_id",
    "log_id",
    "batch_id",
    "description",
    "gap_description",
    "seen_at",
)
_TABLE = "policy_gap_sightings"
_CHUNK = 1000  # ids per IN (...) parameter, to keep requests to a server small


@dataclass(frozen=True)
class GapDb:
    """A client and the (validated) name of its warehouse database."""

    client: Client
    database: str


def gap_db(target: Client | Warehouse) -> GapDb:
    """The client and database of a ``Warehouse``, or of a client bound to a database.

    Raises ``WarehouseError`` when the client is not bound to a database.
    """
    if isinstance(target, Warehouse):
        return GapDb(target.client, target.database)
    database = getattr(target, "database", None)
    if not database:
        raise WarehouseError("the warehouse client is not bound to a database")
    return GapDb(target, validate_identifier(str(database)))


def _query(
    warehouse: GapDb, sql: str, parameters: dict[str, Any] | None = None
) -> list[tuple[Any, ...]]:
    params = {"db": warehouse.database, **(parameters or {})}
    try:
        result = warehouse.client.query(sql, parameters=params)
    except ClickHouseError as exc:
        raise WarehouseError(f"policy-gap query on {warehouse.database} failed: {exc}") from exc
    return [tuple(row) for row in result.result_rows]


#: Where a read of the dated sightings (one row per sighting: ``policy_gap_dated``'s rows)
#: or of the gaps' summary (``policy_gap_summary``'s) goes in ``EVIDENCE_SQL`` and
#: ``OPEN_GAPS_SQL``; ``_dated_query`` puts 0029's reads there.
DATED, SUMMARY = "__GAP_DATED__", "__GAP_SUMMARY__"

_EVERY_DAY = daily.marker("gaps", every_day=True)
_DAY = date(1970, 1, 1)


def _dated_query(warehouse: GapDb, sql: str, parameters: dict[str, Any]) -> list[tuple[Any, ...]]:
    """``sql`` with ``DATED`` / ``SUMMARY`` read from the daily aggregate (every day; the
    dirty ones live: ``warehouse.daily.with_source``), run with its parameters."""
    sql = sql.replace(DATED, gap_reads.dated(_EVERY_DAY))
    sql = sql.replace(SUMMARY, gap_reads.summary(_EVERY_DAY))
    # an every-day marker reads every day whatever the range given
    sql, sources = daily.with_source(warehouse.client, warehouse.database, sql, _DAY, _DAY)
    params = {"db": warehouse.database, **parameters, **sources}
    settings = daily.READ_SETTINGS if sources else None
    try:
        result = warehouse.client.query(sql, parameters=params, settings=settings)
    except ClickHouseError as exc:
        raise WarehouseError(f"policy-gap query on {warehouse.database} failed: {exc}") from exc
    return [tuple(row) for row in result.result_rows]


def _chunks(items: Sequence[str]) -> Iterable[list[str]]:
    for i in range(0, len(items), _CHUNK):
        yield list(items[i : i + _CHUNK])


def _sql_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def evidence_sql(database: str, bundle: str, gap: str, until: datetime) -> str:
    """The SQL that reproduces a gap's counts as tracked up to ``until`` (the audit time of
    its latest sighting when the alert was made): distinct log ids, batches, and the first
    and last event time of its refusals (the gap's dates, ``policy_gap_dated``). Values are
    inlined as escaped literals so the statement can be pasted into ``refusal-audit sql``.

    Raises ``WarehouseError`` for an invalid database name.
    """
    utc = to_utc(until)
    stamp = utc.strftime("%Y-%m-%d %H:%M:%S.") + f"{utc.microsecond // 1000:03d}"
    return (
        "SELECT uniqExact(log_id) AS log_ids, uniqExact(batch_id) AS batches, "
        "min(event_time) AS first_seen, max(event_time) AS last_seen "
        f"FROM {quote_identifier(database)}.policy_gap_dated "
        f"WHERE policy_bundle = {_sql_string(bundle)} AND gap_id = {_sql_string(gap)} "
        f"AND seen_at <= toDateTime64('{stamp}', 3, 'UTC')"
    )


def newest_sighting(warehouse: GapDb) -> datetime | None:
    """The audit time (aware UTC) of the newest stored sighting, None when there is none."""
    rows = _query(
        warehouse, "SELECT max(seen_at), count() FROM {db:Identifier}.policy_gap_sightings"
    )
    newest, n = rows[0]
    return to_utc(newest) if n else None


def flagged_batches(
    warehouse: GapDb, since: datetime | None
) -> list[tuple[str, str, datetime, Any]]:
    """(batch id, policy bundle, audited_at (aware UTC), raw ``policy_gap_flags``) of the
    audited batches with policy-gap flags audited at or after ``since`` (None: all), ordered
    by audit time and batch id."""
    where = "" if since is None else "AND audited_at >= {since:DateTime64(3, 'UTC')}"
    rows = _query(
        warehouse,
        "SELECT batch_id, policy_bundle, audited_at, policy_gap_flags "
        "FROM {db:Identifier}.audit_batches FINAL "
        f"WHERE length(policy_gap_flags) > 0 {where} ORDER BY audited_at, batch_id",
        {"since": to_utc(since)} if since is not None else None,
    )
    return [
        (str(batch_id), str(bundle), to_utc(audited_at), flags)
        for batch_id, bundle, audited_at, flags in rows
    ]


def tracked_sightings(
    warehouse: GapDb, batch_ids: Sequence[str]
) -> tuple[dict[tuple[str, str], tuple[str, str]], set[tuple[str, str, str, str]]]:
    """Sightings already stored for these batches: (batch_id, description) -> (gap_id,
    gap_description), and the set of stored keys (bundle, gap_id, log_id, batch_id)."""
    flags: dict[tuple[str, str], tuple[str, str]] = {}
    keys: set[tuple[str, str, str, str]] = set()
    for chunk in _chunks(batch_ids):
        rows = _query(
            warehouse,
            "SELECT policy_bundle, gap_id, log_id, batch_id, description, gap_description "
            "FROM {db:Identifier}.policy_gap_sightings FINAL "
            "WHERE batch_id IN {ids:Array(String)}",
            {"ids": chunk},
        )
        for bundle, gap, log_id, batch_id, description, gap_description in rows:
            flags[(str(batch_id), str(description))] = (str(gap), str(gap_description))
            keys.add((str(bundle), str(gap), str(log_id), str(batch_id)))
    return flags, keys


def known_gaps(warehouse: GapDb, bundles: Sequence[str]) -> list[KnownGap]:
    """The stored gaps of ``bundles``, in order of first sighting, each with its first
    ``MAX_GAP_DESCRIPTIONS`` distinct descriptions."""
    if not bundles:
        return []
    rows = _query(
        warehouse,
        """
SELECT policy_bundle, gap_id, argMin(gap_description, first) AS opener,
       arraySlice(arrayMap(x -> x.2, arraySort(groupArray((first, description)))),
                  1, {n:UInt32}) AS descriptions,
       min(first) AS first_seen
FROM (
    SELECT policy_bundle, gap_id, description, min(seen_at) AS first,
           argMin(gap_description, seen_at) AS gap_description
    FROM {db:Identifier}.policy_gap_sightings FINAL
    WHERE policy_bundle IN {bundles:Array(String)}
    GROUP BY policy_bundle, gap_id, description
)
GROUP BY policy_bundle, gap_id
ORDER BY policy_bundle, first_seen, gap_id
""",
        {"bundles": list(bundles), "n": MAX_GAP_DESCRIPTIONS},
    )
    return [
        KnownGap(str(bundle), str(gap), str(opener), tuple(str(d) for d in descriptions))
        for bundle, gap, opener, descriptions, _ in rows
    ]


def insert_sightings(warehouse: GapDb, rows: list[list[Any]]) -> None:
    """Store sighting rows (``SIGHTING_COLUMNS`` order) in one deduplicated insert (no rows:
    nothing), with the days they change in the ``gaps`` daily aggregate (migration 0029:
    their ``seen_at`` days and their stored events' days) marked dirty before and after it
    (``Warehouse.mark_sighting_days``, retried on transient errors), as
    ``warehouse.review.insert_verdicts`` marks: the mark before keeps the days dirty if the
    process stops or the second mark fails; the mark after, if the event was stored between
    the two. The days of the first mark are held (``warehouse.day_holds``) until the second
    is done, so no recompute records them without the rows meanwhile; a writer that stops
    before its release leaves them dirty until the hold expires. Raises
    ``WarehouseError``."""
    if not rows:
        return
    at, log_at = SIGHTING_COLUMNS.index("seen_at"), SIGHTING_COLUMNS.index("log_id")
    log_ids = [str(r[log_at]) for r in rows]
    # the days toDate gives (an audit time outside Date's range wraps): the aggregate's days
    seen_days = sorted({clickhouse_day(to_utc(r[at])) for r in rows})
    store = Warehouse(warehouse.client, warehouse.database)
    holder = day_holds.new_holder()
    held = store.mark_sighting_days(log_ids, seen_days, holder)
    try:
        warehouse.client.insert(
            _TABLE,
            rows,
            column_names=list(SIGHTING_COLUMNS),
            database=warehouse.database,
            settings={"insert_deduplication_token": dedup_token(_TABLE, rows)},
        )
    except (ClickHouseError, OSError, ValueError, TypeError) as exc:
        raise WarehouseError(
            f"insert of {len(rows)} sighting(s) into {warehouse.database}.{_TABLE} failed: {exc}"
        ) from exc
    store.mark_sighting_days(log_ids, seen_days)
    store.release_days(held, holder)


EVIDENCE_SQL = f"""
SELECT policy_bundle, gap_id, named.description, first_seen, last_seen, log_ids, batch_count,
       period, period_start, before, examples, last_tracked
FROM (
SELECT policy_bundle, gap_id,
       min(first) AS first_seen,
       max(last) AS last_seen,
       max(tracked) AS last_tracked,
       count() AS log_ids,
       length(groupUniqArrayArray(batches)) AS batch_count,
       intDiv(dateDiff('millisecond', first_seen, last_seen), {{cooldown:Int64}}) AS period,
       first_seen + toIntervalMillisecond(period * {{cooldown:Int64}}) AS period_start,
       arraySort(groupArray((first, log_id))) AS seen,
       arrayCount(x -> x.1 < period_start, seen) AS before,
       arraySlice(arrayMap(x -> x.2, arrayConcat(arrayFilter(x -> x.1 >= period_start, seen),
                                                 arrayFilter(x -> x.1 < period_start, seen))),
                  1, {{examples:UInt32}}) AS examples
FROM (
    SELECT policy_bundle, gap_id, log_id, min(event_time) AS first, max(event_time) AS last,
           max(seen_at) AS tracked, groupUniqArray(batch_id) AS batches
    FROM {DATED}
    WHERE (policy_bundle, gap_id) IN (
        SELECT policy_bundle, gap_id FROM {{db:Identifier}}.policy_gap_sightings
        WHERE seen_at >= {{horizon:DateTime64(3, 'UTC')}}
    )
    GROUP BY policy_bundle, gap_id, log_id
)
GROUP BY policy_bundle, gap_id
) AS evidence
INNER JOIN (
    SELECT policy_bundle, gap_id, description FROM {SUMMARY}
) AS named USING (policy_bundle, gap_id)
ORDER BY policy_bundle, gap_id
"""
"""The evidence of every gap with a sighting tracked at or after ``{horizon}``, with
``DATED`` and ``SUMMARY`` where the dated sightings and the summary are read (parameters
``horizon``, ``cooldown`` in ms, ``examples``): ``evidence_rows``' columns."""


def evidence_rows(
    warehouse: GapDb, horizon: datetime, cooldown: timedelta
) -> list[tuple[Any, ...]]:
    """``EVIDENCE_SQL``'s rows over 0029's dated sightings: per gap with a sighting tracked
    at or after ``horizon`` (audit time), ordered by bundle and gap id: bundle, gap id,
    its most common member's description, first and last event time, distinct log ids,
    distinct batches, the cooldown period its span reaches (``cooldown`` long, counted from
    the first event), that period's start, the log ids first seen before it, up to
    ``MAX_EXAMPLES`` example log ids (the period's first) and its latest sighting's audit
    time."""
    return _dated_query(
        warehouse,
        EVIDENCE_SQL,
        {
            "horizon": horizon,
            "cooldown": cooldown // timedelta(milliseconds=1),
            "examples": MAX_EXAMPLES,
        },
    )


def gap_evidence(
    warehouse: GapDb, horizon: datetime, cooldown: timedelta
) -> list[tuple[GapEvidence, datetime, datetime]]:
    """Evidence of every gap with a sighting tracked at or after ``horizon`` (audit time),
    dated by event time and named after its most common member (``evidence_rows``), with
    its period start and its latest sighting's audit time."""
    out: list[tuple[GapEvidence, datetime, datetime]] = []
    for row in evidence_rows(warehouse, horizon, cooldown):
        bundle, gap, description, first, last, log_ids, batches, period, start, before = row[:10]
        examples, tracked = row[10], row[11]
        evidence = GapEvidence(
            policy_bundle=str(bundle),
            gap_id=str(gap),
            description=describe_gap(str(description)),
            first_seen=to_utc(first),
            last_seen=to_utc(last),
            period=int(period),
            log_ids=int(log_ids),
            batches=int(batches),
            log_ids_before_period=int(before),
            example_log_ids=tuple(str(x) for x in examples),
        )
        out.append((evidence, to_utc(start), to_utc(tracked)))
    return out


def stored_gap_alerts(warehouse: GapDb, ids: Sequence[str]) -> dict[str, str]:
    """alert_id -> payload of the stored policy-gap alerts among ``ids``."""
    found: dict[str, str] = {}
    for chunk in _chunks(ids):
        rows = _query(
            warehouse,
            "SELECT alert_id, payload FROM {db:Identifier}.alerts FINAL "
            "WHERE kind = 'policy_gap' AND alert_id IN {ids:Array(String)}",
            {"ids": chunk},
        )
        found.update({str(i): str(p) for i, p in rows})
    return found


def gap_alerts_of(
    warehouse: GapDb, gap_ids: Sequence[str], alert_ids: Sequence[str] = ()
) -> dict[str, dict[str, str]]:
    """gap id named in the payload -> {alert_id: payload} of the stored policy-gap alerts
    whose payload names one of ``gap_ids`` (its ``gap_id``), or names no gap (key ``""``:
    a payload that is not JSON or has no ``gap_id``, never written by the tracker), or whose
    id is one of ``alert_ids`` (under whatever gap its payload names): a gap's alerts in one
    read, however long its span (the tracker looked up one alert id per cooldown period
    before 2026-12-06). Gap alerts are few (one per gap and period at most), so the payload
    filter scans little. Raises ``WarehouseError`` when the warehouse fails."""
    found: dict[str, dict[str, str]] = {}
    gap_chunks, id_chunks = list(_chunks(gap_ids)), list(_chunks(alert_ids))
    for i in range(max(len(gap_chunks), len(id_chunks), 1)):
        rows = _query(
            warehouse,
            "SELECT JSONExtractString(payload, 'gap_id') AS gap, alert_id, payload "
            "FROM {db:Identifier}.alerts FINAL WHERE kind = 'policy_gap' "
            "AND (gap IN {gaps:Array(String)} OR gap = '' OR alert_id IN {ids:Array(String)})",
            {
                "gaps": gap_chunks[i] if i < len(gap_chunks) else [],
                "ids": id_chunks[i] if i < len(id_chunks) else [],
            },
        )
        for gap, alert, payload in rows:
            found.setdefault(str(gap), {})[str(alert)] = str(payload)
    return found


OPEN_GAPS_SQL = (
    "SELECT policy_bundle, gap_id, description, first_seen, last_seen, log_ids, batches, "
    f"example_log_ids FROM {SUMMARY} __WHERE__ "
    "ORDER BY log_ids DESC, last_seen DESC, policy_bundle, gap_id LIMIT {limit:UInt32}"
)
"""``open_gap_rows``' statement: ``SUMMARY`` where the gaps' summary is read, ``__WHERE__``
where its conditions go (parameters ``limit``, and ``bundle`` / ``since`` when filtered)."""


def open_gap_rows(
    warehouse: GapDb, bundle: str | None, since: datetime | None, limit: int
) -> list[tuple[Any, ...]]:
    """The rows of ``policy_gap_summary`` (bundle, gap id, description, first_seen,
    last_seen, log_ids, batches, example_log_ids), most reported first (distinct log ids,
    then latest event), of ``bundle`` (None: all) whose latest flagged event is at or after
    ``since`` (None: any), at most ``limit``."""
    conditions = []
    params: dict[str, Any] = {"limit": limit}
    if bundle is not None:
        conditions.append("policy_bundle = {bundle:String}")
        params["bundle"] = bundle
    if since is not None:
        conditions.append("last_seen >= {since:DateTime64(3, 'UTC')}")
        params["since"] = to_utc(since)
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    return _dated_query(warehouse, OPEN_GAPS_SQL.replace("__WHERE__", where), params)
