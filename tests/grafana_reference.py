"""The audit dashboard's panel and variable SQL that migration 0025's rewrite (trendA), and
0028's (trendD: the review panels, ``tests/review_reference.py``), moved onto the daily
aggregates, as it read ``current_assessments`` before (sub-day time filter and
interval): the reference ``tests/test_grafana_daily.py`` compares the panels with, over
day-aligned time ranges and a one-day interval."""

from __future__ import annotations

from review_reference import PANELS as REVIEW_PANELS

from refusal_audit.dashboards.sql import scope, wilson

_CURRENT = f"""FROM current_assessments
WHERE $__timeFilter(event_time)
  AND {scope()}"""
_INNER = _CURRENT.replace(chr(10), chr(10) + "  ")
_LOW, _HIGH = wilson("estimated_false_positives", "audited")

PANELS = {
    "Refusals audited": f"""
SELECT count() AS refusals_audited
{_CURRENT}
""",
    "Estimated false-positive rate (Wilson 95%)": f"""
SELECT estimated_false_positives / audited AS rate,
       {_LOW} AS wilson_low,
       {_HIGH} AS wilson_high
FROM (
  SELECT count() AS audited, countIf(is_estimated_false_positive) AS estimated_false_positives
  {_INNER}
)
WHERE audited > 0
""",
    "False-positive rate with its Wilson 95% band": f"""
SELECT time, estimated_false_positives / audited AS rate,
       {_LOW} AS wilson_low,
       {_HIGH} AS wilson_high
FROM (
  SELECT $__timeInterval(event_time) AS time, count() AS audited,
         countIf(is_estimated_false_positive) AS estimated_false_positives
  {_INNER}
  GROUP BY time
)
ORDER BY time
""",
    "By model and product": f"""
SELECT model, product, audited, estimated_false_positives,
       estimated_false_positives / audited AS rate,
       {_LOW} AS wilson_low,
       {_HIGH} AS wilson_high
FROM (
  SELECT model, product, count() AS audited,
         countIf(is_estimated_false_positive) AS estimated_false_positives
  {_INNER}
  GROUP BY model, product
)
ORDER BY audited DESC, model, product
""",
    "Refusal categories over time (stacked)": f"""
SELECT $__timeInterval(event_time) AS time, category, count() AS assessments
{_CURRENT}
GROUP BY time, category
ORDER BY time, category
""",
}

VARIABLES = {
    name: f"SELECT DISTINCT {column} FROM current_assessments ORDER BY {column}"
    for name, column in (("model", "model"), ("product", "product"), ("bundle", "policy_bundle"))
}

# The review panels moved onto the daily aggregates by migration 0028 (trendD).
PANELS |= REVIEW_PANELS
