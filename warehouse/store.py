"""The warehouse's write side and the few reads the pipeline, CLI and tests need.

The tables' columns and row builders are in ``warehouse.rows`` (``to_utc`` and
``dedup_token`` are re-exported here for their many importers).

Writes are idempotent twice over: every insert carries an ``insert_deduplication_token``
derived from a hash of its rows (an identical retry or re-delivery is dropped at insert time),
and every table is a ``ReplacingMergeTree`` keyed on the natural id, read with ``FINAL`` (a
re-delivery with other provenance, e.g. a later ``ingested_at``, replaces the row).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from clickhouse_connect.driver.exceptions import ClickHouseError
from pydantic import SecretStr
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from schemas import BatchRecord, DeadLetter, StoredAssessment, StoredEvent
from schemas.events import StoredIdentity
from warehouse import daily, day_holds, key_sets
from warehouse.client import Client, WarehouseError, validate_identifier
from warehouse.connect import connect
from warehouse.retryable import transient_cause
from warehouse.rows import (
    ALERT_COLUMNS,
    TABLE_COLUMNS,
    alert_row,
    assessment_row,
    batch_row,
    dead_letter_row,
    dedup_token,
    event_row,
    to_utc,
)
from warehouse.stored_reads import StoredReads

if TYPE_CHECKING:  # pyarrow loads with the first columnar insert (warehouse.columnar):
    import pyarrow as pa  # a process that only reads, or a topics worker, never loads it

__all__ = [
    "ALERT_COLUMNS",
    "Warehouse",
    "WarehouseSettings",
    "dedup_token",
    "to_utc",
]

_R = TypeVar("_R")

# tables whose rows change current_assessments (warehouse.daily)
_DAILY_SOURCES = frozenset({"refusal_events", "assessments"})

logger = logging.getLogger(__name__)

# Settings sent with every insert.
#
# max_partitions_per_insert_block=0 (unlimited; default 100): refusal_events and
# assessments are PARTITION BY toYYYYMM(event_time), so one flush of valid events whose
# event times span more than 100 months (a backfill, a replay of old logs: event times
# range over 1900..2299) would otherwise fail with code 252 on every attempt and, in the
# worker, crash-loop on the same window. We lift the limit rather than split inserts by
# partition key: the parts created are the same either way (one per partition touched),
# their number is bounded by the rows of one flush (``AuditPipeline.flush_every``, a worker
# window), a flush stays one insert per table with one content-derived dedup token, and the
# code does not have to mirror each table's partition expression. It is an ordinary
# per-query setting, accepted per insert by chDB and by a ClickHouse server over HTTP
# (clickhouse-connect sends it as a query parameter; a server profile that makes it
# read-only or constrains it fails the insert with a clear, non-transient error).
_INSERT_SETTINGS: Mapping[str, Any] = {"max_partitions_per_insert_block": 0}


# per log id: the first fingerprinted copy's fingerprint and whether the newest copy is a
# refusal (the primary key is log_id)
FIRST_FINGERPRINTS = (
    "SELECT log_id, argMinIf(content_fingerprint, ingested_at, content_fingerprint != ''), "
    "argMax(is_refusal, ingested_at) FROM {db:Identifier}.refusal_events "
    "WHERE log_id IN {ids:Array(String)} GROUP BY log_id"
)
#: The same with the ids bound as one JSON text (``warehouse.key_sets``), the way it is run.
FIRST_FINGERPRINTS_JSON = FIRST_FINGERPRINTS.replace("{ids:Array(String)}", key_sets.in_json_keys())
JSON_LOOKUP_CHUNK = 100_000
"""Most ids in one lookup bound as JSON: no cliff there (100,000 ids, about 4 MB of query text:
0.2-0.3 s on chDB at 330,000 stored events, ``benchmarks/sink_lookup.py``)."""

LOOKUP_CHUNK = 10_000
"""Most keys in one primary-key lookup query (``IN`` list). On embedded chDB one large list
falls off a cliff (``python benchmarks/sink_lookup.py``, 2026-12-05, 2-core machine): with
100,000 stored events, 10,000 fresh ids took 0.13 s in one query and 33,000 took 39 s, but
0.60 s in chunks of 10,000; exploratory runs on 330,000 rows: 25,000 ids 0.16 s, 27,000 or
more 39-47 s, growing with the stored rows. The sink's blocks of ~33,000 events made every
block pay the slow path, which is how the sink slowed down as the store grew (issue 27)."""


def _chunks(items: Sequence[Any], size: int = 0) -> list[Sequence[Any]]:
    """``items`` in consecutive slices of at most ``size`` (default :data:`LOOKUP_CHUNK`)."""
    size = size or LOOKUP_CHUNK
    return [items[i : i + size] for i in range(0, len(items), size)]


class WarehouseSettings(Protocol):
    """What ``Warehouse.open`` reads of the settings; ``refusal_audit.config.Settings`` has
    it (the warehouse does not import the application's settings)."""

    @property
    def resolved_warehouse_dsn(self) -> str: ...
    @property
    def warehouse_database(self) -> str: ...
    @property
    def warehouse_password(self) -> SecretStr | None: ...
    @property
    def warehouse_insert_retries(self) -> int: ...


class Warehouse(StoredReads):
    """The refusal-audit warehouse: a connected client plus the database holding its tables.

    ``client`` must already be migrated (see ``warehouse.migrate.migrate``, or use
    ``Warehouse.open``). ``retries`` is the total number of attempts per insert
    (``Settings.warehouse_insert_retries``; values below 1 mean a single attempt). Retries
    only happen on transient errors (``is_transient``), with exponential backoff starting at
    ``retry_wait`` seconds and capped at ``retry_wait_max``; ``on_retry(table)`` is called
    before each retry (for metrics).

    All methods block; call them from a worker thread in async code. A ``Warehouse`` may be
    shared across threads (the driver serialises calls per client).
    """

    def __init__(
        self,
        client: Client,
        database: str,
        *,
        retries: int = 5,
        retry_wait: float = 0.5,
        retry_wait_max: float = 10.0,
        on_retry: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.on_retry = on_retry
        self.database = validate_identifier(database)
        self.insert_attempts = max(1, retries)
        self._retry_wait = retry_wait
        self._retry_wait_max = retry_wait_max
        # (table, columns) -> the columns' ClickHouse types, read once (DESCRIBE TABLE)
        # instead of before every insert; dropped when an insert into the table fails
        self._column_types: dict[tuple[str, tuple[str, ...]], Sequence[Any]] = {}
        # the same for the columnar inserts: (table, columns) -> their Arrow schema
        self._arrow_schemas: dict[tuple[str, tuple[str, ...]], pa.Schema] = {}
        self._column_types_lock = threading.Lock()
        # monotonic time before which refresh_daily does nothing (None: never refreshed)
        self._daily_next: float | None = None

    @classmethod
    def open(
        cls, settings: WarehouseSettings, *, run_migrations: bool = True, via_owner: bool = True
    ) -> Warehouse:
        """Connect with ``settings`` (DSN, database, password, retries) and migrate.

        ``via_owner``: see ``warehouse.connect.connect`` (an embedded store owned by another
        process is reached through its owner; False opens it in this process).
        Raises ``WarehouseError`` (``MigrationError`` for a migration problem).
        """
        from warehouse.migrate import migrate

        password = settings.warehouse_password
        client = connect(
            settings.resolved_warehouse_dsn,
            settings.warehouse_database,
            password.get_secret_value() if password is not None else None,
            via_owner=via_owner,
        )
        try:
            if run_migrations:
                migrate(client, settings.warehouse_database)
        except BaseException:
            client.close()
            raise
        return cls(client, settings.warehouse_database, retries=settings.warehouse_insert_retries)

    def close(self) -> None:
        """Close the underlying client."""
        self.client.close()

    # ---- writes ---------------------------------------------------------------------

    def _insert(
        self,
        table: str,
        columns: Sequence[str],
        rows: list[list[Any]],
        token: str | None = None,
        *,
        columnar: bool = False,
    ) -> None:
        """Insert ``rows`` with ``token`` as the insert deduplication token (default: one
        derived from the content), retrying transient failures. ``columnar``: one Arrow
        insert typed by the table's DDL (``warehouse.columnar``), else the driver's rows."""
        if not rows:
            return
        token = f"{table}:{token}" if token is not None else dedup_token(table, rows)
        key = (table, tuple(columns))
        settings = {**_INSERT_SETTINGS, "insert_deduplication_token": token}

        def attempt() -> None:
            try:
                if columnar:
                    from warehouse.columnar import arrow_table

                    data = arrow_table(self._arrow_schema(key), rows)
                    self.client.insert_arrow(table, data, database=self.database,
                                             settings=settings)  # fmt: skip
                    return
                self.client.insert(
                    table,
                    rows,
                    column_names=list(columns),
                    database=self.database,
                    # a remote client's context has no types (the owner reads them); None
                    # lets the driver read them too when the store was taken over since
                    column_types=self._types_of(key) or None,
                    settings=settings,
                )
            except BaseException:  # the table may have changed: read its types again
                with self._column_types_lock:
                    self._column_types.pop(key, None)
                    self._arrow_schemas.pop(key, None)
                raise

        try:
            self._with_retries(table, f"insert of {len(rows)} row(s) into", attempt)
        except (ClickHouseError, OSError, ValueError, TypeError, OverflowError) as exc:
            raise WarehouseError(
                f"insert of {len(rows)} row(s) into {self.database}.{table} failed: {exc}"
            ) from exc

    def _arrow_schema(self, key: tuple[str, tuple[str, ...]]) -> pa.Schema:
        """The Arrow schema of ``key``'s columns, from ``DESCRIBE TABLE`` (cached like
        :meth:`_types_of`; through the owner channel too). Raises ``WarehouseError`` (a
        column the table lacks too) and ``TypeError`` (``warehouse.columnar.arrow_type``)."""
        with self._column_types_lock:
            schema = self._arrow_schemas.get(key)
        if schema is None:
            table, columns = key
            _, described = self._select(
                "DESCRIBE TABLE {db:Identifier}.{table:Identifier}", {"table": table}
            )
            types = {str(r[0]): str(r[1]) for r in described}
            missing = [c for c in columns if c not in types]
            if missing:
                raise WarehouseError(f"{self.database}.{table} has no column(s) {missing}")
            from warehouse.columnar import arrow_schema

            schema = arrow_schema([(c, types[c]) for c in columns])
            with self._column_types_lock:
                self._arrow_schemas[key] = schema
        return schema

    def _with_retries(self, table: str, what: str, call: Callable[[], _R]) -> _R:
        """``call()`` with up to ``insert_attempts`` attempts and exponential backoff on
        transient errors (``is_transient``). Raises ``WarehouseError`` naming ``what`` (e.g.
        "insert of 3 row(s) into") and ``table`` once the attempts are spent; a permanent
        error propagates as raised."""
        retrying = Retrying(
            stop=stop_after_attempt(self.insert_attempts),
            wait=wait_exponential(multiplier=self._retry_wait, max=self._retry_wait_max),
            retry=retry_if_exception(transient_cause),
            before_sleep=self._before_retry(table),
            reraise=False,
        )
        try:
            return retrying(call)
        except RetryError as exc:
            cause = exc.last_attempt.exception()
            raise WarehouseError(
                f"{what} {self.database}.{table} failed after {self.insert_attempts} "
                f"attempt(s): {cause}"
            ) from cause

    def _types_of(self, key: tuple[str, tuple[str, ...]]) -> Sequence[Any]:
        """The ClickHouse types of ``key``'s columns (cached; one DESCRIBE TABLE per table)."""
        with self._column_types_lock:
            types = self._column_types.get(key)
        if types is None:
            table, columns = key
            context = self.client.create_insert_context(
                table, list(columns), database=self.database
            )
            types = list(context.column_types)
            if types:  # none from a remote client: ask again next time (it may be local)
                with self._column_types_lock:
                    self._column_types[key] = types
        return types

    def _before_retry(self, table: str) -> Callable[[Any], None]:
        def log(state: Any) -> None:
            outcome = state.outcome
            logger.warning(
                "insert into %s failed (attempt %d), retrying: %s",
                table,
                state.attempt_number,
                outcome.exception() if outcome is not None else "?",
            )
            if self.on_retry is not None:
                self.on_retry(table)

        return log

    def insert_events(self, events: Sequence[StoredEvent], token: str | None = None) -> None:
        """Store redacted events (an empty sequence is a no-op).

        Re-delivering an event (same ``log_id``) replaces it. ``token`` (all ``insert_*``
        methods): the insert's deduplication token, e.g. a sink's topic/partition/offset
        range (default: derived from the rows). Raises ``WarehouseError``.

        The same insert records each event's first arrival: the materialized view
        ``event_arrivals_mv`` (migration 0009) forwards every block ``refusal_events``
        stores -- one insert, so this call's retry and dedup-token handling covers it -- to
        ``event_arrivals``, whose ``min`` keeps the earliest ``ingested_at`` per ``log_id``.
        The drift view decides lateness from that first arrival, so a re-delivery or a
        re-run (a newer ``ingested_at`` replacing the event row) does not move an event
        into a later window.
        """
        self.insert_built("refusal_events", [event_row(e) for e in events], token)

    def _lookup(self, table: str, what: str, sql: str, name: str, keys: Sequence[Any]) -> list[Any]:
        """The rows of ``sql`` with its ``name`` parameter bound to ``keys``, queried
        :data:`LOOKUP_CHUNK` keys at a time (each with the store's retries). Raises
        ``WarehouseError``."""
        rows: list[Any] = []
        for chunk in _chunks(keys):
            bound = {name: list(chunk)}
            rows += self._with_retries(table, what, lambda b=bound: self._select(sql, b))[1]  # type: ignore[misc]
        return rows

    def _lookup_ids(self, what: str, ids: Sequence[str]) -> list[Any]:
        """:data:`FIRST_FINGERPRINTS`' rows for ``ids``, bound as JSON (``warehouse.key_sets``)
        :data:`JSON_LOOKUP_CHUNK` ids a query (with retries); ids JSON cannot hold, and all
        over the owner channel, go as the array (:meth:`_lookup`). Raises ``WarehouseError``."""
        rows: list[Any] = []
        binary = key_sets.takes_binary_parameters(self.client)
        for chunk in _chunks(ids, JSON_LOOKUP_CHUNK):
            payload = key_sets.json_keys(chunk) if binary else None
            if payload is None:
                rows += self._lookup("refusal_events", what, FIRST_FINGERPRINTS, "ids", chunk)
                continue
            bound = {key_sets.KEYS_PARAMETER: payload}
            query = partial(self._select, FIRST_FINGERPRINTS_JSON, bound,
                            settings=key_sets.key_set_settings(payload))  # fmt: skip
            rows += self._with_retries("refusal_events", what, query)[1]
        return rows

    def stored_identities(self, keys: Sequence[tuple[str, str]]) -> dict[str, StoredIdentity]:
        """What is stored of the events ``keys`` = ``(policy_bundle, log_id)`` pairs (log ids
        not stored are absent from the result, which is keyed by log id).

        Per log id: the content fingerprint of its first fingerprinted copy (oldest
        ``ingested_at`` among rows with one; "" when only rows from before fingerprints
        exist, and the next copy then pins it), whether its current row is a
        refusal, and the audit configuration of its newest assessment under that bundle
        (``schemas.events.audit_config_key``, "" if none). Queries on the primary keys: the
        events' per :data:`JSON_LOOKUP_CHUNK` ids (:meth:`first_fingerprints`' query), the
        assessments' per :data:`LOOKUP_CHUNK` pairs of the ids found stored.
        Raises ``WarehouseError``.
        """
        if not keys:
            return {}
        pairs = list(dict.fromkeys(keys))
        ids = list(dict.fromkeys(log_id for _, log_id in pairs))
        audits_sql = (
            "SELECT log_id, argMax(concat(policy_bundle, '|', bundle_version, '|', engine, '|', "
            "engine_model, '|', engine_version, '|', prompt_version), audited_at) "
            "FROM {db:Identifier}.assessments "
            "WHERE (policy_bundle, log_id) IN {pairs:Array(Tuple(String, String))} "
            "GROUP BY policy_bundle, log_id"
        )
        what = f"lookup of {len(ids)} log id(s) in"
        events = self._lookup_ids(what, ids)
        # only a stored event's audit configuration is read: pairs of log ids not stored are
        # not looked up (a fresh log, the usual batch, needs no second query at all)
        stored = {str(r[0]) for r in events}
        pairs = [p for p in pairs if p[1] in stored]
        audits = self._lookup("assessments", what, audits_sql, "pairs", pairs) if pairs else []
        audited = {str(r[0]): str(r[1]) for r in audits}
        return {
            str(r[0]): StoredIdentity(str(r[1]), bool(r[2]), audited.get(str(r[0]), ""))
            for r in events
        }

    def first_fingerprints(self, log_ids: Sequence[str]) -> dict[str, str]:
        """log id -> the content fingerprint of its first fingerprinted stored copy ("" when
        only copies from before fingerprints exist), for the stored ones of ``log_ids``: the
        part of :meth:`stored_identities` the warehouse sink's duplicate rule needs, one
        query on the primary key per :data:`JSON_LOOKUP_CHUNK` ids, bound as JSON
        (``warehouse.key_sets``: no per-id formatting in Python). Raises ``WarehouseError``."""
        ids = list(dict.fromkeys(log_ids))
        if not ids:
            return {}
        what = f"lookup of {len(ids)} log id(s) in"
        rows = self._lookup_ids(what, ids)
        return {str(r[0]): str(r[1]) for r in rows}

    def insert_assessments(
        self, items: Sequence[StoredAssessment], token: str | None = None
    ) -> None:
        """Store assessments; per (policy_bundle, log_id) the newest ``audited_at`` is current.

        An empty sequence is a no-op. Raises ``WarehouseError``.
        """
        self.insert_built("assessments", [assessment_row(a) for a in items], token)

    def insert_batch(self, batch: BatchRecord) -> None:
        """Store one audited batch (re-running the same ``batch_id`` replaces it).

        Raises ``WarehouseError``.
        """
        self.insert_batches([batch])

    def insert_batches(self, batches: Sequence[BatchRecord], token: str | None = None) -> None:
        """Store audited batches in one insert (empty sequence: no-op).

        Raises ``WarehouseError``.
        """
        self.insert_built("audit_batches", [batch_row(b) for b in batches], token)

    def insert_built(self, table: str, rows: list[list[Any]], token: str | None = None) -> None:
        """Insert rows built by ``warehouse.rows``' builders (``event_row`` for
        ``refusal_events``, ``assessment_row``, ``batch_row``, ``dead_letter_row``; the
        tables of ``TABLE_COLUMNS``) in one columnar insert (``warehouse.columnar``: Arrow,
        on chDB, a server and the owner channel alike), with ``token`` as in
        :meth:`insert_events` (empty ``rows``: no-op). Raises ``KeyError`` for another
        table, ``WarehouseError`` on failure.

        Rows of ``refusal_events``/``assessments`` then mark their event days dirty again
        (``warehouse.daily.mark_days``; 0024's views did in the insert): a concurrent
        ``refresh`` that read the first mark before the rows were visible leaves them dirty."""
        self._insert(table, TABLE_COLUMNS[table], rows, token, columnar=True)
        if rows and table in _DAILY_SOURCES:
            at = TABLE_COLUMNS[table].index("event_time")
            days = sorted({to_utc(r[at]).date() for r in rows})
            mark = lambda: daily.mark_days(self.client, self.database, days)  # noqa: E731
            self._with_retries("dirty_days", "marking of days in", mark)

    def mark_verdict_days(self, log_ids: Sequence[str], holder: str | None = None) -> list[date]:
        """Mark dirty the event days of the stored events of ``log_ids``
        (``warehouse.daily.mark_verdict_days``; held for ``holder`` first when given), with
        the inserts' retries on transient errors (as ``insert_built`` marks event days).
        Returns the days. Raises ``WarehouseError``."""
        return self._with_retries(
            "dirty_days", "marking of verdicts' days in",
            lambda: daily.mark_verdict_days(self.client, self.database, log_ids, holder),
        )  # fmt: skip

    def mark_sighting_days(
        self, log_ids: Sequence[str], seen_days: Sequence[date], holder: str | None = None
    ) -> list[date]:
        """Mark dirty the days policy-gap sightings change (``seen_days`` and the event days
        of the stored events of ``log_ids``: ``warehouse.daily.mark_sighting_days``; held for
        ``holder`` first when given), with the inserts' retries on transient errors. Returns
        the days. Raises ``WarehouseError``."""
        return self._with_retries(
            "dirty_days", "marking of sightings' days in",
            lambda: daily.mark_sighting_days(self.client, self.database, log_ids, seen_days,
                                             holder),
        )  # fmt: skip

    def release_days(self, days: Sequence[date], holder: str) -> None:
        """End ``holder``'s hold on ``days`` (``warehouse.day_holds.release_days``), with the
        inserts' retries on transient errors. Raises ``WarehouseError``."""
        self._with_retries(
            "dirty_day_holds", "release of held days in",
            lambda: day_holds.release_days(self.client, self.database, days, holder),
        )  # fmt: skip

    def refresh_daily(
        self,
        max_days: int = daily.MAX_DAYS,
        every_s: float = 0.0,
        share: float = 1.0,
        settle_s: float = 0.0,
    ) -> list[date]:
        """Recompute up to ``max_days`` dirty days (``warehouse.daily.refresh``; with
        ``settle_s``, only days not written for that long); the writers call it after each
        stored block. Returns the days recomputed, ``[]`` when throttled.

        Throttled by this object's own clock: after a recompute that started at ``t`` and
        took ``d`` seconds, calls before ``t + max(every_s, d / share)`` do nothing, so a
        writer spends at most ``share`` (0 < share <= 1) of its wall time recomputing.
        A day is recomputed whole, so a day still being written costs more at every call;
        the settle time leaves it to the readers until it is quiet, and the share bounds
        what a late event on a large past day costs (issue 27: with a plain 10 s interval,
        10-16 s of recompute per 1 s block once 8 M rows were in one day). Dirty days are
        computed live by the readers meanwhile, so this bounds the writer's work, never a
        query's correctness. Raises ``ValueError`` for a share outside (0, 1],
        ``WarehouseError`` when the recompute fails."""
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share must be in (0, 1], got {share}")
        started = time.monotonic()
        if self._daily_next is not None and started < self._daily_next:
            return []
        try:
            return daily.refresh(self.client, self.database, max_days, settle_s=settle_s)
        finally:
            took = time.monotonic() - started
            self._daily_next = started + max(every_s, took / share)

    def insert_rows(self, table: str, columns: Sequence[str], rows: list[list[Any]]) -> None:
        """Insert ``rows`` (values in ``columns`` order) into ``table`` of this database, one
        insert with a content-derived dedup token and retries on transient errors (for the
        warehouse modules of other parts, e.g. ``warehouse.review``). Raises
        ``WarehouseError``."""
        self._insert(table, columns, rows)

    def select(self, sql: str, parameters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Rows of ``sql`` (``{db:Identifier}`` is this database) as dicts. Raises
        ``WarehouseError``."""
        return self._dicts(sql, parameters)

    def insert_dead_letters(self, items: Sequence[DeadLetter], token: str | None = None) -> None:
        """Store dead letters (one row per ``dead_letter_id``; empty sequence: no-op).

        Raises ``WarehouseError``.
        """
        self.insert_built("dead_letters", [dead_letter_row(d) for d in items], token)

    def insert_alerts(self, alerts: Sequence[Mapping[str, Any]]) -> None:
        """Store generic alert rows (an empty sequence is a no-op).

        Each mapping needs ``alert_id``, ``kind``, ``severity`` (non-empty strings) and
        ``created_at`` (datetime); optional: ``policy_bundle``, ``model``, ``product``
        (default ``""``), ``window_start``/``window_end`` (datetime or None), ``message`` and
        ``payload`` (a JSON string, or any JSON-serialisable value, stored as sorted-key JSON).
        One row per ``alert_id`` (newest ``created_at`` wins).

        Raises ``ValueError`` for a missing/unknown field, ``WarehouseError`` on failure.
        """
        self._insert("alerts", list(ALERT_COLUMNS), [alert_row(a) for a in alerts])
