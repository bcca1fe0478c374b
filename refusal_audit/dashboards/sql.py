"""SQL building blocks shared by the ClickHouse panels: the variable filters and the
Wilson (1927) score interval and Cohen's (1960) kappa as ClickHouse expressions.

Filters use the plugin's ``$__conditionalAll(condition, $var)`` macro: "All" (or nothing
selected) becomes ``1=1``, otherwise the condition with ``${var:singlequote}``, which
Grafana expands to ``'a','b'`` (each value quoted, ``'`` escaped as ``\\'``; grafana/scenes
``packages/scenes/src/variables/interpolation/formatRegistry.ts``). The macro is expanded by
the plugin's frontend before variables are replaced
(grafana/clickhouse-datasource ``src/data/CHDatasource.ts``, ``applyConditionalAll``, v4.20.0).
"""

from __future__ import annotations

from warehouse.daily import inline_sql, marker

Z95 = "1.959963984540054"
"""The 97.5% standard normal quantile (scipy ``norm.ppf(0.975)``), as
``processors.stats.wilson_interval`` uses through ``binomtest(...).proportion_ci``."""

MIN_COMPARED = 30
"""Compared items below which agreement and kappa are left empty
(``processors.agreement.DEFAULT_MIN_ITEMS``; a test keeps the two equal)."""


def var_filter(column: str, variable: str, extra: str = "") -> str:
    """``column`` restricted to the values of dashboard variable ``variable`` (multi-value,
    with "All"); ``extra`` adds literal values that always match (e.g. ``'all'``)."""
    values = f"${{{variable}:singlequote}}" + (f", {extra}" if extra else "")
    return f"$__conditionalAll({column} IN ({values}), ${variable})"


def scope(model: str = "model", product: str = "product", bundle: str = "policy_bundle") -> str:
    """The model, product and bundle filters joined with AND (a column given as "" is not
    filtered)."""
    parts = [
        var_filter(column, variable)
        for column, variable in ((model, "model"), (product, "product"), (bundle, "bundle"))
        if column
    ]
    return "\n  AND ".join(parts)


def wilson(successes: str, trials: str) -> tuple[str, str]:
    """(low, high) of the Wilson score interval, 95%, for ``successes`` out of ``trials``
    (SQL expressions; ``trials`` > 0). Closed form (Wilson 1927, JASA 22:209):
    ``(k + z²/2 ± z·sqrt(k(n-k)/n + z²/4)) / (n + z²)``, clipped to [0, 1]."""
    k, n, z = successes, trials, Z95
    center = f"({k} + {z} * {z} / 2)"
    half = f"{z} * sqrt({k} * ({n} - {k}) / {n} + {z} * {z} / 4)"
    denominator = f"({n} + {z} * {z})"
    low = f"greatest(0, ({center} - {half}) / {denominator})"
    high = f"least(1, ({center} + {half}) / {denominator})"
    return low, high


def kappa_2x2(yy: str, yn: str, ny: str, nn: str) -> str:
    """Cohen's kappa (Cohen 1960, Educ. Psychol. Meas. 20:37) of a 2x2 table of counts
    (first index: the model's label, second: the reviewers'): ``(p_o - p_e) / (1 - p_e)``
    with ``p_e`` from the margins; NULL when ``p_e`` = 1 (one label only: undefined, as in
    ``processors.agreement``) or below ``MIN_COMPARED`` items."""
    n = f"({yy} + {yn} + {ny} + {nn})"
    observed = f"(({yy} + {nn}) / {n})"
    expected = f"((({yy} + {yn}) * ({yy} + {ny}) + ({ny} + {nn}) * ({yn} + {nn})) / ({n} * {n}))"
    return (
        f"if({n} < {MIN_COMPARED} OR {expected} >= 1, NULL, "
        f"({observed} - {expected}) / (1 - {expected}))"
    )


DAILY_SETTINGS = "SETTINGS do_not_merge_across_partitions_select_final = 1"
"""The end of every query that reads ``daily_source``: FINAL within each month of
``refusal_events``/``assessments`` (migration 0023's ``LOCAL_FINAL``: every version of an
event carries its event time, so its rows share a partition). Without it the live part's
FINAL merges across every month even when no day is dirty (0.40 s instead of 0.03 s at 1 M
rows, benchmarks/trend_queries.py). The ``grafana_reader`` profile lets the reader change
it (deploy/clickhouse/initdb/10-grafana-reader.sh)."""


def daily_source(kind: str, every_day: bool = False) -> str:
    """The daily aggregate ``kind`` (``warehouse.daily.AGGREGATES``) as a subquery for a panel:
    ``warehouse.daily.inline_sql``'s one-statement source (clean days' recorded rows, dirty
    days computed live), its tables unqualified (the data source's default database), over
    the whole UTC days from ``$__fromTime`` to ``$__toTime`` (``every_day``: every day, for a
    variable). Columns: ``warehouse.daily.Aggregate.columns``."""
    source = inline_sql(marker(kind, every_day)).replace("{db:Identifier}.", "")
    return source.replace("{since:Date}", "toDate($__fromTime, 'UTC')").replace(
        "{until:Date}", "toDate($__toTime, 'UTC')"
    )
