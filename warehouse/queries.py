"""Named trend queries for analysts (``refusal-audit query NAME``) and guarded ad hoc SQL.

Every named query reads current rows only (``FINAL``), binds all values server-side
(``{name:Type}``), and takes the same optional filters: ``since``/``until`` (inclusive days,
UTC) and, where the data has them, ``model`` and ``product``. Rates come with Wilson 95%
intervals computed in Python (``processors.stats.wilson_interval``).

Days are the day of the audited *event* (``event_time``) for assessment- and event-based
queries, so a re-audit replaces figures instead of moving them; ``policy_gaps`` uses the
batch's audit day and ``dead_letters`` the day the failure was recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Any

from clickhouse_connect.driver.exceptions import ClickHouseError

from processors.gap_text import describe_gap_sql
from schemas.events import DISAGREEMENT_DIRECTIONS
from warehouse import daily
from warehouse.client import Client, WarehouseError, validate_identifier
from warehouse.daily import marker
from warehouse.disagreement_listing import COLUMNS, LISTED, LISTING_SQL, newest_disagreements
from warehouse.named import (
    MODEL_PRODUCT,
    MODEL_PRODUCT_ONLY,
    SCOPES_MATCH,
    NamedQuery,
    QueryResult,
    with_proportions,
)
from warehouse.partition_keys import LOCAL_FINAL
from warehouse.review_queries import REVIEW_QUERIES
from warehouse.sql_guard import SqlGuardError, checked_user_sql, clickhouse_reason

__all__ = [
    "NAMED_QUERIES",
    "NamedQuery",
    "QueryResult",
    "ReadOnlyViolation",
    "UnknownQueryError",
    "UnsupportedFilterError",
    "check_readonly",
    "listing_params",
    "run_named",
    "run_readonly",
]

_MIN_DATE = date(1970, 1, 1)
_MAX_DATE = date(2149, 6, 6)  # ClickHouse Date range
_READONLY_ERROR_CODE = 164  # READONLY
_WILSON = ("rate", "wilson_low", "wilson_high")  # with_proportions' columns


class UnknownQueryError(WarehouseError, KeyError):
    """No named query has this name; ``valid_names`` lists the ones that exist."""

    def __init__(self, name: str, valid_names: list[str]) -> None:
        self.name = name
        self.valid_names = valid_names
        super().__init__(f"unknown query {name!r}; valid names: {', '.join(valid_names)}")

    def __str__(self) -> str:
        return str(self.args[0])


class UnsupportedFilterError(WarehouseError, ValueError):
    """A filter (``model``/``product``) was given to a query whose data cannot honour it."""


class ReadOnlyViolation(WarehouseError):
    """Ad hoc SQL the guard refuses (``check_readonly``), or the server refused as a write."""


NAMED_QUERIES: dict[str, NamedQuery] = {
    q.name: q
    for q in (
        NamedQuery(
            name="false_positive_rate",
            description="Estimated over-refusal (false positive) rate per event day and model, "
            "with Wilson 95% interval.",
            sql=f"""
SELECT day, model,
       sum(assessments) AS audited,
       sum(estimated_false_positives) AS estimated_false_positives
FROM {marker("counts")}
WHERE {MODEL_PRODUCT_ONLY}
GROUP BY day, model
ORDER BY day, model
""",
            columns=(
                "day",
                "model",
                "audited",
                "estimated_false_positives",
                "rate",
                "wilson_low",
                "wilson_high",
            ),
            filters=MODEL_PRODUCT,
            postprocess=with_proportions(
                ("estimated_false_positives", "audited", "rate", "wilson_low", "wilson_high")
            ),
        ),
        NamedQuery(
            name="category_mix",
            description="Refusal categories per event day: assessments and share of the day.",
            sql=f"""
SELECT day, category, assessments,
       assessments / sum(assessments) OVER (PARTITION BY day) AS share
