"""Daily aggregates of ``current_assessments``, exact under "newest wins" (migration 0024).

A ``ReplacingMergeTree`` replaces a re-audited assessment and ``current_assessments`` drops
an assessment whose event was re-judged a non-refusal: counts kept by adding cannot follow
that, so a *day* is recomputed whole instead. Every insert into ``refusal_events`` or
``assessments`` marks its event days dirty (``dirty_days``: the migration's materialized
views, in the same insert; :func:`mark_days`, called by ``warehouse.store`` after the insert
returns). :func:`refresh` recomputes up to ``max_days`` dirty days of one month from
``current_assessments`` restricted to them, writes the rows under a new version
(server nanoseconds), records the version per day (``daily_versions``), clears the marks
it read (a mark written meanwhile has a newer version and stays) and deletes the day's
versions older than the previous one. Readers (:func:`source_sql`) read a clean day's rows
of its recorded version and compute the dirty days live, so no query returns a stale day.

The aggregates (shapes: the migration):

- ``counts``: per bundle, day, model, product, category: ``assessments``,
  ``estimated_false_positives``, ``flagged`` (requires_human_review), ``sampled``;
- ``clauses``: per bundle, day, model, product, cited clause: ``citations``,
  ``estimated_false_positives``;
- ``batches``: per bundle, day, model, product, batch id: ``assessments``;
- ``events``: stored events (``refusal_events``, every version's newest) per bundle, day,
  model, product: ``events``, ``refusals``, ``non_refusals`` (the pre-filter's decision);
- ``configurations`` (migration 0025): per bundle, day, model, product, bundle version,
  engine, engine model, prompt version: ``assessments``, ``first_audit``, ``last_audit``
  (min/max ``audited_at``, UTC);
- ``batch_scopes`` (migration 0025): per bundle, day, batch id: ``scopes`` (the sorted
  distinct (model, product) pairs), ``assessments``;
- ``disagreements`` (migration 0026): the same events per day, model, product: events
  with a platform classifier verdict (``classifier_verdicts``), those our detection also
  read (``compared``), ``disagreements`` and one count per direction
  (``schemas.events.DISAGREEMENT_DIRECTIONS``);
- ``agreements`` (migration 0028): the current verdicts (``current_verdicts``) whose event is
  stored, per their event's day and the verdict's bundle, model, product, engine and prompt
  version: ``compared`` and the agreement counts (``warehouse.review_counts``);
- ``reviews`` (migration 0028): the current assessments per bundle, day, model, product:
  ``queued`` (flagged or sampled), ``queued_reviewed`` and per stratum the reviewed
  assessments and the reviewers' false positives (``warehouse.review_counts``);
- ``gaps`` (migration 0029): the policy-gap sightings resolved, one row per sighting on its
  event's day (``stored``) and one on its ``seen_at`` day (``warehouse.gap_daily``).

Verdicts change the last two, and no view can see a verdict's event day: the verdict writer
(``warehouse.review.insert_verdicts``) marks its events' days after its insert
(:func:`mark_verdict_days`; call it after a manual ``INSERT INTO review_verdicts`` too).
Sightings change ``gaps`` on their ``seen_at`` days and their events' days: the sighting
writer (``warehouse.gaps.insert_sightings``) marks both (:func:`mark_sighting_days`; call it
after a manual ``INSERT INTO policy_gap_sightings`` too).

A day is the UTC day of ``event_time``. The live computation restricts both tables to the
dirty days: every version of an event and its assessments carry the event's time
(migration 0023's invariant, ``processors.auditing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from clickhouse_connect.driver.exceptions import ClickHouseError

from warehouse import day_holds, gap_daily
from warehouse.client import Client, WarehouseError, quote_identifier
from warehouse.partition_keys import LOCAL_FINAL
from warehouse.review_counts import (
    AGREEMENT_COUNTS,
    AGREEMENT_KEYS,
    REVIEW_COUNTS,
    judged_verdicts,
    voted_assessments,
)

__all__ = [
    "AGGREGATES",
    "READ_SETTINGS",
    "Aggregate",
    "clickhouse_day",
    "dirty_days",
    "dirty_params",
    "inline_sql",
    "mark_days",
    "mark_sighting_days",
    "mark_verdict_days",
    "marker",
    "refresh",
    "refresh_all",
    "source_sql",
    "with_source",
]

#: Settings of every read of the live part (and of the queries around it): FINAL inside
#: months (0023) and no primary-key analysis of the IN set (0022).
READ_SETTINGS: dict[str, int] = {**LOCAL_FINAL, "use_index_for_in_with_subqueries": 0}

#: Days recomputed per :func:`refresh` call at most (all of one month).
MAX_DAYS = 31

#: Log ids per lookup of :func:`mark_verdict_days` (a large import's ids would otherwise go
#: in one query, too long for a server's HTTP request limits).
VERDICT_ID_CHUNK = 10_000

# The time range of the dirty days (partition pruning), and every event time outside
# ClickHouse's Date range (1970-01-01 to 2149-06-06): toDate wraps those onto other days
# (1900-01-01 -> 2079-06-07), which is where the reference queries count them.
_IN_DIRTY_RANGE = """(event_time >= {dirty_from:DateTime64(3, 'UTC')}
           AND event_time < {dirty_to:DateTime64(3, 'UTC')}
           OR event_time < toDateTime64('1970-01-01 00:00:00', 3, 'UTC')
           OR event_time >= toDateTime64('2149-06-07 00:00:00', 3, 'UTC'))"""

# current_assessments restricted to {dirty:Array(Date)} (and the months around them, for
# partition pruning), for both tables: the view's rows of those days.
_CURRENT = """(
    SELECT * FROM {db:Identifier}.assessments FINAL
    WHERE has({dirty:Array(Date)}, toDate(event_time))
      AND __IN_DIRTY_RANGE__
      AND (log_id, policy_bundle) IN (
          SELECT log_id, policy_bundle FROM {db:Identifier}.refusal_events FINAL
          WHERE is_refusal AND has({dirty:Array(Date)}, toDate(event_time))
            AND __IN_DIRTY_RANGE__
      )
)""".replace("__IN_DIRTY_RANGE__", _IN_DIRTY_RANGE)


@dataclass(frozen=True)
class Aggregate:
    """One daily aggregate: its ``table``, ``keys`` (after ``day``), ``counts`` (column names)
    and the ``live`` SELECT that computes the same rows from ``_CURRENT`` (columns
    ``day, *keys, *counts``)."""

    table: str
    keys: tuple[str, ...]
    counts: tuple[str, ...]
    live: str

    @property
    def columns(self) -> tuple[str, ...]:
        """``day``, the keys and the counts: the rows :func:`source_sql` returns."""
        return ("day", *self.keys, *self.counts)


# refusal_events (FINAL) restricted to the dirty days, as _CURRENT
_EVENTS = """(
    SELECT * FROM {db:Identifier}.refusal_events FINAL
    WHERE has({dirty:Array(Date)}, toDate(event_time))
      AND __IN_DIRTY_RANGE__
)""".replace("__IN_DIRTY_RANGE__", _IN_DIRTY_RANGE)

AGGREGATES: dict[str, Aggregate] = {
    "events": Aggregate(
        "daily_event_counts",
        ("policy_bundle", "model", "product"),
        ("events", "refusals", "non_refusals"),
        f"""SELECT toDate(event_time) AS day, policy_bundle, model, product,
       count() AS events, countIf(is_refusal) AS refusals, countIf(NOT is_refusal) AS non_refusals
