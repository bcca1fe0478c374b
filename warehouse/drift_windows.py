"""The rows of the drift views (migrations 0008/0009/0013) whose window starts in
``[start, end)``, read from a bounded part of the store (issue 27, item 4).

``drift_assessments(window_seconds=W, grace_seconds=G)`` computes every current
assessment's window over the whole store, then filters: its cost grows with the store. A
row's window is its event window unless the event first arrived (``event_arrivals``, or the
oldest stored version) after that window's end plus ``G``, then it is its arrival's window
(late). A row of a window in ``[start, end)`` therefore has

- ``start <= event_time < end + W`` when it is on time (its event window starts in the range,
  and an event lies less than ``W`` after its window's start), or
- ``event_time < end + W`` and first arrival ``>= start`` when it is late, or an
  ``event_time`` within ``W + G`` of ``DateTime``'s end (2106-02-07 06:28:15 UTC) or past
  it and first arrival ``>= start``: there the view's ``toStartOfInterval`` saturates and
  its window end plus the grace wraps to 1970, so the view counts the row late in its
  arrival window.

Every stored version of an event carries its ``event_time`` (migration 0023's invariant) and
an ``ingested_at`` at or after its first arrival, so the log ids of both kinds are among
``refusal_events`` rows (any version, no ``FINAL``) with ``start <= event_time < end + W``
(partition pruning by month) or with ``event_time`` outside that range and ``ingested_at >=
start`` (late candidates: a scan of two time columns). :func:`rows_sql` computes the view's columns
for those log ids only (``current_assessments`` restricted to them, their first arrivals)
and keeps the windows in range: the same windows and counts as the view's, which
``tests/test_drift_windows.py`` checks against it.

Two bounds keep the reads to the months that hold the rows (found at 100 M rows, where 27
hourly windows took 57 s and 27 daily ones 100 s; docs/alerts.md):

- the late candidates' versions are read from the earliest late candidate's ``event_time``
  on (``_LO``, a scalar subquery ClickHouse evaluates before it prunes partitions), not
  from the start of the store: by the invariant above every version of a key carries the
  same ``event_time``;
- ``event_arrivals`` (sorted by log id only, so a lookup of every candidate reads every
  granule) is looked up only for the candidates that could be late: a first arrival is at
  or before the oldest stored version's ``ingested_at``, so a key whose oldest stored
  version arrived before its (earliest) window's end plus the grace is on time whatever
  ``event_arrivals`` holds. The others (late events, and redeliveries whose first version
  was merged away) are few. Their arrival time is the earlier of the two, as before; for
  the on-time keys ``ingested_at`` is the oldest stored version's (the view's may be
  earlier; no window or count depends on it then).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from warehouse.partition_keys import LOCAL_FINAL

__all__ = ["READ_SETTINGS", "params", "reviews_sql", "rows_sql"]

#: The key sets (log ids in range) are small next to the store: let ClickHouse skip the
#: granules of ``event_arrivals``/``assessments``/``refusal_events`` outside them
#: (migration 0022 turned this off for the whole store's set of current refusals), and
#: FINAL merge inside each month only (0023: every version of a key is in one month; FINAL
#: over all months took most of the time at 1 M rows).
#: ``join_use_nulls`` 0 (ClickHouse's default, set so a profile cannot change it): a key
#: missing from ``event_arrivals`` reads as '' in the LEFT JOIN of :func:`_arrivals`.
READ_SETTINGS: dict[str, int] = {
    **LOCAL_FINAL,
    "use_index_for_in_with_subqueries": 1,
    "join_use_nulls": 0,
}

# {start}/{hi}: the window range's start and its end plus one window (see the docstring).
# Each arm is a time restriction (partition pruning) and the log ids of refusal_events rows
# in it (any version, no FINAL: a scan of time columns) for the primary keys' pruning.
_START, _HI = "{start:DateTime64(3, 'UTC')}", "{hi:DateTime64(3, 'UTC')}"
_ON_TIME = f"event_time >= {_START} AND event_time < {_HI}"
# Late candidates: before the on-time range and arrived since {start}, or dated so near or
# past DateTime's end (2106-02-07 06:28:15 UTC) that the view's window end wraps: its
# toStartOfInterval returns a DateTime (saturated there) and the window's end plus the grace
# then wraps to 1970, so the view counts such an event late in its arrival window (break9:
# the bounded read dropped them). __WG__ is the window plus the grace (seconds, _rows).
_DATETIME_END = "toDateTime64('2106-02-07 06:28:15', 3, 'UTC')"
_FAR = f"greatest({_HI}, {_DATETIME_END} - toIntervalSecond(__WG__))"
_OUTSIDE = f"(event_time < {_START} OR event_time >= {_FAR})"
_LATE = f"{_OUTSIDE} AND ingested_at >= {_START}"
# the earliest event time of a late candidate ({start} when there is none): the lower
# bound of every read of the candidates' versions
_LO = (
    f"least({_START}, ifNull((SELECT minOrNull(event_time) FROM {{db:Identifier}}"
    f".refusal_events WHERE {_LATE}), {_START}))"
)
_KEYS = f"""(
    SELECT log_id FROM {{db:Identifier}}.refusal_events WHERE {_ON_TIME}
    UNION ALL
    SELECT log_id FROM {{db:Identifier}}.refusal_events WHERE {_LATE}
)"""


def _current(arm: str, time_range: str) -> str:
    """``current_assessments`` of the log ids of one arm (``_ON_TIME`` or ``_LATE``), their
    versions read within ``time_range`` (a condition on ``event_time``: every version of a
    key has the same)."""
    keys = f"(SELECT log_id FROM {{db:Identifier}}.refusal_events WHERE {arm})"
    return f"""SELECT * FROM {{db:Identifier}}.assessments FINAL
    WHERE {time_range} AND log_id IN {keys}
      AND (log_id, policy_bundle) IN (
          SELECT log_id, policy_bundle FROM {{db:Identifier}}.refusal_events FINAL
          WHERE is_refusal AND {time_range} AND log_id IN {keys}
      )"""


_CURRENT = f"""(
    {_current(_ON_TIME, _ON_TIME)}
    UNION ALL
    {_current(_LATE, f"event_time >= {_LO} AND {_OUTSIDE}")}
)"""

# every stored version of the candidates: the oldest one's arrival and earliest event time
_STORED = f"""(
    SELECT log_id, min(ingested_at) AS stored_first, min(event_time) AS first_event_time
    FROM {{db:Identifier}}.refusal_events
    WHERE event_time >= {_LO} AND (event_time < {_HI} OR event_time >= {_FAR})
      AND log_id IN {_KEYS}
    GROUP BY log_id
)"""


def _arrivals(w: int, g: int) -> str:
    """Each candidate's first arrival as the view computes it, ``event_arrivals`` looked up
    only for the keys that could be late (module docstring)."""
    could_be_late = (
        f"stored_first >= toStartOfInterval(first_event_time, toIntervalSecond({w})) "
        f"+ toIntervalSecond({w + g})"
    )
    return f"""(
    SELECT s.log_id AS log_id,
           if(a.log_id = '', s.stored_first, least(s.stored_first, a.arrived_at)) AS ingested_at
    FROM {_STORED} AS s
    LEFT JOIN (
        SELECT log_id, CAST(min(first_ingested_at) AS DateTime64(3, 'UTC')) AS arrived_at
        FROM {{db:Identifier}}.event_arrivals
        WHERE log_id IN (SELECT log_id FROM {_STORED} WHERE {could_be_late})
        GROUP BY log_id
    ) AS a ON a.log_id = s.log_id
)"""


def rows_sql(window_seconds: int, grace_seconds: int) -> str:
    """A subquery of ``drift_assessments(window_seconds, grace_seconds)``'s rows whose
    ``window_start`` is in ``[{start}, {end})`` (same columns), reading the bounded part of
    the store the module docstring describes. Binds ``db``, ``start``, ``end`` and ``hi``
    (:func:`params`). Raises ``ValueError`` for a window under one second or a negative
    grace."""
    return f"(SELECT * EXCEPT (audited_at) FROM {_rows(window_seconds, grace_seconds)})"


def _rows(window_seconds: int, grace_seconds: int) -> str:
    """:func:`rows_sql`'s rows with the assessment's ``audited_at`` (the verdicts' key)."""
    if window_seconds < 1 or grace_seconds < 0:
        raise ValueError(f"window_seconds={window_seconds} must be >= 1, grace >= 0")
    w, g = int(window_seconds), int(grace_seconds)
    sql = f"""(
    SELECT * FROM (
        WITH
            toStartOfInterval(a.event_time, toIntervalSecond({w})) AS event_window,
            e.ingested_at >= event_window + toIntervalSecond({w + g}) AS is_late
        SELECT
            if(is_late, toStartOfInterval(e.ingested_at, toIntervalSecond({w})), event_window)
                AS window_start,
            is_late AS late,
            a.log_id AS log_id,
            a.policy_bundle AS policy_bundle,
            a.model AS model,
            a.product AS product,
            a.category AS category,
            a.is_estimated_false_positive AS is_estimated_false_positive,
            a.requires_human_review AS requires_human_review,
            (a.policy_bundle, a.log_id) IN (
                SELECT policy_bundle, arrayJoin(arrayFlatten(arrayMap(f -> f.2, policy_gap_flags)))
                FROM {{db:Identifier}}.audit_batches FINAL
            ) AS policy_gap,
            a.event_time AS event_time,
            e.ingested_at AS ingested_at,
            a.audited_at AS audited_at
        FROM {_CURRENT} AS a
        INNER JOIN {_arrivals(w, g)} AS e USING (log_id)
    )
    WHERE window_start >= {{start:DateTime64(3, 'UTC')}}
      AND window_start < {{end:DateTime64(3, 'UTC')}}
)"""
    return sql.replace("__WG__", str(w + g))


def reviews_sql(window_seconds: int, grace_seconds: int) -> str:
    """A subquery of ``drift_reviews(window_seconds, grace_seconds)``'s rows whose
    ``window_start`` is in ``[{start}, {end})`` (same columns): :func:`rows_sql`'s rows with
    current verdicts on their current assessment (the view joins the verdicts to
    ``current_assessments`` on ``audited_at``; here the window's rows carry it),
    ``disagreed`` when most of their reviewers disagree. Binds as
    :func:`rows_sql`; raises ``ValueError`` as it does."""
    return f"""(
    SELECT d.window_start AS window_start, d.late AS late, d.log_id AS log_id,
           d.policy_bundle AS policy_bundle, d.model AS model, d.product AS product,
           d.category AS category, r.disagreed AS disagreed
    FROM {_rows(window_seconds, grace_seconds)} AS d
    INNER JOIN (
        SELECT policy_bundle, log_id, assessment_audited_at,
               avg(verdict = 'disagree') > 0.5 AS disagreed
        FROM {{db:Identifier}}.current_verdicts
        GROUP BY policy_bundle, log_id, assessment_audited_at
    ) AS r ON d.policy_bundle = r.policy_bundle AND d.log_id = r.log_id
       AND d.audited_at = r.assessment_audited_at
)"""


def params(database: str, window_seconds: int, start: datetime, end: datetime) -> dict[str, Any]:
    """The parameters :func:`rows_sql` and :func:`reviews_sql` bind: ``db``, ``start``,
    ``end`` and ``hi`` (``end`` plus one window)."""
    return {
        "db": database,
        "start": start,
        "end": end,
        "hi": end + timedelta(seconds=int(window_seconds)),
    }
