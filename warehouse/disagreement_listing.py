"""The newest refusal disagreements, read from the newest days that hold them (issue 27,
item 4; docs/warehouse.md "Migration 0029").

The full listing (``refusal-audit query refusal_disagreement_events --all``,
:data:`LISTING_SQL`) reads every stored event under ``FINAL``: 25.8 s for its 1.33 M rows
on a 100 M-row store. Its users show the newest few hundred and count the rest, so
:func:`newest_disagreements` returns the same first ``limit`` rows and the same count
without that read:

1. the count per event day comes from the ``disagreements`` daily aggregate (migration
   0026, ``warehouse.daily``: clean days from their recorded version, dirty days live), the
   same events (``refusal_events`` FINAL) per ``toDate(event_time)``, model and product;
2. walking the days newest first, the first day ``D`` by which ``limit`` rows are reached
   (or the oldest day holding one) bounds the read to ``event_time >= D`` (UTC midnight):
   every row outside that bound is older than every row inside, so the newest ``limit`` rows
   inside are the newest ``limit`` rows of the full listing (ties of equal event time lie on
   the same side);
3. the newest ``k`` stored versions inside the bound that disagree (no ``FINAL``: a scan of
   the newest partitions' event times), ``k = limit`` at first: from the ``k``-th's event
   time ``T`` (ties included) on, every row of the full listing *is* one of those versions
   (its newest, which disagrees inside the bound), so
4. ``FINAL`` restricted to their log ids by a ``PREWHERE`` on the sort key (applied before
   ``FINAL``, keeping or dropping every version of a key together, as migration 0027),
   rows from ``T`` on, ordered, limited to ``limit``: when ``limit`` rows survive, they are
   the newest; otherwise ``k`` grows 4 x (all candidates read: ``T`` is the bound).

Steps 3 and 4 filter on ``event_time``, which ClickHouse also uses to skip whole parts
before ``FINAL`` (the partition key's min/max): exact because every version of an event has
the same event time (migration 0023's invariant, ``warehouse.partition_keys``), as the daily
aggregates' live parts are.

When step 4 finds fewer rows than the aggregate counts inside the bound (an event time
outside ClickHouse's ``Date`` range, which ``toDate`` wraps onto another day), the read
falls back to the whole filtered listing, limited: the result is never wrong, only slower.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any

from clickhouse_connect.driver.exceptions import ClickHouseError

from schemas.events import DISAGREEMENT_DIRECTIONS
from warehouse import daily
from warehouse.client import Client, WarehouseError
from warehouse.named import DAY_MODEL_PRODUCT, MODEL_PRODUCT_ONLY, QueryResult
from warehouse.partition_keys import LOCAL_FINAL

__all__ = ["COLUMNS", "LISTED", "LISTING_SQL", "Listing", "newest_disagreements"]

#: Rows the named query returns without ``full`` (the review page's ``MAX_LISTED``).
LISTED = 500

COLUMNS = (
    "log_id",
    "event_time",
    "model",
    "product",
    "policy_bundle",
    "direction",
    "classifier_is_refusal",
    "detected_is_refusal",
    "detected_refusal_score",
    "refusal_cues",
    "request",
    "response",
)

# the full listing's rows: binds db, since, until, model and product
_LISTED = f"refusal_disagreement != 'none' AND {DAY_MODEL_PRODUCT}"
# ... of one direction ('' = both)
_WHERE = f"""{_LISTED}
  AND ({{direction:String}} = '' OR refusal_disagreement = {{direction:String}})"""

_SELECT = """SELECT log_id, event_time, model, product, policy_bundle,
       refusal_disagreement AS direction,
       classifier_is_refusal, detected_is_refusal, detected_refusal_score, refusal_cues,
       substringUTF8(request, 1, 300) AS request, substringUTF8(response, 1, 300) AS response
