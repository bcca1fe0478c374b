"""Policy-gap tracking against the warehouse: sightings in, alerts out.

``track_gaps`` is meant to run on a timer in one process (the worker group's leader) or
after a batch run. Each call:

1. reads the audited batches with policy-gap flags (``audit_batches FINAL``) audited since
   the newest stored sighting minus a safety margin (re-reading is harmless);
2. assigns every flag to a gap of its bundle (``processors.gaps.GapMatcher``; a flag already
   tracked keeps its gap) and stores one sighting per example log id in
   ``policy_gap_sightings`` (only sightings not stored yet);
3. for every gap seen within one cooldown of the newest sighting, decides whether an alert
   is due in the gap's current cooldown period (``processors.gaps.gap_alert``) and returns
   the due alerts whose id is not yet in the ``alerts`` table.

One grouping and one dating rule for every place that shows gaps (``refusal-audit gaps``,
the report's gap section, the gap alerts, the Grafana gap panels): the gaps are the tracked
ones (step 2), named after their most common member description (the flag description that
holds the most distinct log ids), and dated by the **event time** of their refusals
(``policy_gap_dated``; the audit time only for a log id without a stored event), the time
the report's period, the drift alerts and the dashboards use. The audit time of a sighting
(``seen_at``) is only the tracking's bookkeeping: which batches to re-read, which gaps got
new evidence, and the cut-off of an alert's evidence query.

The caller stores (``alerts`` table, payload = the alert's JSON) and publishes the returned
alerts; an alert returned but never stored is returned again by a later call as long as its
gap stays within a cooldown of the newest sighting. Everything is idempotent: redelivered or
re-audited batches add no sightings for what they already reported, and alert ids are
deterministic from the data (gap id and cooldown period counted from the gap's first
flagged event), so a recomputation after a restart gives the same ids.

``list_open_gaps`` reads the per-gap summary for ``refusal-audit gaps``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from clickhouse_connect.driver.exceptions import ClickHouseError

from processors.gap_text import describe_gap
from processors.gaps import (
    DEFAULT_COOLDOWN,
    DEFAULT_SIMILARITY,
    MAX_EXAMPLES,
    MAX_GAP_DESCRIPTIONS,
    GapEvidence,
    GapMatcher,
    KnownGap,
    PreviousAlert,
    gap_alert,
    gap_alert_id,
)
from refusal_audit.config import Settings
from schemas.alerts import Alert
from warehouse.client import Client, WarehouseError, quote_identifier, validate_identifier
from warehouse.store import Warehouse, dedup_token, to_utc

__all__ = [
    "DEFAULT_MARGIN",
    "SIGHTING_COLUMNS",
    "GapSummary",
    "evidence_sql",
    "list_open_gaps",
    "track_configured_gaps",
    "track_gaps",
]

DEFAULT_MARGIN = timedelta(hours=1)
"""How far before the newest stored sighting ``track_gaps`` re-reads batches: a batch stored
later than others audited after it (a slow worker) is still picked up within this margin."""

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
class GapSummary:
    """One gap as ``list_open_gaps`` reports it.

    ``description``: its most common member description (the flag description holding the
    most distinct log ids; ties: the earliest), as ``describe_gap`` gives it (without the one
    batch's count that older ``local`` engine descriptions began with);
    ``first_seen``/``last_seen``: event times (aware UTC) of its first and latest flagged
    refusal (a log id without a stored event: the audit time of its sighting);
    ``log_ids``/``batches``: distinct refusal log ids and audited batches that reported it
    (the gap's counts); ``example_log_ids``: up to 20, in order of first sighting.
    """

    policy_bundle: str
    gap_id: str
    description: str
    first_seen: datetime
    last_seen: datetime
    log_ids: int
    batches: int
    example_log_ids: list[str]

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (datetimes kept as datetimes)."""
        return {
            "policy_bundle": self.policy_bundle,
            "gap_id": self.gap_id,
            "description": self.description,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "log_ids": self.log_ids,
            "batches": self.batches,
            "example_log_ids": list(self.example_log_ids),
        }


@dataclass(frozen=True)
class _Db:
    client: Client
    database: str


def _db(target: Client | Warehouse) -> _Db:
    """The client and database of a ``Warehouse``, or of a client bound to a database."""
    if isinstance(target, Warehouse):
        return _Db(target.client, target.database)
    database = getattr(target, "database", None)
    if not database:
        raise WarehouseError("the warehouse client is not bound to a database")
    return _Db(target, validate_identifier(str(database)))


def _duration(value: timedelta | float) -> timedelta:
    return value if isinstance(value, timedelta) else timedelta(seconds=float(value))


@dataclass(frozen=True)
class _Batch:
    batch_id: str
    bundle: str
    audited_at: datetime
    flags: list[tuple[str, list[str]]]


def _query(
    warehouse: _Db, sql: str, parameters: dict[str, Any] | None = None
) -> list[tuple[Any, ...]]:
    params = {"db": warehouse.database, **(parameters or {})}
    try:
        result = warehouse.client.query(sql, parameters=params)
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


def _newest_sighting(warehouse: _Db) -> datetime | None:
    rows = _query(
        warehouse, "SELECT max(seen_at), count() FROM {db:Identifier}.policy_gap_sightings"
    )
    newest, n = rows[0]
    return to_utc(newest) if n else None


def _flags(raw: Any) -> list[tuple[str, list[str]]]:
    flags: list[tuple[str, list[str]]] = []
    for flag in raw or []:
        if isinstance(flag, dict):
            description, ids = flag["description"], flag["example_log_ids"]
        else:
            description, ids = flag
        flags.append((str(description), [str(i) for i in ids]))
    return flags


def _read_batches(warehouse: _Db, since: datetime | None) -> list[_Batch]:
    where = "" if since is None else "AND audited_at >= {since:DateTime64(3, 'UTC')}"
    rows = _query(
        warehouse,
        "SELECT batch_id, policy_bundle, audited_at, policy_gap_flags "
        "FROM {db:Identifier}.audit_batches FINAL "
        f"WHERE length(policy_gap_flags) > 0 {where} ORDER BY audited_at, batch_id",
        {"since": to_utc(since)} if since is not None else None,
    )
    return [
        _Batch(str(batch_id), str(bundle), to_utc(audited_at), _flags(flags))
        for batch_id, bundle, audited_at, flags in rows
    ]


def _tracked(
    warehouse: _Db, batch_ids: Sequence[str]
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


def _known_gaps(warehouse: _Db, bundles: Sequence[str]) -> list[KnownGap]:
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


def _insert_sightings(warehouse: _Db, rows: list[list[Any]]) -> None:
    if not rows:
        return
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


def _record_sightings(warehouse: _Db, batches: Sequence[_Batch], similarity: float) -> int:
    """Assign the flags of ``batches`` to gaps and store the new sightings; return how many."""
    tracked, keys = _tracked(warehouse, [b.batch_id for b in batches])
    untracked = sorted(
        {b.bundle for b in batches for d, _ in b.flags if (b.batch_id, d) not in tracked}
    )
    matcher = GapMatcher(_known_gaps(warehouse, untracked), similarity)
    rows: list[list[Any]] = []
    for batch in batches:
        for description, log_ids in batch.flags:
            gap = tracked.get((batch.batch_id, description))
            if gap is None:
                assignment = matcher.assign(batch.bundle, description)
                gap = (assignment.gap_id, assignment.gap_description)
                tracked[(batch.batch_id, description)] = gap
            for log_id in dict.fromkeys(log_ids):
                key = (batch.bundle, gap[0], log_id, batch.batch_id)
                if key in keys:
                    continue
                keys.add(key)
                rows.append([*key, description, gap[1], batch.audited_at])
    _insert_sightings(warehouse, rows)
    return len(rows)


def _evidence(
    warehouse: _Db, horizon: datetime, cooldown: timedelta
) -> list[tuple[GapEvidence, datetime, datetime]]:
    """Evidence of every gap with a sighting tracked at or after ``horizon`` (audit time),
    dated by event time (``policy_gap_dated``) and named after its most common member
    (``policy_gap_summary``), with its period start and its latest sighting's audit time."""
    rows = _query(
        warehouse,
        """
SELECT policy_bundle, gap_id, named.description, first_seen, last_seen, log_ids, batch_count,
       period, period_start, before, examples, last_tracked
FROM (
SELECT policy_bundle, gap_id,
       min(first) AS first_seen,
       max(last) AS last_seen,
       max(tracked) AS last_tracked,
       count() AS log_ids,
       length(groupUniqArrayArray(batches)) AS batch_count,
       intDiv(dateDiff('millisecond', first_seen, last_seen), {cooldown:Int64}) AS period,
       first_seen + toIntervalMillisecond(period * {cooldown:Int64}) AS period_start,
       arraySort(groupArray((first, log_id))) AS seen,
       arrayCount(x -> x.1 < period_start, seen) AS before,
       arraySlice(arrayMap(x -> x.2, arrayConcat(arrayFilter(x -> x.1 >= period_start, seen),
                                                 arrayFilter(x -> x.1 < period_start, seen))),
                  1, {examples:UInt32}) AS examples
FROM (
    SELECT policy_bundle, gap_id, log_id, min(event_time) AS first, max(event_time) AS last,
           max(seen_at) AS tracked, groupUniqArray(batch_id) AS batches
    FROM {db:Identifier}.policy_gap_dated
    WHERE (policy_bundle, gap_id) IN (
        SELECT policy_bundle, gap_id FROM {db:Identifier}.policy_gap_sightings
        WHERE seen_at >= {horizon:DateTime64(3, 'UTC')}
    )
    GROUP BY policy_bundle, gap_id, log_id
)
GROUP BY policy_bundle, gap_id
) AS evidence
INNER JOIN (
    SELECT policy_bundle, gap_id, description FROM {db:Identifier}.policy_gap_summary
) AS named USING (policy_bundle, gap_id)
ORDER BY policy_bundle, gap_id
""",
        {
            "horizon": horizon,
            "cooldown": cooldown // timedelta(milliseconds=1),
            "examples": MAX_EXAMPLES,
        },
    )
    out: list[tuple[GapEvidence, datetime, datetime]] = []
    for row in rows:
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


def _stored_alerts(warehouse: _Db, ids: Sequence[str]) -> dict[str, str]:
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


def _previous_counts(payload: str) -> dict[str, int]:
    try:
        counts = orjson.loads(payload).get("current_counts", {})
        return {str(k): int(v) for k, v in counts.items()}
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        return {}  # not an Alert payload: the previous counts are unknown


def track_gaps(
    client: Client | Warehouse,
    *,
    now: datetime,
    similarity: float = DEFAULT_SIMILARITY,
    cooldown: timedelta | float = DEFAULT_COOLDOWN,
    since: datetime | None = None,
    margin: timedelta | float = DEFAULT_MARGIN,
) -> list[Alert]:
    """Track the policy gaps of newly audited batches; return the alerts due, not yet stored.

    ``client``: a migrated warehouse: a client bound to its database (``warehouse.connect``)
    or a ``Warehouse``. ``now``: the alerts' ``created_at`` (aware; nothing else depends on
    the wall clock). ``similarity``: cosine similarity in [0, 1] at or above which a flag
    joins an existing gap of its bundle (``processors.gaps.DEFAULT_SIMILARITY``, 0.3).
    ``cooldown``: the re-alert period (a timedelta, or seconds), counted from a gap's first
    flagged event in event time (the alert's window is that period); default 24 h.
    ``since``: read batches audited at or
    after this time (aware) instead of from the newest stored sighting minus ``margin``
    (a timedelta or seconds, default 1 h; the first call reads every batch).

    Returns the due alerts (``kind == "policy_gap"``), ordered by bundle and gap id, whose
    ids are not in the ``alerts`` table: the caller stores them there (payload: the alert's
    JSON, from which a re-alert reads the previous counts) and publishes them. At most one
    per gap per call.

    Raises ``ValueError`` for a similarity outside [0, 1], a cooldown under 1 ms or a
    negative margin, ``WarehouseError`` when the warehouse fails or the client has no
    database (nothing is lost: call again).
    """
    warehouse = _db(client)
    cooldown = _duration(cooldown)
    margin = _duration(margin)
    if not 0.0 <= similarity <= 1.0:
        raise ValueError(f"similarity {similarity} outside [0, 1]")
    if cooldown < timedelta(milliseconds=1):
        raise ValueError(f"cooldown must be at least 1 ms, got {cooldown}")
    cooldown = timedelta(milliseconds=cooldown // timedelta(milliseconds=1))  # as stored: ms
    if margin < timedelta(0):
        raise ValueError(f"margin must not be negative, got {margin}")
    read_since = since
    if read_since is None:
        newest = _newest_sighting(warehouse)
        read_since = None if newest is None else newest - margin
    batches = _read_batches(warehouse, read_since)
    if batches:
        _record_sightings(warehouse, batches, similarity)
    newest = _newest_sighting(warehouse)
    if newest is None:
        return []
    candidates = _evidence(warehouse, newest - cooldown, cooldown)
    ids = [
        gap_alert_id(e.policy_bundle, e.gap_id, k)
        for e, _, _ in candidates
        for k in range(e.period + 1)
    ]
    stored = _stored_alerts(warehouse, ids)
    alerts: list[Alert] = []
    for evidence, _, tracked in candidates:
        bundle, gap = evidence.policy_bundle, evidence.gap_id
        if gap_alert_id(bundle, gap, evidence.period) in stored:
            continue
        previous = None
        for k in range(evidence.period - 1, -1, -1):
            payload = stored.get(gap_alert_id(bundle, gap, k))
            if payload is not None:
                previous = PreviousAlert(k, _previous_counts(payload))
                break
        alert = gap_alert(
            evidence,
            cooldown=cooldown,
            previous=previous,
            now=now,
            evidence_query=evidence_sql(warehouse.database, bundle, gap, tracked),
        )
        if alert is not None:
            alerts.append(alert)
    return alerts


def track_configured_gaps(
    client: Client | Warehouse, cfg: Settings, *, now: datetime
) -> list[Alert]:
    """``track_gaps`` with the configured ``gaps_similarity``, ``gaps_cooldown_seconds`` and
    ``gaps_reread_margin_seconds`` of ``cfg``: how ``gaps``, ``report`` and the detectors
    track, so they all group alike. Raises what ``track_gaps`` raises."""
    return track_gaps(
        client,
        now=now,
        similarity=cfg.gaps_similarity,
        cooldown=cfg.gaps_cooldown_seconds,
        margin=cfg.gaps_reread_margin_seconds,
    )


def list_open_gaps(
    client: Client | Warehouse,
    bundle: str | None = None,
    since: datetime | None = None,
    limit: int = 100,
) -> list[GapSummary]:
    """The tracked policy gaps, most reported first (distinct log ids, then latest event).

    ``client``: a client bound to the warehouse database, or a ``Warehouse``. Every tracked
    gap is open (gaps are not closed yet). ``bundle``: only this policy bundle. ``since``:
    only gaps whose latest flagged event is at or after this time (aware; naive means UTC).
    ``limit``: at most this many gaps (>= 1). Counts are up to date with the last
    ``track_gaps`` call.

    Raises ``ValueError`` for ``limit < 1``, ``WarehouseError`` when the query fails.
    """
    warehouse = _db(client)
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    conditions = []
    params: dict[str, Any] = {"limit": limit}
    if bundle is not None:
        conditions.append("policy_bundle = {bundle:String}")
        params["bundle"] = bundle
    if since is not None:
        conditions.append("last_seen >= {since:DateTime64(3, 'UTC')}")
        params["since"] = to_utc(since)
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    rows = _query(
        warehouse,
        "SELECT policy_bundle, gap_id, description, first_seen, last_seen, log_ids, batches, "
        f"example_log_ids FROM {{db:Identifier}}.policy_gap_summary {where} "
        "ORDER BY log_ids DESC, last_seen DESC, policy_bundle, gap_id LIMIT {limit:UInt32}",
        params,
    )
    return [
        GapSummary(
            policy_bundle=str(b),
            gap_id=str(g),
            description=describe_gap(str(d)),
            first_seen=to_utc(first),
            last_seen=to_utc(last),
            log_ids=int(n),
            batches=int(nb),
            example_log_ids=[str(x) for x in examples],
        )
        for b, g, d, first, last, n, nb, examples in rows
    ]