FROM {_EVENTS}
GROUP BY day, policy_bundle, model, product""",
    ),
    "counts": Aggregate(
        "daily_assessment_counts",
        ("policy_bundle", "model", "product", "category"),
        ("assessments", "estimated_false_positives", "flagged", "sampled"),
        f"""SELECT toDate(event_time) AS day, policy_bundle, model, product, category,
       count() AS assessments, countIf(is_estimated_false_positive) AS estimated_false_positives,
       countIf(requires_human_review) AS flagged, countIf(sampled_for_review) AS sampled
FROM {_CURRENT}
GROUP BY day, policy_bundle, model, product, category""",
    ),
    "clauses": Aggregate(
        "daily_clause_counts",
        ("policy_bundle", "model", "product", "clause"),
        ("citations", "estimated_false_positives"),
        f"""SELECT toDate(event_time) AS day, policy_bundle, model, product,
       assumeNotNull(policy_clause_cited) AS clause, count() AS citations,
       countIf(is_estimated_false_positive) AS estimated_false_positives
FROM {_CURRENT}
WHERE policy_clause_cited IS NOT NULL
GROUP BY day, policy_bundle, model, product, clause""",
    ),
    "batches": Aggregate(
        "daily_assessment_batches",
        ("policy_bundle", "model", "product", "batch_id"),
        ("assessments",),
        f"""SELECT toDate(event_time) AS day, policy_bundle, model, product, batch_id,
       count() AS assessments