FROM {db:Identifier}.refusal_events FINAL"""

#: Every disagreement of the filters, newest event first (the full listing).
LISTING_SQL = f"""
{_SELECT}
WHERE {_LISTED}
ORDER BY event_time DESC, log_id
"""

_BOUND = "event_time >= {bound:DateTime64(3, 'UTC')}"

# step 3: the newest `k` stored versions inside the bound that disagree (no FINAL)
_CANDIDATES = f"""
SELECT log_id, event_time FROM {{db:Identifier}}.refusal_events
WHERE {_BOUND} AND {_WHERE}
ORDER BY event_time DESC
LIMIT {{k:UInt32}} WITH TIES
"""

# step 4: the newest `limit` rows of those log ids from `newest_from` on (FINAL)
_NEWEST = f"""
{_SELECT}
PREWHERE log_id IN {{ids:Array(String)}}
WHERE event_time >= {{newest_from:DateTime64(3, 'UTC')}} AND {_BOUND} AND {_WHERE}
ORDER BY event_time DESC, log_id
LIMIT {{limit:UInt32}}
"""

_FALLBACK = f"""
{_SELECT}
WHERE {_WHERE}
ORDER BY event_time DESC, log_id
LIMIT {{limit:UInt32}}
"""

# the count per event day of one direction ('' = both), newest day first
_PER_DAY = f"""
SELECT day, sum(if({{direction:String}} = '', disagreements,
                   if({{direction:String}} = 'classifier_refusal_detector_not',
                      classifier_refusal_detector_not, detector_refusal_classifier_not))) AS n
FROM {daily.marker("disagreements")}
WHERE {MODEL_PRODUCT_ONLY}
GROUP BY day
HAVING n > 0
ORDER BY day DESC
"""

_SETTINGS = {**LOCAL_FINAL, "use_index_for_in_with_subqueries": 1}


@dataclass(frozen=True)
class Listing:
    """The newest disagreements (``rows``: :data:`COLUMNS`, newest event first, at most the
    ``limit`` asked for) and ``total``, how many the full listing holds."""

    rows: QueryResult
    total: int


def newest_disagreements(
    client: Client,
    database: str,
    params: dict[str, Any],
    limit: int = LISTED,
    direction: str = "",
) -> Listing:
    """The first ``limit`` rows of the full listing (:data:`LISTING_SQL`) and its row count,
    read as the module docstring describes. ``params`` binds ``db``, ``since``, ``until``
    (inclusive days), ``model`` and ``product`` (``''``: all), as ``run_named`` does;
    ``direction``: one of ``schemas.events.DISAGREEMENT_DIRECTIONS`` or ``''`` for both.
    Raises ``ValueError`` for another direction or a negative ``limit``, ``WarehouseError``
    when a query fails."""
    if direction and direction not in DISAGREEMENT_DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}")
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    params = {**params, "direction": direction, "limit": limit}
    try:
        sql, sources = daily.with_source(client, database, _PER_DAY, params["since"],
                                         params["until"])  # fmt: skip
        per_day = client.query(sql, parameters=params | sources, settings=daily.READ_SETTINGS)
        counts: list[tuple[date, int]] = [(r[0], int(r[1])) for r in per_day.result_rows]
        total = sum(n for _, n in counts)
        if limit == 0 or total == 0:
            return Listing(QueryResult(list(COLUMNS), []), total)
        bound, inside = _bound(counts, limit)
        params["bound"] = datetime.combine(bound, time(), UTC)
        rows = _newest(client, params, limit)
        if len(rows) < min(limit, inside):  # an event time toDate wraps: read it whole
            return Listing(_result(client, _FALLBACK, params), total)
        return Listing(QueryResult(list(COLUMNS), rows), total)
    except ClickHouseError as exc:
        raise WarehouseError(f"the disagreement listing failed: {exc}") from exc


def _newest(client: Client, params: dict[str, Any], limit: int) -> list[tuple[Any, ...]]:
    """Steps 3 and 4: the newest ``k`` candidate versions (``k`` = ``limit``, then 4 x as long
    as needed) from time ``T`` (the ``k``-th's, ties included) on; every row of the listing
    from ``T`` on is one of them, so once ``limit`` rows from ``T`` on survive FINAL they are
    the newest. All candidates read (fewer than ``k``): ``T`` is the bound."""
    k = max(limit, 1)
    while True:
        found = _rows(client, _CANDIDATES, params | {"k": k})
        every = len(found) < k
        newest_from = params["bound"] if every or not found else found[-1][1]
        ids = sorted({r[0] for r in found})
        rows = _rows(client, _NEWEST, params | {"ids": ids, "newest_from": newest_from})
        if len(rows) >= limit or every:
            return rows
        k *= 4


def _bound(counts: list[tuple[date, int]], limit: int) -> tuple[date, int]:
    """The oldest day needed (``counts`` newest first) and the rows counted from it on."""
    inside = 0
    for day, n in counts:
        inside += n
        if inside >= limit:
            return day, inside
    return counts[-1][0], inside


def _rows(client: Client, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in client.query(sql, parameters=params, settings=_SETTINGS).result_rows]


def _result(client: Client, sql: str, params: dict[str, Any]) -> QueryResult:
    return QueryResult(list(COLUMNS), _rows(client, sql, params))
