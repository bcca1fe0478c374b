"""The shapes of the named trend queries (``warehouse.queries``, ``warehouse.review_queries``):
``QueryResult``, ``NamedQuery``, the common day/model/product filter and the Wilson-interval
post-processing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from processors.stats import wilson_interval


@dataclass(frozen=True)
class QueryResult:
    """A query's result: column names and rows (tuples in column order)."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def as_dicts(self) -> list[dict[str, Any]]:
        """The rows as ``{column: value}`` dicts."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


@dataclass(frozen=True)
class NamedQuery:
    """A named trend query.

    ``sql`` binds ``{db:Identifier}``, ``{since:Date}``, ``{until:Date}`` and, for each name in
    ``filters``, ``{model:String}`` / ``{product:String}`` (``''`` meaning "all").
    ``postprocess`` (optional) turns the SQL result into the final one. ``columns`` are the
    final result's column names (also returned for an empty result). ``newest`` (optional,
    a listing): ``newest(client, database, params)`` returns the first rows of ``sql``'s
    result, read without reading all of it (``params``: the binds above); ``run_named``
    runs it unless asked for the full listing.
    """

    name: str
    description: str
    sql: str
    columns: tuple[str, ...]
    filters: frozenset[str] = field(default_factory=frozenset)
    postprocess: Callable[[QueryResult], QueryResult] | None = None
    newest: Callable[[Any, str, dict[str, Any]], QueryResult] | None = None


def with_proportions(
    *specs: tuple[str, str, str, str, str],
) -> Callable[[QueryResult], QueryResult]:
    """Post-processing that adds a rate and its Wilson 95% interval per spec.

    Each spec is ``(successes, trials, rate, low, high)`` column names; the three new columns
    are inserted right after the ``successes`` column.
    """

    def post(result: QueryResult) -> QueryResult:
        columns = list(result.columns)
        for successes, _trials, rate, low, high in specs:
            at = columns.index(successes) + 1
            columns[at:at] = [rate, low, high]
        rows: list[tuple[Any, ...]] = []
        for row in result.rows:
            values = dict(zip(result.columns, row, strict=True))
            out: list[Any] = []
            for name in result.columns:
                out.append(values[name])
                for successes, trials, _rate, _low, _high in specs:
                    if name == successes:
                        k, n = int(values[successes]), int(values[trials])
                        lo, hi = wilson_interval(k, n)
                        out.extend([k / n if n else 0.0, lo, hi])
            rows.append(tuple(out))
        return QueryResult(columns, rows)

    return post


DAY_MODEL_PRODUCT = """
    toDate(event_time) BETWEEN {since:Date} AND {until:Date}
    AND ({model:String} = '' OR model = {model:String})
    AND ({product:String} = '' OR product = {product:String})
"""

MODEL_PRODUCT_ONLY = """
    ({model:String} = '' OR model = {model:String})
    AND ({product:String} = '' OR product = {product:String})
"""
"""The model/product filter alone: for the daily aggregates (``warehouse.daily``), whose
sources already hold the days ``since`` to ``until`` only."""

SCOPES_MATCH = """(
    {model:String} = '' AND {product:String} = ''
    OR arrayExists(s -> ({model:String} = '' OR s.1 = {model:String})
                        AND ({product:String} = '' OR s.2 = {product:String}), scopes)
)"""
"""The model/product filter on a ``batch_scopes`` row (``warehouse.daily``, migration 0025):
the batch holds a current assessment of that model and product on that day (one pair of
``scopes`` matches both). Without a filter the array is not evaluated."""

MODEL_PRODUCT = frozenset({"model", "product"})
