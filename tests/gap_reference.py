"""The policy-gap reads as they were before migration 0027 (trendC; the views taken from
0019's text): ``policy_gap_dated`` dating every sighting by a join with all of
``refusal_events FINAL``, ``policy_gap_summary`` over it, and the report's and the
dashboard's "has a current assessment" over all of ``current_assessments``.
``tests/test_gap_lookups.py`` compares the rewritten reads with these. Tables are
unqualified (``{db}.`` = the client's database) for the panels; the report's form names
``{db:Identifier}``."""

from __future__ import annotations

from processors.gap_text import describe_gap_sql
from refusal_audit.dashboards.sql import scope, var_filter
from warehouse.client import split_sql
from warehouse.migrate import load_migrations
from warehouse.named import DAY_MODEL_PRODUCT


def _view_body(migration: str, view: str) -> str:
    """The SELECT of ``{db}.view`` as migration ``migration`` created it, ``{db}.`` kept as
    the ``{db}`` placeholder (``_panel``/``_report`` fill it)."""
    (found,) = [m for m in load_migrations() if m.id == migration]
    (statement,) = [t for t in split_sql(found.sql) if f"{{db}}.{view} AS" in t.text]
    return statement.text.split(f"{{db}}.{view} AS", 1)[1].replace("{db}.", "{db}")


DATED = f"({_view_body('0019_policy_gap_dates', 'policy_gap_dated')})"
"""0019's ``policy_gap_dated``: every sighting joined with all of ``refusal_events FINAL``."""

SUMMARY = (
    "("
    + _view_body("0019_policy_gap_dates", "policy_gap_summary").replace(
        "{db}policy_gap_dated", DATED
    )
    + ")"
)
"""0019's ``policy_gap_summary`` over ``DATED``."""


def _panel(sql: str) -> str:
    return sql.replace("{db}", "")


def _report(sql: str) -> str:
    return sql.replace("{db}", "{db:Identifier}.")


_SIGHTINGS = f"""FROM {_panel(DATED)}
WHERE {var_filter("policy_bundle", "bundle")}
  AND log_id IN (
    SELECT log_id FROM current_assessments
    WHERE {scope(bundle="")}
  )"""

PANELS = {
    "New gaps": f"""
SELECT count() AS new_gaps
FROM (
  SELECT policy_bundle, gap_id, min(event_time) AS first_seen
  {_SIGHTINGS}
  GROUP BY policy_bundle, gap_id
)
WHERE $__timeFilter(first_seen)
""",
    "Gap sightings": f"""
SELECT $__timeInterval(event_time) AS time, count() AS sightings, uniqExact(gap_id) AS gaps
{_SIGHTINGS}
  AND $__timeFilter(event_time)
GROUP BY time
ORDER BY time
""",
    "Open gaps with example log ids": f"""
SELECT policy_bundle, description, first_seen, last_seen, log_ids, batches,
       arrayStringConcat(example_log_ids, ', ') AS example_log_ids
FROM {_panel(SUMMARY)}
WHERE {var_filter("policy_bundle", "bundle")}
  AND $__timeFilter(last_seen)
ORDER BY log_ids DESC, last_seen DESC, policy_bundle, gap_id
LIMIT 100
""",
}

TOP_GAP_FLAGS = f"""
SELECT policy_bundle, gap_id,
       {describe_gap_sql("any(named.description)")} AS description,
       uniqExact(log_id) AS refusals,
       uniqExact(batch_id) AS batches,
       arraySlice(arraySort(groupUniqArray(log_id)), 1, 5) AS example_log_ids,
       any(named.first_seen) AS first_event,
       toDate(first_event) >= {{since:Date}} AS new_in_period
FROM {_report(DATED)} AS dated
INNER JOIN (
    SELECT policy_bundle, gap_id, description, first_seen
    FROM {_report(SUMMARY)}
) AS named USING (policy_bundle, gap_id)
WHERE log_id IN (
    SELECT log_id FROM {{db:Identifier}}.current_assessments WHERE {DAY_MODEL_PRODUCT}
)
GROUP BY policy_bundle, gap_id
ORDER BY refusals DESC, description, policy_bundle, gap_id
LIMIT {{limit:UInt32}}
"""


def tracker_sql(sql: str) -> str:
    """``warehouse.gaps.EVIDENCE_SQL`` or ``OPEN_GAPS_SQL`` (the tracker's and ``refusal-audit
    gaps``' reads) over 0019's views instead of 0029's aggregate: the form they had before
    they moved onto it."""
    from warehouse import gaps

    return sql.replace(gaps.DATED, _report(DATED)).replace(gaps.SUMMARY, _report(SUMMARY))
