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

``list_open_gaps`` reads the per-gap summary for ``refusal-audit gaps``. The SQL of both is
``warehouse.gaps``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson

from processors.gap_text import describe_gap
from processors.gaps import (
    DEFAULT_COOLDOWN,
    DEFAULT_SIMILARITY,
    GapEvidence,
    GapMatcher,
    PreviousAlert,
    gap_alert,
    gap_alert_id,
)
from refusal_audit.config import Settings
from schemas.alerts import Alert
from warehouse.client import Client
from warehouse.gaps import (
    GapDb,
    evidence_sql,
    flagged_batches,
    gap_alerts_of,
    gap_db,
    gap_evidence,
    insert_sightings,
    known_gaps,
    newest_sighting,
    open_gap_rows,
    stored_gap_alerts,
    tracked_sightings,
)
from warehouse.store import Warehouse, to_utc

__all__ = [
    "DEFAULT_MARGIN",
    "GapSummary",
    "list_open_gaps",
    "track_configured_gaps",
    "track_gaps",
]

DEFAULT_MARGIN = timedelta(hours=1)
"""How far before the newest stored sighting ``track_gaps`` re-reads batches: a batch stored
later than others audited after it (a slow worker) is still picked up within this margin."""


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


def _duration(value: timedelta | float) -> timedelta:
    return value if isinstance(value, timedelta) else timedelta(seconds=float(value))


@dataclass(frozen=True)
class _Batch:
    batch_id: str
    bundle: str
    audited_at: datetime
    flags: list[tuple[str, list[str]]]


def _flags(raw: Any) -> list[tuple[str, list[str]]]:
    flags: list[tuple[str, list[str]]] = []
    for flag in raw or []:
        if isinstance(flag, dict):
            description, ids = flag["description"], flag["example_log_ids"]
        else:
            description, ids = flag
        flags.append((str(description), [str(i) for i in ids]))
    return flags


def _read_batches(warehouse: GapDb, since: datetime | None) -> list[_Batch]:
    return [
        _Batch(batch_id, bundle, audited_at, _flags(flags))
        for batch_id, bundle, audited_at, flags in flagged_batches(warehouse, since)
    ]


def _record_sightings(warehouse: GapDb, batches: Sequence[_Batch], similarity: float) -> int:
    """Assign the flags of ``batches`` to gaps and store the new sightings; return how many."""
    tracked, keys = tracked_sightings(warehouse, [b.batch_id for b in batches])
    untracked = sorted(
        {b.bundle for b in batches for d, _ in b.flags if (b.batch_id, d) not in tracked}
    )
    matcher = GapMatcher(known_gaps(warehouse, untracked), similarity)
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
    insert_sightings(warehouse, rows)
    return len(rows)


def _previous_counts(payload: str) -> dict[str, int]:
    try:
        counts = orjson.loads(payload).get("current_counts", {})
        return {str(k): int(v) for k, v in counts.items()}
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        return {}  # not an Alert payload: the previous counts are unknown


def _period_of(payload: str) -> int | None:
    """The cooldown period index ``k`` a stored gap alert was made for: its window starts
    ``k`` window lengths after its baseline's start (``processors.gaps.gap_alert``); None
    when the payload does not say."""
    try:
        data = orjson.loads(payload)
        window, baseline = data["window"], data["baseline"]
        start, end = datetime.fromisoformat(window["start"]), datetime.fromisoformat(window["end"])
        length = end - start
        k = (start - datetime.fromisoformat(baseline["start"])) / length
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return round(k) if abs(k - round(k)) < 1e-6 else None


def _alerts_by_period(
    warehouse: GapDb, evidence: GapEvidence, alerts: dict[str, str] | None
) -> dict[int, str]:
    """period k -> payload of the gap's stored alerts with the id ``gap_alert_id(bundle,
    gap, k)``, for k up to the gap's current period: the ids the tracker would look up one
    by one, found from the alerts' own windows. ``alerts``: the stored alerts whose payload
    names the gap, or None when some stored gap alert names no gap. An alert whose window
    does not give its id back (written by hand, by another version, or another bundle's
    with this gap id), or None, sends that gap to the lookup of every period's id, as
    before."""
    bundle, gap = evidence.policy_bundle, evidence.gap_id
    if alerts is not None:
        found: dict[int, str] = {}
        for alert, payload in alerts.items():
            k = _period_of(payload)
            if k is None or gap_alert_id(bundle, gap, k) != alert:
                break
            if k <= evidence.period:
                found[k] = payload
        else:
            return found
    ids = [gap_alert_id(bundle, gap, k) for k in range(evidence.period + 1)]
    stored = stored_gap_alerts(warehouse, ids)
    return {k: stored[i] for k, i in enumerate(ids) if i in stored}


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
    warehouse = gap_db(client)
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
        newest = newest_sighting(warehouse)
        read_since = None if newest is None else newest - margin
    batches = _read_batches(warehouse, read_since)
    if batches:
        _record_sightings(warehouse, batches, similarity)
    newest = newest_sighting(warehouse)
    if newest is None:
        return []
    candidates = gap_evidence(warehouse, newest - cooldown, cooldown)
    current = [gap_alert_id(e.policy_bundle, e.gap_id, e.period) for e, _, _ in candidates]
    stored = gap_alerts_of(warehouse, sorted({e.gap_id for e, _, _ in candidates}), current)
    present = {alert for rows in stored.values() for alert in rows}
    alerts: list[Alert] = []
    for (evidence, _, tracked), alert_id in zip(candidates, current, strict=True):
        if alert_id in present:  # by its id, whatever its row says: as before
            continue
        bundle, gap = evidence.policy_bundle, evidence.gap_id
        rows = None if "" in stored else stored.get(gap, {})
        by_period = _alerts_by_period(warehouse, evidence, rows)
        earlier = [k for k in by_period if k < evidence.period]
        previous = None
        if earlier:
            k = max(earlier)
            previous = PreviousAlert(k, _previous_counts(by_period[k]))
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
    warehouse = gap_db(client)
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    rows = open_gap_rows(warehouse, bundle, since, limit)
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
