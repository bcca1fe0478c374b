"""Panels of the audit dashboard's first rows: overview, category mix, policy gaps and
alerts (ClickHouse SQL with the plugin's macros; every query reads current rows: the
``current_assessments`` view or ``FINAL``, as ``warehouse.queries`` does).

Unqualified table names resolve in the data source's ``defaultDatabase``.
"""

from __future__ import annotations

from refusal_audit.dashboards.model import (
    TABLE,
    TIME_SERIES,
    Json,
    band,
    ch_annotation,
    ch_target,
    row,
)
from refusal_audit.dashboards.model import panel as make_panel
from refusal_audit.dashboards.sql import DAILY_SETTINGS, daily_source, scope, var_filter, wilson
from warehouse import gap_reads

DAILY = f"""FROM (
  SELECT *, toDateTime(day, 'UTC') AS day_start
  FROM {daily_source("counts")}
)
WHERE {scope()}"""
"""The current assessments' daily counts (``warehouse.daily``'s ``counts``: assessments,
estimated false positives per event day, bundle, model, product and category) of the whole
UTC days the dashboard's time range touches, and of its variables. ``day_start``: the day's
00:00 UTC."""

DAY_RESOLUTION = (
    " Read from the daily aggregates: whole UTC days (every day the time range touches), "
    "at least one day per point."
)
"""The sentence the description of every panel that reads ``DAILY`` ends with."""

_LOW, _HIGH = wilson("estimated_false_positives", "audited")

OVERVIEW_SQL = f"""
SELECT sum(assessments) AS refusals_audited
{DAILY}
{DAILY_SETTINGS}
"""

_TOTALS = f"""SELECT sum(assessments) AS audited,
         sum(estimated_false_positives) AS estimated_false_positives
  {DAILY.replace(chr(10), chr(10) + "  ")}"""

FP_RATE_SQL = f"""
SELECT estimated_false_positives / audited AS rate,
       {_LOW} AS wilson_low,
       {_HIGH} AS wilson_high
FROM (
  {_TOTALS}
)
WHERE audited > 0
{DAILY_SETTINGS}
"""

FP_OVER_TIME_SQL = f"""
SELECT time, estimated_false_positives / audited AS rate,
       {_LOW} AS wilson_low,
       {_HIGH} AS wilson_high
FROM (
  SELECT $__timeInterval(day_start) AS time, {_TOTALS.removeprefix("SELECT ")}
  GROUP BY time
)
ORDER BY time
{DAILY_SETTINGS}
"""

BY_MODEL_PRODUCT_SQL = f"""
SELECT model, product, audited, estimated_false_positives,
       estimated_false_positives / audited AS rate,
       {_LOW} AS wilson_low,
       {_HIGH} AS wilson_high
FROM (
  SELECT model, product, {_TOTALS.removeprefix("SELECT ")}
  GROUP BY model, product
)
ORDER BY audited DESC, model, product
{DAILY_SETTINGS}
"""

CATEGORY_SQL = f"""
SELECT $__timeInterval(day_start) AS time, category, sum(assessments) AS assessments
{DAILY}
GROUP BY time, category
ORDER BY time, category
{DAILY_SETTINGS}
"""

_GAPS = daily_source("gaps", every_day=True)
_MATCH = f"{var_filter('p.1', 'model')} AND {var_filter('p.2', 'product')}"
_SIGHTINGS = f"""FROM {gap_reads.dated(_GAPS)}
WHERE {var_filter("policy_bundle", "bundle")}
  AND log_id IN {gap_reads.assessed(_GAPS, _MATCH)}"""
"""Gap sightings of the selected bundles whose event has a current assessment of the
selected models and products, dated by event time (``policy_gap_dated``'s rows, as
``refusal-audit gaps``, the report and the gap alerts date them), read from the daily
aggregate ``gaps`` (migration 0029, ``warehouse.gap_reads``: every day, dirty days computed
live), so these panels grow with the sightings, not the store."""

NEW_GAPS_SQL = f"""
SELECT count() AS new_gaps
FROM (
  SELECT policy_bundle, gap_id, min(event_time) AS first_seen
  {_SIGHTINGS.replace(chr(10), chr(10) + "  ")}
  GROUP BY policy_bundle, gap_id
)
WHERE $__timeFilter(first_seen)
{DAILY_SETTINGS}
"""

SIGHTINGS_SQL = f"""
SELECT $__timeInterval(event_time) AS time, count() AS sightings, uniqExact(gap_id) AS gaps
{_SIGHTINGS}
  AND $__timeFilter(event_time)
GROUP BY time
ORDER BY time
{DAILY_SETTINGS}
"""