FROM (
    SELECT day, category, sum(assessments) AS assessments
    FROM {marker("counts")}
    WHERE {MODEL_PRODUCT_ONLY}
    GROUP BY day, category
)
ORDER BY day, assessments DESC, category
""",
            columns=("day", "category", "assessments", "share"),
            filters=MODEL_PRODUCT,
        ),
        NamedQuery(
            name="policy_gaps",
            description="Policy-gap flags per audit day: flags, batches with flags, batches "
            "audited, example log ids and distinct descriptions (up to 20 / 10, sorted; "
            "without the one batch's count older local-engine descriptions began with). Only "
            "batches that still hold a current assessment (matching model/product) count.",
            sql=f"""
SELECT toDate(audited_at) AS day,
       sum(length(policy_gap_flags)) AS flags,
       countIf(length(policy_gap_flags) > 0) AS batches_with_flags,
       count() AS batches_audited,
       arraySlice(arraySort(arrayDistinct(groupArrayArray(arrayFlatten(
           arrayMap(f -> tupleElement(f, 'example_log_ids'), policy_gap_flags))))), 1, 20)
           AS example_log_ids,
       arraySlice(arraySort(arrayDistinct(groupArrayArray(
           arrayMap(f -> {describe_gap_sql("tupleElement(f, 'description')")},
                    policy_gap_flags)))), 1, 10)
           AS descriptions
FROM {{db:Identifier}}.audit_batches FINAL
WHERE toDate(audited_at) BETWEEN {{since:Date}} AND {{until:Date}}
  AND batch_id IN (
      SELECT batch_id FROM {marker("batch_scopes", every_day=True)}
      WHERE {SCOPES_MATCH}
  )
GROUP BY day
ORDER BY day
""",
            columns=(
                "day",
                "flags",
                "batches_with_flags",
                "batches_audited",
                "example_log_ids",
                "descriptions",
            ),
            filters=MODEL_PRODUCT,
        ),
        NamedQuery(
            name="top_clauses",
            description="Most cited policy clauses: citations, share of the bundle's citations "
            "and how many of them were estimated false positives.",
            sql=f"""
SELECT policy_bundle, clause, citations,
       citations / sum(citations) OVER (PARTITION BY policy_bundle) AS share,
       estimated_false_positives
FROM (
    SELECT policy_bundle, clause,
           sum(citations) AS citations,
           sum(estimated_false_positives) AS estimated_false_positives
    FROM {marker("clauses")}
    WHERE {MODEL_PRODUCT_ONLY}
    GROUP BY policy_bundle, clause
)
ORDER BY citations DESC, policy_bundle, clause
""",
            columns=("policy_bundle", "clause", "citations", "share", "estimated_false_positives"),
            filters=MODEL_PRODUCT,
        ),
        NamedQuery(
            name="review_share",
            description="Per event day: share of assessments flagged for human review and "
            "share sampled for review, each with Wilson 95% interval.",
            sql=f"""
SELECT day,
       sum(assessments) AS assessed,
       sum(flagged) AS flagged,
       sum(sampled) AS sampled
FROM {marker("counts")}
WHERE {MODEL_PRODUCT_ONLY}
GROUP BY day
ORDER BY day
""",
            columns=(
                "day",
                "assessed",
                "flagged",
                "review_share",
                "review_low",
                "review_high",
                "sampled",
                "sampled_share",
                "sampled_low",
                "sampled_high",
            ),
            filters=MODEL_PRODUCT,
            postprocess=with_proportions(
                ("flagged", "assessed", "review_share", "review_low", "review_high"),
                ("sampled", "assessed", "sampled_share", "sampled_low", "sampled_high"),
            ),
        ),
        NamedQuery(
            name="prefilter",
            description="Stored events per event day: total, refusals and non-refusals "
            "(the refusal pre-filter's decision).",
            sql=f"""
SELECT day,
       sum(events) AS events,
       sum(refusals) AS refusals,
       sum(non_refusals) AS non_refusals
