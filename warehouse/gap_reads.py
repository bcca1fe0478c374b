"""The policy-gap reads' SQL over the ``gaps`` daily aggregate (migration 0029,
``warehouse.gap_daily``): the report's ``top_gap_flags`` and the dashboard's panels "New
gaps", "Gap sightings" and "Open gaps with example log ids".

Each function takes the source text of the aggregate (``warehouse.daily.marker("gaps",
every_day=True)`` for a query run through ``warehouse.daily.with_source``, or
``refusal_audit.dashboards.sql.daily_source("gaps", every_day=True)`` for a panel) and
returns SQL with the same rows as the views of migration 0019/0027 returned:

- :func:`dated`: ``policy_gap_dated`` (one row per sighting, dated by its event's time, or
  by ``seen_at`` when its event is not stored), plus ``stored`` and ``scopes`` (the (model,
  product) pairs of the log id's current assessments);
- :func:`summary`: ``policy_gap_summary`` over :func:`dated`.
"""

from __future__ import annotations

__all__ = ["assessed", "dated", "summary"]

_SIGHTING = "policy_bundle, gap_id, log_id, batch_id"


def dated(source: str) -> str:
    """A subquery ``( ... )``: one row per sighting of ``source`` (the aggregate's rows of
    every day), its stored-event row when it has one (``warehouse.gap_daily``). Columns:
    ``warehouse.gap_daily.COLUMNS``."""
    return f"""(
    SELECT * FROM {source}
    ORDER BY stored DESC
    LIMIT 1 BY {_SIGHTING}
)"""


def assessed(source: str, match: str) -> str:
    """A subquery ``( ... )`` of the log ids with a current assessment whose (model,
    product) pair ``p`` satisfies ``match`` (an SQL condition on ``p.1``, the model, and
    ``p.2``, the product), and a ``day`` (the event's) among ``source``'s days: the former
    ``log_id IN (SELECT log_id FROM current_assessments WHERE ...)``. A current assessment
    has its event's time (0023), and only a stored row carries ``scopes``."""
    return f"""(
    SELECT log_id FROM {source}
    WHERE stored AND arrayExists(p -> {match}, scopes)
)"""


def summary(source: str) -> str:
    """A subquery ``( ... )`` with the rows of ``policy_gap_summary`` (migration 0019): per
    gap, the member description holding the most distinct log ids (ties: the earliest
    dated), first and last event time, distinct log ids and batches, and up to 20 example
    log ids in event order, over :func:`dated` of ``source``."""
    return f"""(
    SELECT policy_bundle,
           gap_id,
           argMax(member, (member_log_ids, -toUnixTimestamp64Milli(member_first))) AS description,
           min(member_first) AS first_seen,
           max(member_last) AS last_seen,
           length(arrayDistinct(flatten(groupArray(member_ids)))) AS log_ids,
           length(arrayDistinct(flatten(groupArray(member_batches)))) AS batches,
           arraySlice(arrayDistinct(arrayMap(x -> x.2,
                                             arraySort(flatten(groupArray(member_seen))))),
                      1, 20) AS example_log_ids
    FROM (
        SELECT policy_bundle, gap_id, description AS member,
               uniqExact(log_id) AS member_log_ids,
               min(event_time) AS member_first,
               max(event_time) AS member_last,
               groupUniqArray(log_id) AS member_ids,
               groupUniqArray(batch_id) AS member_batches,
               groupArray((event_time, log_id)) AS member_seen
        FROM {dated(source)}
        GROUP BY policy_bundle, gap_id, description
    )
    GROUP BY policy_bundle, gap_id
)"""
