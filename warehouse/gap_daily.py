"""The ``gaps`` daily aggregate (migration 0029): the policy-gap sightings resolved per day.

``daily_gap_sightings`` holds, per day and version (``warehouse.daily``'s dirty-day scheme),
one row per sighting (``policy_gap_sightings FINAL``, key ``policy_bundle, gap_id, log_id,
batch_id``) in one of two forms:

- **stored** (``stored = true``): the sighting's event is stored (``refusal_events FINAL``,
  any version); the row lies on the event's day, ``event_time`` is the event's time and
  ``scopes`` the sorted distinct (model, product) pairs of the log id's current assessments
  (``current_assessments``: at most one, as ``assessments`` is keyed by (bundle, log id)
  and a current one must be of the event's bundle; empty when it has none);
- **unstored** (``stored = false``): on the day of ``seen_at`` (the audit time of the batch
  that reported it), ``event_time = seen_at``, ``scopes`` empty. Every sighting has one,
  whether or not its event is stored.

Readers (``warehouse.gap_reads``) keep one row per sighting, a stored one when there is
one: that is ``policy_gap_dated`` (0019/0027: the event time, or ``seen_at`` for a log id
without a stored event). Why both forms: an event stored *after* its sighting marks only its
own day (0024's views), so the sighting's ``seen_at`` day keeps its unstored row in its
recorded version; the stored row on the event's day shadows it, and no writer has to look
the sightings up when events are written. The sighting writer
(``warehouse.gaps.insert_sightings``) marks the sightings' ``seen_at`` days and the days of
their stored events (``warehouse.daily.mark_sighting_days``) before and after its insert.

A stored row always exists once both the sighting and its event are stored: the event's
day is marked by the event's insert (after which a recompute sees the sighting if it was
stored first) or by the sighting writer's mark after its insert (which finds the event if
it was stored first). Every version of an event carries the same event time (0023's
invariant), so the stored row's day never changes.

``LIVE`` is the recompute of the days ``{dirty:Array(Date)}`` (``warehouse.daily``'s
``Aggregate.live``, with ``__IN_DIRTY_RANGE__`` for the time range of those days): the
events of those days are looked up by a PREWHERE on the sightings' log ids (a sort-key
column, so it commutes with FINAL: migration 0027), and their current assessments likewise.
"""

from __future__ import annotations

__all__ = ["COLUMNS", "COUNTS", "KEYS", "LIVE", "SCOPES_TYPE"]

#: The sighting's key (``policy_gap_sightings``' sort key), after ``day``.
KEYS = ("policy_bundle", "gap_id", "log_id", "batch_id")
#: The values of a resolved sighting.
COUNTS = ("description", "gap_description", "seen_at", "event_time", "stored", "scopes")
#: ``day``, ``KEYS``, ``COUNTS``: the columns of the aggregate's source.
COLUMNS = ("day", *KEYS, *COUNTS)
#: The type of ``scopes``: (model, product) pairs.
SCOPES_TYPE = "Array(Tuple(String, String))"

_SIGHTED = "PREWHERE log_id IN (SELECT log_id FROM {db:Identifier}.policy_gap_sightings)"
_ON_DIRTY_DAYS = "has({dirty:Array(Date)}, toDate(event_time)) AND __IN_DIRTY_RANGE__"

LIVE = f"""SELECT toDate(event_time) AS day, policy_bundle, gap_id, log_id, batch_id, description,
       gap_description, seen_at, event_time, stored, scopes
FROM (
    SELECT s.policy_bundle AS policy_bundle, s.gap_id AS gap_id, s.log_id AS log_id,
           s.batch_id AS batch_id, s.description AS description,
           s.gap_description AS gap_description, s.seen_at AS seen_at,
           e.event_time AS event_time, true AS stored,
           CAST(c.scopes, '{SCOPES_TYPE}') AS scopes
    FROM {{db:Identifier}}.policy_gap_sightings AS s FINAL
    INNER JOIN (
        SELECT log_id, event_time FROM {{db:Identifier}}.refusal_events FINAL
        {_SIGHTED}
        WHERE {_ON_DIRTY_DAYS}
    ) AS e ON s.log_id = e.log_id
    LEFT JOIN (
        SELECT log_id, arraySort(groupUniqArray((toString(model), toString(product)))) AS scopes
        FROM {{db:Identifier}}.assessments FINAL
        {_SIGHTED}
        WHERE {_ON_DIRTY_DAYS}
          AND (log_id, policy_bundle) IN (
              SELECT log_id, policy_bundle FROM {{db:Identifier}}.refusal_events FINAL
              {_SIGHTED}
              WHERE is_refusal AND {_ON_DIRTY_DAYS}
          )
        GROUP BY log_id
    ) AS c ON s.log_id = c.log_id
    UNION ALL
    SELECT policy_bundle, gap_id, log_id, batch_id, description, gap_description, seen_at,
           seen_at AS event_time, false AS stored, CAST([], '{SCOPES_TYPE}') AS scopes
    FROM {{db:Identifier}}.policy_gap_sightings FINAL
    WHERE has({{dirty:Array(Date)}}, toDate(seen_at))
)"""