FROM {marker("events")}
WHERE {MODEL_PRODUCT_ONLY}
GROUP BY day
ORDER BY day
""",
            columns=("day", "events", "refusals", "non_refusals"),
            filters=MODEL_PRODUCT,
        ),
        NamedQuery(
            name="refusal_disagreements",
            description="Per event day and model: events carrying the platform classifier's "
            "refusal verdict, how many of them our own detection also read (compared; rows "
            "stored before it existed were not), and the disagreements by direction, with "
            "the disagreement rate of the compared events and its Wilson 95% interval.",
            sql=f"""
SELECT day, model,
       sum(classifier_verdicts) AS classifier_verdicts,
       sum(compared) AS compared,
       sum(disagreements) AS disagreements,
       sum(classifier_refusal_detector_not) AS classifier_refusal_detector_not,
       sum(detector_refusal_classifier_not) AS detector_refusal_classifier_not
FROM {marker("disagreements")}
WHERE {MODEL_PRODUCT_ONLY}
GROUP BY day, model
HAVING classifier_verdicts > 0
ORDER BY day, model
""",
            columns=(
                "day",
                "model",
                "classifier_verdicts",
                "compared",
                "disagreements",
                *_WILSON,
                *DISAGREEMENT_DIRECTIONS,
            ),
            filters=MODEL_PRODUCT,
            postprocess=with_proportions(("disagreements", "compared", *_WILSON)),
        ),
        NamedQuery(
            name="refusal_disagreement_events",
            description=f"The newest {LISTED} stored events whose platform classifier verdict "
            "and our own refusal detection differ (newest event first; --all: every one): "
            "direction, both verdicts, our detection's score and cues, the policy bundle, and "
            "the redacted request and response (first 300 characters each) to review.",
            sql=LISTING_SQL,
            columns=COLUMNS,
            filters=MODEL_PRODUCT,
            newest=lambda client, database, params: (
                newest_disagreements(client, database, params).rows
            ),
        ),
        NamedQuery(
            name="dead_letters",
            description="Dead letters by stage and reason code (day of recording), with the "
            "number of distinct sources.",
            sql="""
SELECT stage, reason_code, count() AS dead_letters, uniqExact(source) AS sources
FROM {db:Identifier}.dead_letters FINAL
WHERE toDate(created_at) BETWEEN {since:Date} AND {until:Date}
GROUP BY stage, reason_code
ORDER BY dead_letters DESC, stage, reason_code
""",
            columns=("stage", "reason_code", "dead_letters", "sources"),
        ),
        NamedQuery(
            name="cost",
            description="Engine usage per engine and model (day of audit): batches, audited "
            "events, tokens per 1,000 events and latency; the CLI adds the estimated cost "
            "from the price_table setting.",
            sql="""
SELECT engine, engine_model, batches, events, prompt_tokens, cached_tokens, completion_tokens,
       round(1000 * prompt_tokens / greatest(events, 1)) AS prompt_tokens_per_1k_events,
       round(1000 * completion_tokens / greatest(events, 1)) AS completion_tokens_per_1k_events,
       mean_latency_ms