OPEN_GAPS_SQL = f"""
SELECT policy_bundle, description, first_seen, last_seen, log_ids, batches,
       arrayStringConcat(example_log_ids, ', ') AS example_log_ids
FROM {gap_reads.summary(_GAPS)}
WHERE {var_filter("policy_bundle", "bundle")}
  AND $__timeFilter(last_seen)
ORDER BY log_ids DESC, last_seen DESC, policy_bundle, gap_id
LIMIT 100
{DAILY_SETTINGS}
"""

_ALERT_SCOPE = "\n  AND ".join(
    [
        var_filter("policy_bundle", "bundle", "'all', ''"),
        var_filter("model", "model", "'all', ''"),
        var_filter("product", "product", "'all', ''"),
    ]
)
"""Alerts of the selected scope, and alerts scoped to every value (``all``, or empty)."""

_OVERLAPS = """coalesce(window_start, created_at) <= $__toTime
  AND coalesce(window_end, created_at) >= $__fromTime"""
"""Alerts whose window overlaps the time range (a window-less alert: created in it), as
``refusal-audit report`` picks them: every window is in event time (drift windows, and
policy-gap cooldown periods counted from the gap's first flagged event)."""

ALERTS_SQL = f"""
SELECT created_at, kind, severity, policy_bundle, model, product, window_start, window_end,
       message
FROM alerts FINAL
WHERE {_OVERLAPS}
  AND {_ALERT_SCOPE}
ORDER BY created_at DESC, alert_id
LIMIT 200
"""


def _annotation_sql(kind_condition: str) -> str:
    return f"""
SELECT coalesce(window_start, created_at) AS time,
       coalesce(window_end, created_at) AS timeEnd,
       concat(kind, ' (', severity, '): ', message) AS text,
       kind AS tags
FROM alerts FINAL
WHERE {kind_condition}
  AND {_OVERLAPS}
  AND {_ALERT_SCOPE}
ORDER BY time
"""


DRIFT_ANNOTATION_SQL = _annotation_sql("kind != 'policy_gap'")
GAP_ANNOTATION_SQL = _annotation_sql("kind = 'policy_gap'")


def alert_annotations() -> list[Json]:
    """Drift alerts (regions over their window) and policy-gap alerts as annotations."""
    return [
        ch_annotation("Drift alerts", DRIFT_ANNOTATION_SQL, "orange"),
        ch_annotation("Policy-gap alerts", GAP_ANNOTATION_SQL, "purple"),
    ]


def panels() -> list[Json]:
    """Rows "Audit overview", "Category mix", "Policy gaps" and "Alerts"."""
    day = "1d"
    return [
        row("Audit overview"),
        make_panel(
            "stat",
            "Refusals audited",
            [ch_target(OVERVIEW_SQL)],
            interval=day,
            width=6,
            height=5,
            description="Current assessments with an event time in range." + DAY_RESOLUTION,
        ),
        make_panel(
            "stat",
            "Estimated false-positive rate (Wilson 95%)",
            [ch_target(FP_RATE_SQL)],
            interval=day,
            unit="percentunit",
            width=6,
            height=5,
            description="Share estimated as over-refusals, with the Wilson (1927) score interval."
            + DAY_RESOLUTION,
        ),
        make_panel(
            "timeseries",
            "False-positive rate with its Wilson 95% band",
            [ch_target(FP_OVER_TIME_SQL, TIME_SERIES)],
            unit="percentunit",
            interval=day,
            width=12,
            height=5,
            overrides=band("wilson_low", "wilson_high"),
            description="Pooled over the selected models and products; the table below has "
            "each model and product." + DAY_RESOLUTION,
        ),
        make_panel(
            "table",
            "By model and product",
            [ch_target(BY_MODEL_PRODUCT_SQL)],
            interval=day,
            width=24,
            description="Current assessments per model and product." + DAY_RESOLUTION,
        ),
        row("Category mix"),
        make_panel(
            "timeseries",
            "Refusal categories over time (stacked)",
            [ch_target(CATEGORY_SQL, TIME_SERIES)],
            stacked=True,
            interval=day,
            width=24,
            description="Current assessments per refusal category." + DAY_RESOLUTION,
        ),
        row("Policy gaps"),
        make_panel(
            "stat",
            "New gaps",
            [ch_target(NEW_GAPS_SQL)],
            width=6,
            description="Gaps whose first flagged event falls in the time range (event time).",
        ),
        make_panel(
            "timeseries",
            "Gap sightings",
            [ch_target(SIGHTINGS_SQL, TIME_SERIES)],
            interval=day,
            width=18,
        ),
        make_panel(
            "table",
            "Open gaps with example log ids",
            [ch_target(OPEN_GAPS_SQL)],
            width=24,
            description=(
                "Every tracked gap is open; its last flagged event in range (event time), "
                "named after its most common member, as `refusal-audit gaps` lists it."
            ),
        ),
        row("Alerts"),
        make_panel(
            "table",
            "Drift and policy-gap alerts",
            [ch_target(ALERTS_SQL, TABLE)],
            width=24,
            description="Also shown as annotations on the time series.",
        ),
    ]