FROM {_CURRENT}
GROUP BY day, policy_bundle, model, product, batch_id""",
    ),
    "configurations": Aggregate(
        "daily_audit_configurations",
        (
            "policy_bundle",
            "model",
            "product",
            "bundle_version",
            "engine",
            "engine_model",
            "prompt_version",
        ),
        ("assessments", "first_audit", "last_audit"),
        f"""SELECT toDate(event_time) AS day, policy_bundle, model, product, bundle_version,
       engine, engine_model, prompt_version,
       count() AS assessments, min(audited_at) AS first_audit, max(audited_at) AS last_audit
FROM {_CURRENT}
GROUP BY day, policy_bundle, model, product, bundle_version, engine, engine_model,
         prompt_version""",
    ),
    "batch_scopes": Aggregate(
        "daily_batch_scopes",
        ("policy_bundle", "batch_id"),
        ("scopes", "assessments"),
        f"""SELECT toDate(event_time) AS day, policy_bundle, batch_id,
       arraySort(groupUniqArray((model, product))) AS scopes, count() AS assessments
FROM {_CURRENT}
GROUP BY day, policy_bundle, batch_id""",
    ),
}

# Migration 0026 (issue 27, item 4: the refusal_disagreements query), in its own entries so
# that other migrations' aggregates merge beside it.
AGGREGATES |= {
    "disagreements": Aggregate(
        "daily_disagreement_counts",
        ("model", "product"),
        ("classifier_verdicts", "compared", "disagreements",
         "classifier_refusal_detector_not", "detector_refusal_classifier_not"),
        f"""SELECT toDate(event_time) AS day, model, product,
       countIf(classifier_is_refusal IS NOT NULL) AS classifier_verdicts,
       countIf(classifier_is_refusal IS NOT NULL AND detected_is_refusal IS NOT NULL)
           AS compared,
       countIf(refusal_disagreement != 'none') AS disagreements,
       countIf(refusal_disagreement = 'classifier_refusal_detector_not')
           AS classifier_refusal_detector_not,
       countIf(refusal_disagreement = 'detector_refusal_classifier_not')
           AS detector_refusal_classifier_not
FROM {_EVENTS}
GROUP BY day, model, product""",
    ),
}  # fmt: skip

# Migration 0028 (issue 27, item 4: the review queries and panels), in its own entries: the
# events, assessments and verdicts of the dirty days only. A verdict's day is its event's
# (the event's newest version, as review_agreement's join read it) for ``agreements``, and
# its assessment's for
# ``reviews`` (the same time: an assessment takes its event's). Verdict inserts mark their
# events' days (warehouse.review.insert_verdicts; mark_verdict_days after a manual insert).
# current_verdicts (migration 0012's view) restricted to the events of the dirty days:
# filtering on log_id commutes with its FINAL (a verdict id is derived from the judged
# assessment, so every version of a verdict names one log id) and with its LIMIT BY (whose
# groups are within one log id). Without it every dirty day read every verdict (1 M rows at
# 100 M assessments) on each read and recompute.
_VERDICTS = """(
    SELECT * FROM {db:Identifier}.review_verdicts FINAL
    WHERE log_id IN (SELECT log_id FROM __EVENTS__)
    ORDER BY submitted_at DESC, verdict_id DESC
    LIMIT 1 BY policy_bundle, log_id, assessment_audited_at, reviewer
)""".replace("__EVENTS__", _EVENTS)

AGGREGATES |= {
    "agreements": Aggregate(
        "daily_review_agreements",
        AGREEMENT_KEYS,
        ("compared", "fp_yes_yes", "fp_yes_no", "fp_no_yes", "fp_no_no", "category_agreed"),
        f"""SELECT toDate(event_time) AS day, toMonday(event_time) AS week,
       {", ".join(AGREEMENT_KEYS[1:])},
       {AGREEMENT_COUNTS}
