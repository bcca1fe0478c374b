"""The period queries behind ``refusal-audit report`` that the named queries do not cover.

Every function takes a client, the database and a ``ReportFilter``: inclusive event days
``since``/``until`` and optional ``model``/``product`` (``''`` = all), the same filter
contract as the named queries (``warehouse.named.DAY_MODEL_PRODUCT``). Every query reads
current rows only (``FINAL`` / ``current_assessments``). Raises ``WarehouseError`` when a
query fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from clickhouse_connect.driver.exceptions import ClickHouseError

from processors.gap_text import describe_gap_sql
from schemas.alerts import ALL, Alert
from warehouse import daily, gap_reads
from warehouse.client import Client, WarehouseError, validate_identifier
from warehouse.daily import marker
from warehouse.named import (
    MODEL_PRODUCT_ONLY,
    SCOPES_MATCH,
    QueryResult,
    with_proportions,
)
from warehouse.partition_keys import LOCAL_FINAL


@dataclass(frozen=True)
class ReportFilter:
    """The report's slice: inclusive event days and optional model/product (None = all)."""

    since: date
    until: date
    model: str | None = None
    product: str | None = None

    def params(self, database: str) -> dict[str, Any]:
        """Query parameters for ``DAY_MODEL_PRODUCT`` plus ``db``."""
        validate_identifier(database)
        return {
            "db": database,
            "since": self.since,
            "until": self.until,
            "model": self.model or "",
            "product": self.product or "",
        }


def _run(client: Client, sql: str, params: dict[str, Any]) -> QueryResult:
    """``sql`` with ``params``; a daily aggregate's marker (``warehouse.daily.marker``) reads
    the aggregate over ``since`` to ``until``."""
    try:
        settings = LOCAL_FINAL
        if "since" in params:
            sql, sources = daily.with_source(client, params["db"], sql, params["since"],
                                             params["until"])  # fmt: skip
            if sources:
                params, settings = params | sources, daily.READ_SETTINGS
        raw = client.query(sql, parameters=params, settings=settings)
    except ClickHouseError as exc:
        raise WarehouseError(f"report query failed: {exc}") from exc
    return QueryResult(list(raw.column_names), [tuple(r) for r in raw.result_rows])


def event_day_range(client: Client, database: str) -> tuple[date, date] | None:
    """First and last event day of the current assessments, or None when there are none."""
    validate_identifier(database)
    everything = {"since": date(1970, 1, 1), "until": date(2149, 6, 6)}  # ClickHouse's Dates
    rows = _run(
        client,
        f"SELECT min(day), max(day), sum(assessments) FROM {marker('counts')}",
        {"db": database, **everything},
    ).rows
    if not rows or not rows[0][2]:
        return None
    return rows[0][0], rows[0][1]


def stored_values(client: Client, database: str, column: str) -> list[str]:
    """The distinct values of ``column`` (``model`` or ``product``) among stored events,
    sorted. Raises ``ValueError`` for another column."""
    if column not in ("model", "product"):
        raise ValueError(f"column must be model or product, not {column!r}")
    validate_identifier(database)
    rows = _run(
        client,
        f"SELECT DISTINCT {column} FROM {{db:Identifier}}.refusal_events ORDER BY {column}",
        {"db": database},
    ).rows
    return [str(r[0]) for r in rows]


_EVENTS_SQL = f"""
SELECT sum(events) AS events, sum(refusals) AS refusals, sum(non_refusals) AS non_refusals
FROM {marker("events")}
WHERE {MODEL_PRODUCT_ONLY}
"""

_ASSESSED_SQL = f"""
SELECT sum(assessments) AS audited,
       sum(estimated_false_positives) AS estimated_false_positives,
       sum(flagged) AS flagged,
       sum(sampled) AS sampled,
       (SELECT uniqExact(batch_id) FROM {marker("batch_scopes")} WHERE {SCOPES_MATCH})
           AS batches,
       uniqExact(model) AS models,
       uniqExact(product) AS products
FROM {marker("counts")}
WHERE {MODEL_PRODUCT_ONLY}
"""


def period_counts(client: Client, database: str, slice_: ReportFilter) -> dict[str, int]:
    """Counts of the period: ``events``, ``refusals``, ``non_refusals`` (stored events by the
    pre-filter's decision) and, over current assessments, ``audited``,
    ``estimated_false_positives``, ``flagged``, ``sampled``, ``batches``, ``models``,
    ``products``."""
    params = slice_.params(database)
    out: dict[str, int] = {}
    for sql in (_EVENTS_SQL, _ASSESSED_SQL):
        result = _run(client, sql, params)
        out.update({k: int(v) for k, v in result.as_dicts()[0].items()})
    return out


