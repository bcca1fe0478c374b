"""Window aggregates for the drift detectors, read from the ``drift_assessments`` view.

``window_counts`` returns the audit counts per (window start, finest scope) from ClickHouse;
``evidence_query`` renders the SQL an alert quotes so anyone can reproduce its counts. The
evidence uses the parameterized views of migrations 0008-0009/0013 (window assignment with the
grace period for late events); ``window_counts`` reads the same rows of the windows asked for
from a bounded part of the store (``warehouse.drift_windows``, issue 27), so detectors and
analysts count the same rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime

from processors.drift_detection import WindowCounts
from schemas.alerts import ALL, Scope
from warehouse import drift_windows
from warehouse.client import Client

__all__ = ["evidence_query", "view_call", "window_counts"]

_EXAMPLES = 5


def view_call(
    database: str, window_seconds: int, grace_seconds: int, view: str = "drift_assessments"
) -> str:
    """``db.VIEW(window_seconds=W, grace_seconds=G)`` (``drift_assessments``, or
    ``drift_reviews`` for reviewed assessments); raises ``ValueError`` for a window under one
    second, a negative grace or another view."""
    if window_seconds < 1 or grace_seconds < 0:
        raise ValueError(f"window_seconds={window_seconds} must be >= 1, grace >= 0")
    if view not in ("drift_assessments", "drift_reviews"):
        raise ValueError(f"unknown drift view {view!r}")
    return (
        f"`{database}`.{view}(window_seconds={int(window_seconds)}, "
        f"grace_seconds={int(grace_seconds)})"
    )


def window_counts(
    client: Client,
    database: str,
    *,
    window_seconds: int,
    grace_seconds: int,
    start: datetime,
    end: datetime,
) -> dict[datetime, dict[Scope, WindowCounts]]:
    """Counts per window start (UTC) and finest scope for windows starting in [start, end).

    Raises ``clickhouse_connect`` errors as they come (callers decide on retries).
    """
    sql = f"""
        SELECT window_start, policy_bundle, model, product, category,
               count() AS refusals,
               countIf(is_estimated_false_positive) AS false_positives,
               countIf(requires_human_review) AS review_flags,
               countIf(policy_gap) AS policy_gaps,
               countIf(late) AS late,
               arraySort(groupArray({_EXAMPLES})(log_id)) AS examples,
               arraySort(groupArrayIf({_EXAMPLES})(log_id, is_estimated_false_positive)) AS fp_ex,
               arraySort(groupArrayIf({_EXAMPLES})(log_id, requires_human_review)) AS review_ex,
               arraySort(groupArrayIf({_EXAMPLES})(log_id, policy_gap)) AS gap_ex
        FROM {drift_windows.rows_sql(window_seconds, grace_seconds)}
        GROUP BY window_start, policy_bundle, model, product, category
        ORDER BY window_start, policy_bundle, model, product, category
    """
    bound = drift_windows.params(database, window_seconds, start, end)
    result = client.query(sql, parameters=bound, settings=drift_windows.READ_SETTINGS)
    out: dict[datetime, dict[Scope, WindowCounts]] = defaultdict(dict)
    for row in result.result_rows:
        ws, bundle, model, product, category, n, fp, review, gap, late = row[:10]
        ex, fp_ex, review_ex, gap_ex = row[10:]
        ws = ws.replace(tzinfo=UTC) if ws.tzinfo is None else ws.astimezone(UTC)
        scope = Scope(policy_bundle=bundle, model=model, product=product)
        part = WindowCounts(
            refusals=n,
            false_positives=fp,
            review_flags=review,
            policy_gaps=gap,
            late=late,
            categories={category: n},
            examples={
                category: tuple(ex),
                "false_positives": tuple(fp_ex),
                "review_flags": tuple(review_ex),
                "policy_gaps": tuple(gap_ex),
            },
        )
        window = out[ws]
        window[scope] = window[scope] + part if scope in window else part
    reviews = f"""
        SELECT window_start, policy_bundle, model, product,
               count() AS reviewed, countIf(disagreed) AS disagreements,
               arraySort(groupArrayIf({_EXAMPLES})(log_id, disagreed)) AS disagree_ex
        FROM {drift_windows.reviews_sql(window_seconds, grace_seconds)}
        GROUP BY window_start, policy_bundle, model, product
    """
    for ws, bundle, model, product, reviewed, disagreements, disagree_ex in client.query(
        reviews, parameters=bound, settings=drift_windows.READ_SETTINGS
    ).result_rows:
        ws = ws.replace(tzinfo=UTC) if ws.tzinfo is None else ws.astimezone(UTC)
        scope = Scope(policy_bundle=bundle, model=model, product=product)
        part = WindowCounts(
            reviewed=reviewed,
            review_disagreements=disagreements,
            examples={"review_disagreements": tuple(disagree_ex)},
        )
        window = out[ws]
        window[scope] = window[scope] + part if scope in window else part
    return dict(out)


_MEASURES: Mapping[str, str] = {
    "category_mix_drift": "category, count() AS refusals",
    "false_positive_rate_shift": (
        "count() AS refusals, countIf(is_estimated_false_positive) AS false_positives"
    ),
    "policy_gap_rate_shift": "count() AS refusals, countIf(policy_gap) AS policy_gaps",
    "review_rate_shift": "count() AS refusals, countIf(requires_human_review) AS review_flags",
    "volume_anomaly": "count() AS refusals, uniqExact(window_start) AS windows_with_refusals",
    "new_category": "category, count() AS refusals",
    "classification_drift": "count() AS reviewed, countIf(disagreed) AS review_disagreements",
}
_VIEWS: Mapping[str, str] = {"classification_drift": "drift_reviews"}


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _ts(value: datetime) -> str:
    return f"toDateTime64({_quote(value.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S'))}, 3, 'UTC')"


def evidence_query(
    kind: str,
    scope: Scope,
    database: str,
    *,
    window_seconds: int,
    grace_seconds: int,
    window: tuple[datetime, datetime],
    baseline: tuple[datetime, datetime],
) -> str:
    """The read-only SQL that reproduces a drift alert's counts (one row per period).

    ``period`` is ``'window'`` or ``'baseline'``; runnable with ``refusal-audit sql``.
    Raises ``KeyError`` for an unknown ``kind``.
    """
    measures = _MEASURES[kind]
    filters = [
        f"{column} = {_quote(value)}"
        for column, value in (
            ("policy_bundle", scope.policy_bundle),
            ("model", scope.model),
            ("product", scope.product),
        )
        if value != ALL
    ]
    in_window = f"window_start >= {_ts(window[0])} AND window_start < {_ts(window[1])}"
    in_base = f"window_start >= {_ts(baseline[0])} AND window_start < {_ts(baseline[1])}"
    where = " AND ".join([*filters, f"(({in_window}) OR ({in_base}))"])
    group = "period, category" if measures.startswith("category") else "period"
    view = view_call(database, window_seconds, grace_seconds, _VIEWS.get(kind, "drift_assessments"))
    return (
        f"SELECT if({in_window}, 'window', 'baseline') AS period, {measures} "
        f"FROM {view} "
        f"WHERE {where} GROUP BY {group} ORDER BY {group}"
    )