FROM (
    SELECT engine, engine_model,
           count() AS batches,
           -- the array's sizes subcolumn: length(log_ids) read every id under FINAL (100 M
           -- rows: 4.1 s against 0.11, benchmarks/trend_queries.py)
           sum(log_ids.size0) AS events,
           sum(prompt_tokens) AS prompt_tokens,
           sum(cached_tokens) AS cached_tokens,
           sum(completion_tokens) AS completion_tokens,
           round(avg(latency_ms), 1) AS mean_latency_ms
    FROM {db:Identifier}.audit_batches FINAL
    WHERE toDate(audited_at) BETWEEN {since:Date} AND {until:Date}
    GROUP BY engine, engine_model
)
ORDER BY engine, engine_model
""",
            columns=(
                "engine",
                "engine_model",
                "batches",
                "events",
                "prompt_tokens",
                "cached_tokens",
                "completion_tokens",
                "prompt_tokens_per_1k_events",
                "completion_tokens_per_1k_events",
                "mean_latency_ms",
            ),
        ),
        *REVIEW_QUERIES,
    )
}


def with_costs(result: QueryResult, prices: Mapping[str, Any]) -> QueryResult:
    """Add ``estimated_cost_usd`` and ``cost_per_1k_events_usd`` to a ``cost`` query result.

    ``prices`` maps a model id to an object with ``input``, ``cached_input`` and ``output``
    prices in USD per million tokens; cached prompt tokens are billed at ``cached_input``,
    the rest of the prompt at ``input``. Models without a price get None.
    """
    rows: list[tuple[Any, ...]] = []
    cols = result.columns
    for row in result.rows:
        values = dict(zip(cols, row, strict=True))
        price = prices.get(str(values["engine_model"]))
        if price is None:
            rows.append((*row, None, None))
            continue
        uncached = values["prompt_tokens"] - values["cached_tokens"]
        cost = (
            uncached * price.input
            + values["cached_tokens"] * price.cached_input
            + values["completion_tokens"] * price.output
        ) / 1_000_000
        per_1k = 1000 * cost / values["events"] if values["events"] else None
        rows.append((*row, cost, per_1k))
    return QueryResult([*cols, "estimated_cost_usd", "cost_per_1k_events_usd"], rows)


def listing_params(
    database: str,
    *,
    since: date | None = None,
    until: date | None = None,
    model: str | None = None,
    product: str | None = None,
) -> dict[str, Any]:
    """The binds ``db``, ``since``, ``until``, ``model`` and ``product`` of a named query with
    the day/model/product filter, as :func:`run_named` binds them (None: unbounded / all), for
    ``warehouse.disagreement_listing.newest_disagreements``. Raises ``WarehouseError`` for an
    invalid database name."""
    validate_identifier(database)
    return {"db": database, "since": _clamp(since, _MIN_DATE), "until": _clamp(until, _MAX_DATE),
            "model": model or "", "product": product or ""}  # fmt: skip


def _clamp(day: date | None, default: date) -> date:
    if day is None:
        return default
    return min(max(day, _MIN_DATE), _MAX_DATE)


def run_named(
    client: Client,
    database: str,
    name: str,
    *,
    since: date | None = None,
    until: date | None = None,
    model: str | None = None,
    product: str | None = None,
    full: bool = False,
) -> QueryResult:
    """Run the named query ``name`` against ``database`` and return its result.

    ``since``/``until`` are inclusive days (None: unbounded); ``model``/``product`` restrict to
    one model / product (None: all). Shapes of each query: see ``NAMED_QUERIES[name]``. A
    listing with a ``newest`` reader returns its newest rows only unless ``full``
    (``refusal_disagreement_events``: the newest ``disagreement_listing.LISTED``).

    Raises ``UnknownQueryError`` (a ``KeyError``) listing the valid names,
    ``UnsupportedFilterError`` (a ``ValueError``) for a filter the query cannot apply, and
    ``WarehouseError`` when the query fails.
    """
    query = NAMED_QUERIES.get(name)
    if query is None:
        raise UnknownQueryError(name, sorted(NAMED_QUERIES))
    validate_identifier(database)
    given = {k for k, v in (("model", model), ("product", product)) if v is not None}
    unsupported = given - query.filters
    if unsupported:
        raise UnsupportedFilterError(
            f"query {name!r} cannot filter by {', '.join(sorted(unsupported))}"
        )
    params: dict[str, Any] = {
        "db": database,
        "since": _clamp(since, _MIN_DATE),
        "until": _clamp(until, _MAX_DATE),
    }
    if "model" in query.filters:
        params["model"] = model or ""
    if "product" in query.filters:
        params["product"] = product or ""
    if query.newest is not None and not full:
        return query.newest(client, database, params)
    try:
        sql, sources = daily.with_source(client, database, query.sql, params["since"],
                                         params["until"])  # fmt: skip
        settings = daily.READ_SETTINGS if sources else LOCAL_FINAL
        raw = client.query(sql, parameters=params | sources, settings=settings)
    except ClickHouseError as exc:
        raise WarehouseError(f"query {name!r} failed: {exc}") from exc
    if not raw.result_rows:
        # chDB returns no column names for an empty result; the declared ones are the same
        return QueryResult(list(query.columns), [])
    result = QueryResult(list(raw.column_names), [tuple(r) for r in raw.result_rows])
    if query.postprocess is not None:
        result = query.postprocess(result)
    if tuple(result.columns) != query.columns:
        raise WarehouseError(
            f"query {name!r} returned columns {result.columns}, declared {list(query.columns)}"
        )
    return result


def check_readonly(client: Client, sql: str) -> str:
    """Check ``sql`` with ClickHouse's own parser; return the text that should be sent.

    The guard (``warehouse.sql_guard.checked_user_sql``, rules in
    ``processors.sql_policy``): one statement, a SELECT (``WITH``, ``UNION``, subqueries,
    joins), ``SHOW TABLES``, ``DESCRIBE`` of a table or ``EXPLAIN`` of a SELECT, reading only
    the warehouse database's own tables and views (never ``reviewers``, ``system.*``, table
    functions but ``numbers``/``zeros``/``generate_series``, ``file()``, ``dictGet``...),
    without ``SETTINGS``, ``FORMAT`` or ``INTO OUTFILE``. The returned text is ClickHouse's
    canonical single-line form of the statement (comments dropped), so the server runs
    exactly what was checked.

    Raises ``ReadOnlyViolation`` with the reason otherwise, ``WarehouseError`` when the
    warehouse cannot be asked.
    """
    try:
        return checked_user_sql(client, sql)
    except SqlGuardError as exc:
        raise ReadOnlyViolation(str(exc)) from exc


def run_guarded(client: Client, statement: str) -> QueryResult:
    """Run ``statement`` with the ClickHouse setting ``readonly=1`` (the server-side guard).

    Only ever called with statements ``check_readonly`` accepted: on chDB, a *write* refused
    here can leave the client's session in readonly mode (the driver applies some settings
    with ``SET``, which cannot be undone once ``readonly=1``); reads leave it unchanged.

    Raises ``ReadOnlyViolation`` when the server refuses it as a write, ``WarehouseError``
    for any other failure; neither quotes data (``warehouse.sql_guard.clickhouse_reason``).
    """
    try:
        raw = client.query(statement, settings={"readonly": 1})
    except ClickHouseError as exc:
        if getattr(exc, "code", None) == _READONLY_ERROR_CODE:
            raise ReadOnlyViolation(
                f"the warehouse refused a write in readonly mode: {clickhouse_reason(exc)}"
            ) from exc
        raise WarehouseError(f"query failed: {clickhouse_reason(exc)}") from exc
    columns = list(raw.column_names)
    if not columns and not raw.result_rows:
        columns = _probe_columns(client, statement)
    return QueryResult(columns, [tuple(r) for r in raw.result_rows])


def _probe_columns(client: Client, statement: str) -> list[str]:
    """Column names of an empty SELECT/WITH result (chDB sends none); [] when unknown."""
    if not statement.startswith(("SELECT", "WITH")):
        return []
    try:
        probe = client.query(f"SELECT * FROM ({statement}) LIMIT 0", settings={"readonly": 1})
    except ClickHouseError:
        return []
    return list(probe.column_names)


def run_readonly(client: Client, sql: str) -> QueryResult:
    """Run ad hoc read-only SQL and return its result.

    Two guards: ``check_readonly`` (ClickHouse's parser and the allow-list of
    ``processors.sql_policy``) and the ClickHouse setting ``readonly=1`` on the query, which
    both chDB and a server enforce (writes, DDL, SET). Unqualified table names resolve in
    the client's database. On an embedded store served by its owner, the owner also refuses
    anything that reaches outside the store (``warehouse.remote``).

    Raises ``ReadOnlyViolation`` for anything the guard refuses, ``WarehouseError`` when the
    query fails (unknown column or table, ...); messages never quote data.
    """
    return run_guarded(client, check_readonly(client, sql))