def audit_configurations(client: Client, database: str, slice_: ReportFilter) -> QueryResult:
    """Which audits the period's current assessments come from: one row per policy bundle,
    bundle version, engine, engine model and prompt version, with assessments and the
    first/last audit time (UTC); most assessments first (ties: bundle, engine, bundle
    version, engine model, prompt version). Reads the daily aggregate ``configurations``
    (migration 0025, ``warehouse.daily``)."""
    return _run(
        client,
        f"""
SELECT policy_bundle, bundle_version, engine, engine_model, prompt_version,
       sum(assessments) AS assessments, min(first_audit) AS first_audit,
       max(last_audit) AS last_audit
FROM {marker("configurations")}
WHERE {MODEL_PRODUCT_ONLY}
GROUP BY policy_bundle, bundle_version, engine, engine_model, prompt_version
ORDER BY assessments DESC, policy_bundle, engine, bundle_version, engine_model, prompt_version
""",
        slice_.params(database),
    )


def false_positives_by_model(client: Client, database: str, slice_: ReportFilter) -> QueryResult:
    """Per model over the whole period: ``audited``, ``estimated_false_positives``, ``rate``,
    ``low``, ``high`` (Wilson 95%, ``warehouse.named.with_proportions``)."""
    result = _run(
        client,
        f"""
SELECT model, sum(assessments) AS audited,
       sum(estimated_false_positives) AS estimated_false_positives
FROM {marker("counts")}
WHERE {MODEL_PRODUCT_ONLY}
GROUP BY model
ORDER BY model
""",
        slice_.params(database),
    )
    # named columns also for an empty result (chDB gives none then)
    named = QueryResult(["model", "audited", "estimated_false_positives"], result.rows)
    return with_proportions(("estimated_false_positives", "audited", "rate", "low", "high"))(named)


def top_gap_flags(
    client: Client, database: str, slice_: ReportFilter, limit: int = 10
) -> QueryResult:
    """The period's policy gaps, most refusals first: the gaps ``refusal-audit gaps`` lists
    (``policy_gap_summary``: the same grouping, name and dates), counted over this period.

    Reads the tracked sightings (run ``refusal_audit.alerts.gaps.track_gaps`` first) from the
    daily aggregate ``gaps`` (migration 0029, ``warehouse.gap_reads``): a flagged log id
    counts when it has a current assessment of the period's days (matching model/product),
    so the query grows with the sightings, not the store (dirty days computed live).
    Columns: ``policy_bundle``, ``gap_id``, ``description`` (the gap's most common member
    description, as ``describe_gap`` shows it), ``refusals`` (distinct flagged log ids of
    the period), ``batches``, ``example_log_ids`` (up to 5, sorted), ``first_event`` (the
    gap's first event time, UTC, in any period: its ``first_seen``) and ``new_in_period``
    (that first event falls on or after ``since``: no earlier event was flagged in the gap).
    """
    params = slice_.params(database) | {"limit": limit}
    describe = describe_gap_sql("any(named.description)")
    every_day = marker("gaps", every_day=True)
    match = ("({model:String} = '' OR p.1 = {model:String}) "
             "AND ({product:String} = '' OR p.2 = {product:String})")  # fmt: skip
    return _run(
        client,
        f"""
SELECT policy_bundle, gap_id,
       {describe} AS description,
       uniqExact(log_id) AS refusals,
       uniqExact(batch_id) AS batches,
       arraySlice(arraySort(groupUniqArray(log_id)), 1, 5) AS example_log_ids,
       any(named.first_seen) AS first_event,
       toDate(first_event) >= {{since:Date}} AS new_in_period
FROM {gap_reads.dated(every_day)} AS dated
INNER JOIN (
    SELECT policy_bundle, gap_id, description, first_seen
    FROM {gap_reads.summary(every_day)}
) AS named USING (policy_bundle, gap_id)
WHERE log_id IN {gap_reads.assessed(marker("gaps"), match)}
GROUP BY policy_bundle, gap_id
ORDER BY refusals DESC, description, policy_bundle, gap_id
LIMIT {{limit:UInt32}}
""",
        params,
    )


def period_alerts(
    client: Client, database: str, slice_: ReportFilter, limit: int = 50
) -> list[Alert]:
    """Alerts whose window overlaps the period's days (a window-less alert: created on one
    of them), newest first, at most ``limit``. Every alert's window is in event time (drift
    windows, and policy-gap cooldown periods counted from the gap's first flagged event,
    ``refusal_audit.alerts.gaps``), the report's period's time. A model/product filter keeps the
    alerts of that model/product and those about all of them (``"all"``)."""
    params = slice_.params(database) | {"limit": limit, "all": ALL}
    result = _run(
        client,
        """
SELECT payload FROM {db:Identifier}.alerts FINAL
WHERE toDate(coalesce(window_start, created_at)) <= {until:Date}
  AND toDate(coalesce(window_end, created_at)) >= {since:Date}
  AND ({model:String} = '' OR model IN ({model:String}, {all:String}))
  AND ({product:String} = '' OR product IN ({product:String}, {all:String}))
ORDER BY coalesce(window_start, created_at) DESC, created_at DESC, alert_id
LIMIT {limit:UInt32}
""",
        params,
    )
    return [Alert.model_validate_json(row[0]) for row in result.rows]