FROM {judged_verdicts(_VERDICTS)} AS v
INNER JOIN (SELECT log_id, event_time FROM {_EVENTS}) AS e USING (log_id)
GROUP BY day, {", ".join(AGREEMENT_KEYS)}""",
    ),
    "reviews": Aggregate(
        "daily_review_counts",
        ("week", "policy_bundle", "model", "product"),
        ("assessments", "estimated_false_positives", "flagged", "queued", "queued_reviewed",
         "flagged_reviewed", "flagged_human_fp", "sample_reviewed", "sample_human_fp"),
        f"""SELECT toDate(event_time) AS day, toMonday(event_time) AS week, policy_bundle, model,
       product, {REVIEW_COUNTS}
FROM {voted_assessments(_CURRENT, _VERDICTS)}
GROUP BY day, week, policy_bundle, model, product""",
    ),
}  # fmt: skip

# Migration 0029 (issue 27, item 4: the policy-gap reads), the sightings resolved per day.
AGGREGATES |= {
    "gaps": Aggregate(
        "daily_gap_sightings", gap_daily.KEYS, gap_daily.COUNTS,
        gap_daily.LIVE.replace("__IN_DIRTY_RANGE__", _IN_DIRTY_RANGE),
    ),
}  # fmt: skip


def _event_days(client: Client, database: str, log_ids: Sequence[str]) -> set[date]:
    """The event days of the stored events of ``log_ids``, read by primary key
    (``refusal_events ORDER BY log_id``) in lookups of ``VERDICT_ID_CHUNK`` ids."""
    ids = sorted(set(log_ids))
    found: set[date] = set()
    for start in range(0, len(ids), VERDICT_ID_CHUNK):  # bounded query text per lookup
        rows = _query(
            client,
            "SELECT DISTINCT toDate(event_time) FROM {db:Identifier}.refusal_events "
            "PREWHERE log_id IN {ids:Array(String)}",
            {"db": database, "ids": ids[start : start + VERDICT_ID_CHUNK]},
        )
        found.update(r[0] for r in rows)
    return found


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def clickhouse_day(when: datetime) -> date:
    """The day ClickHouse's ``toDate`` gives for ``when`` (aware; a naive time is taken as
    UTC) stored as ``DateTime64(3, 'UTC')``: the UTC day inside the ``Date`` range
    (1970-01-01 to 2149-06-06), and outside it the day ``toDate`` wraps onto (whole seconds
    truncated toward zero, then the day number modulo 65,536: 1900-01-01 -> 2079-06-07,
    2299-01-01 -> 2119-07-28), which is where the aggregates' live SQL puts such a time.
    ``when.date()`` would be a day the client clamps to 1970-01-01 or 2149-06-06 instead,
    so a mark of it would miss the row's day."""
    utc = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    elapsed = utc - _EPOCH
    seconds = elapsed.days * 86400 + elapsed.seconds
    if seconds < 0 and elapsed.microseconds >= 1000:  # milliseconds stored: toward zero
        seconds += 1
    return _EPOCH.date() + timedelta(days=(seconds // 86400) % 65536)


def mark_sighting_days(
    client: Client,
    database: str,
    log_ids: Sequence[str],
    seen_days: Sequence[date],
    holder: str | None = None,
) -> list[date]:
    """Mark dirty the days policy-gap sightings change in the ``gaps`` aggregate and return
    them: ``seen_days`` (the days of the sightings' ``seen_at``, :func:`clickhouse_day`)
    and the event days of the stored events of ``log_ids`` (read as
    :func:`mark_verdict_days` reads them). An
    event stored later marks its own day (0024's views); the ``seen_at`` day's row is then
    shadowed by the event day's (``warehouse.gap_daily``). With ``holder``, the days are
    held for it first (``warehouse.day_holds.hold_days``: a writer's mark before its
    insert). Raises ``WarehouseError``."""
    days = sorted(_event_days(client, database, log_ids) | set(seen_days))
    if holder is not None:
        day_holds.hold_days(client, database, days, holder)
    mark_days(client, database, days)
    return days


def mark_verdict_days(
    client: Client, database: str, log_ids: Sequence[str], holder: str | None = None
) -> list[date]:
    """Mark dirty the event days of the stored events of ``log_ids`` (the log ids of verdicts
    just inserted: the ``agreements`` and ``reviews`` aggregates of those days change) and
    return them; a log id without a stored event marks nothing (no aggregate counts its
    verdicts until the event is stored, whose insert marks the day). The events are read by
    primary key (``refusal_events ORDER BY log_id``). With ``holder``, the days are held for
    it first (``warehouse.day_holds.hold_days``: a writer's mark before its insert). Raises
    ``WarehouseError``."""
    days = sorted(_event_days(client, database, log_ids))
    if days:
        if holder is not None:
            day_holds.hold_days(client, database, days, holder)
        mark_days(client, database, days)
    return days


def dirty_params(days: Sequence[date]) -> dict[str, Any]:
    """Query parameters of the live part for ``days``: ``dirty`` and the half-open time range
    ``dirty_from``/``dirty_to`` (UTC) around them (empty ``days``: an empty range)."""
    if not days:
        empty = datetime(1970, 1, 1, tzinfo=UTC)
        return {"dirty": [], "dirty_from": empty, "dirty_to": empty}
    return {
        "dirty": sorted(days),
        "dirty_from": datetime.combine(min(days), time(), UTC),
        "dirty_to": datetime.combine(max(days) + timedelta(days=1), time(), UTC),
    }


# every Date ClickHouse holds: the days of an every-day source (marker(kind, every_day=True))
_EVERY_DAY = {"{since:Date}": "toDate('1970-01-01')", "{until:Date}": "toDate('2149-06-06')"}


def source_sql(kind: str, live: bool, every_day: bool = False) -> str:
    """A subquery ``( ... )`` of the aggregate ``kind`` (``AGGREGATES``) over the days
    ``{since:Date}`` to ``{until:Date}`` (``every_day``: over every day instead, for a query
    whose ``since``/``until`` are not event days): the recorded rows of the clean days, and,
    when ``live``, the days ``{dirty:Array(Date)}`` computed from the base tables (bind
    :func:`dirty_params`; without ``live`` bind ``dirty`` only, ``[]`` or the dirty days).
    Columns: ``Aggregate.columns``. Raises ``KeyError`` for an unknown kind."""
    if every_day:
        sql = source_sql(kind, live)
        for name, value in _EVERY_DAY.items():
            sql = sql.replace(name, value)
        return sql
    agg = AGGREGATES[kind]
    columns = ", ".join(agg.columns)
    stored = f"""SELECT {columns} FROM {{db:Identifier}}.{agg.table}
    WHERE day BETWEEN {{since:Date}} AND {{until:Date}}
      AND NOT has({{dirty:Array(Date)}}, day)
      AND (day, version) IN (
          SELECT day, max(version) FROM {{db:Identifier}}.daily_versions
          WHERE day BETWEEN {{since:Date}} AND {{until:Date}}
          GROUP BY day
      )"""
    if not live:
        return f"({stored})"
    return f"""({stored}
    UNION ALL
    SELECT {columns} FROM ({agg.live})
    WHERE day BETWEEN {{since:Date}} AND {{until:Date}})"""


def dirty_days(client: Client, database: str, since: date, until: date) -> list[date]:
    """The dirty days from ``since`` to ``until`` (inclusive), sorted. Raises
    ``WarehouseError`` when the query fails."""
    rows = _query(
        client,
        "SELECT day FROM {db:Identifier}.dirty_days FINAL "
        "WHERE dirty AND day BETWEEN {since:Date} AND {until:Date} ORDER BY day",
        {"db": database, "since": since, "until": until},
    )
    return [r[0] for r in rows]


def mark_days(client: Client, database: str, days: Sequence[date]) -> None:
    """Mark ``days`` dirty (a new version each). Idempotent; empty ``days``: no-op. Raises
    ``WarehouseError`` when the insert fails."""
    if not days:
        return
    _command(
        client,
        f"INSERT INTO {quote_identifier(database)}.dirty_days (day, version, dirty) "
        "SELECT arrayJoin({days:Array(Date)}), toUnixTimestamp64Nano(now64(9)), true",
        {"days": sorted(set(days))},
    )


def refresh(
    client: Client, database: str, max_days: int = MAX_DAYS, settle_s: float = 0.0
) -> list[date]:
    """Recompute up to ``max_days`` dirty days, all of the month of the earliest dirty day,
    as the module docstring describes; return them (``[]``: nothing was dirty). With
    ``settle_s`` > 0 only days whose newest mark is at least that many seconds old (server
    clock) are taken: a day still being written is left to the readers, who compute it
    live, instead of being recomputed whole again and again as it grows. Safe to run
    beside writers and other refreshes: a day stays dirty until a recompute that started
    after its last write has recorded its version, and a day a writer holds
    (``warehouse.day_holds``: between its first mark and the end of its insert) is not
    taken. Raises ``WarehouseError``."""
    db = quote_identifier(database)
    settled = " AND version <= toUnixTimestamp64Nano(now64(9)) - {settle:UInt64}"
    marks = _query(
        client,
        "SELECT day, version FROM {db:Identifier}.dirty_days FINAL WHERE dirty"
        f"{settled if settle_s > 0 else ''}{day_holds.held_filter(client, database)} "
        "ORDER BY day LIMIT {limit:UInt32}",
        {"db": database, "limit": 1000, "settle": int(settle_s * 1e9)},
    )
    if not marks:
        return []
    first = marks[0][0]
    marks = [(d, v) for d, v in marks if (d.year, d.month) == (first.year, first.month)]
    marks = marks[: max(1, max_days)]
    days = [d for d, _ in marks]
    ((version,),) = _query(client, "SELECT toUnixTimestamp64Nano(now64(9))", {})
    params = {"db": database, **dirty_params(days)}
    for agg in AGGREGATES.values():
        _command(
            client,
            f"INSERT INTO {db}.{agg.table} (version, {', '.join(agg.columns)}) "
            f"SELECT {int(version)}, * FROM ({agg.live})",
            params,
            {"insert_deduplication_token": f"daily-{agg.table}-{version}"},
        )
    _command(
        client,
        f"INSERT INTO {db}.daily_versions (day, version) "
        "SELECT arrayJoin({days:Array(Date)}), {version:UInt64}",
        {"days": days, "version": version},
    )
    _command(
        client,
        f"INSERT INTO {db}.dirty_days (day, version, dirty) "
        "SELECT pair.1, pair.2, false FROM (SELECT arrayJoin({marks:Array(Tuple(Date, UInt64))}) "
        "AS pair)",
        {"marks": marks},
    )
    _drop_old_versions(client, database, days, int(version))
    return days


def _drop_old_versions(client: Client, database: str, days: list[date], version: int) -> None:
    """Delete each day's rows older than the newest version below ``version`` (the previous
    recompute's: a reader that read that version just before this one was recorded still
    finds its rows), once a day holds two such older versions (so every other recompute of
    a day deletes). The lightweight DELETE runs in the background (``lightweight_deletes_sync
    = 0``: a synchronous one took 2-3 s per table on chDB)."""
    for agg in AGGREGATES.values():
        keep = _query(
            client,
            f"SELECT day, arrayReverseSort(groupUniqArray(version)) AS v "
            f"FROM {{db:Identifier}}.{agg.table} WHERE has({{days:Array(Date)}}, day) "
            "AND version < {version:UInt64} GROUP BY day HAVING length(v) > 2",
            {"db": database, "days": days, "version": version},
        )
        if not keep:
            continue
        _command(
            client,
            f"DELETE FROM {quote_identifier(database)}.{agg.table} "
            "WHERE has({days:Array(Date)}, day) "
            "AND version < arrayElement({keep:Array(UInt64)}, indexOf({days:Array(Date)}, day))",
            {"days": [d for d, _ in keep], "keep": [int(v[0]) for _, v in keep]},
            {"lightweight_deletes_sync": 0},  # the mutation runs in the background
        )


def refresh_all(client: Client, database: str, max_days: int = MAX_DAYS) -> list[date]:
    """:func:`refresh` until no day is dirty; return every day recomputed (a day marked
    again meanwhile may appear twice). Raises ``WarehouseError``."""
    done: list[date] = []
    while days := refresh(client, database, max_days):
        done += days
    return done


def _query(client: Client, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    try:
        raw = client.query(sql, parameters=params, settings=READ_SETTINGS)
    except ClickHouseError as exc:
        raise WarehouseError(f"daily aggregate query failed: {exc}") from exc
    return [tuple(r) for r in raw.result_rows]


def _command(
    client: Client, sql: str, params: dict[str, Any], settings: dict[str, Any] | None = None
) -> None:
    try:
        client.command(sql, parameters=params, settings={**READ_SETTINGS, **(settings or {})})
    except ClickHouseError as exc:
        raise WarehouseError(f"daily aggregate update failed: {exc}") from exc


def with_source(
    client: Client, database: str, sql: str, since: date, until: date
) -> tuple[str, dict[str, Any]]:
    """``sql`` with each marker ``__daily_<kind>__`` (``AGGREGATES``) replaced by
    :func:`source_sql` of that kind, live only when a day from ``since`` to ``until`` is
    dirty, and the parameters the sources bind (:func:`dirty_params`). An every-day marker
    (``marker(kind, every_day=True)``) reads every day, and the dirty days of every day are
    then computed live. Raises ``WarehouseError`` when the dirty days cannot be read."""
    found = [(k, every) for k in AGGREGATES for every in (False, True) if marker(k, every) in sql]
    if not found:
        return sql, {}
    if any(every for _, every in found):
        since, until = date(1970, 1, 1), date(2149, 6, 6)
    dirty = dirty_days(client, database, since, until)
    for kind, every in found:
        sql = sql.replace(marker(kind, every), source_sql(kind, bool(dirty), every))
    return sql, dirty_params(dirty)


def marker(kind: str, every_day: bool = False) -> str:
    """The text a query holds where the aggregate ``kind`` is read (:func:`with_source`):
    over the query's days ``since`` to ``until``, or with ``every_day`` over every day."""
    return f"__daily_{kind}_every_day__" if every_day else f"__daily_{kind}__"


# the dirty days and their time range as scalar subqueries: inline_sql's sources
_INLINE_DIRTY = {
    "{dirty:Array(Date)}": "(SELECT groupArray(day) FROM {db:Identifier}.dirty_days FINAL "
    "WHERE dirty)",
    "{dirty_from:DateTime64(3, 'UTC')}": "(SELECT toDateTime64(min(day), 3, 'UTC') "
    "FROM {db:Identifier}.dirty_days FINAL WHERE dirty)",
    # + 1 day in DateTime64, not in Date: max(day) + 1 wraps 2149-06-06 (Date's last day) to
    # 1970-01-01, and the live part of that day then read none of its events
    "{dirty_to:DateTime64(3, 'UTC')}": "(SELECT toDateTime64(max(day), 3, 'UTC') "
    "+ toIntervalDay(1) FROM {db:Identifier}.dirty_days FINAL WHERE dirty)",
}


def inline_sql(sql: str) -> str:
    """``sql`` with each marker ``__daily_<kind>__`` replaced by a source that reads the dirty
    days itself (scalar subqueries of ``dirty_days``) instead of :func:`with_source`'s
    parameters: one read-only statement with the same rows, for ``refusal-audit sql`` and
    dashboards. It binds ``db``, ``since`` and ``until`` only."""
    for kind in AGGREGATES:
        for every in (False, True):
            source = source_sql(kind, True, every)
            for name, subquery in _INLINE_DIRTY.items():
                source = source.replace(name, subquery)
            sql = sql.replace(marker(kind, every), source)
    return sql
