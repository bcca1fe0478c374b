"""Keys stored in more than one partition, and the fix (issue 27, migration 0023).

``refusal_events`` (key ``log_id``) and ``assessments`` (key ``(policy_bundle, log_id)``)
are ``ReplacingMergeTree`` tables partitioned by ``toYYYYMM(event_time)``. This release
stores every version of a key with the same ``event_time`` (the event time is part of an
event's content fingerprint and a copy with another fingerprint is never stored; an
assessment takes its event's time), so each key sits in one partition, and ``FINAL`` may
merge inside partitions only (``do_not_merge_across_partitions_select_final``, migration
0023). A store written before the duplicate-log-id rule (migration 0011) or by hand may hold
a key in two months, where that setting would return two versions instead of one:
:func:`spanning_keys` counts them (``warehouse.migrate`` refuses a migration marked
``-- requires: keys-in-one-partition`` while any exist) and :func:`fold_spanning_keys`
removes, for each such key, the versions outside the partition of the version ``FINAL``
returns today (the newest by the table's version column), so every read keeps its result.

Run the fix on a store (writers stopped, or at least not re-sending old copies):
``python -m warehouse.partition_check DSN DATABASE --fold`` (without ``--fold``: count only).
"""

from __future__ import annotations

from dataclasses import dataclass

from clickhouse_connect.driver.exceptions import ClickHouseError

from warehouse.client import Client, WarehouseError, quote_identifier

__all__ = [
    "LOCAL_FINAL",
    "MARKER",
    "TABLES",
    "PartitionedTable",
    "fold_spanning_keys",
    "spanning_keys",
]

#: The comment line a migration starts with when it needs every key in one partition.
MARKER = "-- requires: keys-in-one-partition"

#: Query settings for reads of ``refusal_events`` / ``assessments`` with ``FINAL`` on a store
#: migrated past 0023 (every key in one partition): FINAL merges inside each month only, in
#: parallel, and skips a month held in one part; the other tables are not partitioned, so
#: the setting changes nothing there.
LOCAL_FINAL: dict[str, int] = {"do_not_merge_across_partitions_select_final": 1}

#: Bytes of GROUP BY state kept in memory before spilling to disk: the check groups every
#: stored key (100 M keys hold several GB), on a 2-core machine with a few GB of RAM.
_SPILL_BYTES = 500_000_000


@dataclass(frozen=True)
class PartitionedTable:
    """A table partitioned by ``toYYYYMM(event_time)``: its ``name``, ``key`` columns (SQL
    list) and ``version`` column (the ReplacingMergeTree's)."""

    name: str
    key: str
    version: str


TABLES = (
    PartitionedTable("refusal_events", "log_id", "ingested_at"),
    PartitionedTable("assessments", "policy_bundle, log_id", "audited_at"),
)

_SPANNING = """
SELECT {key}, argMax(toYYYYMM(event_time), {version}) AS keep,
       groupUniqArray(toYYYYMM(event_time)) AS months
FROM {db}.{table}
GROUP BY {key}
HAVING length(months) > 1
"""


def _spanning_sql(db: str, table: PartitionedTable) -> str:
    return _SPANNING.format(db=db, table=table.name, key=table.key, version=table.version)


def _existing(client: Client, database: str) -> list[PartitionedTable]:
    rows = client.query(
        "SELECT name FROM system.tables WHERE database = {db:String}",
        parameters={"db": database},
    ).result_rows
    names = {str(r[0]) for r in rows}
    return [t for t in TABLES if t.name in names]


def spanning_keys(client: Client, database: str) -> dict[str, int]:
    """Per partitioned table that exists in ``database``: how many keys have versions in
    more than one partition (0 on a store this release wrote). Reads every key once, with
    the GROUP BY spilling to disk past 500 MB. Raises ``WarehouseError``."""
    db = quote_identifier(database)
    out: dict[str, int] = {}
    try:
        for table in _existing(client, database):
            sql = (
                f"SELECT count() FROM ({_spanning_sql(db, table)}) "
                f"SETTINGS max_bytes_before_external_group_by = {_SPILL_BYTES}"
            )
            out[table.name] = int(client.query(sql).result_rows[0][0])
    except ClickHouseError as exc:
        raise WarehouseError(f"cannot count keys spanning partitions: {exc}") from exc
    return out


def fold_spanning_keys(client: Client, database: str) -> dict[str, int]:
    """Delete, for every key stored in more than one partition, the versions outside the
    partition of its newest version (the one ``FINAL`` returns; on a tie in the version
    column, one of the tied partitions). Waits for the deletes; returns the keys found per
    table (as :func:`spanning_keys` before the call). Re-runnable: a store without such keys
    is left as it is. Raises ``WarehouseError``, also when keys still span partitions after
    the deletes."""
    db = quote_identifier(database)
    found = spanning_keys(client, database)
    try:
        for table in _existing(client, database):
            if not found.get(table.name):
                continue
            doomed = (
                f"SELECT {table.key}, m FROM ({_spanning_sql(db, table)}) "
                "ARRAY JOIN months AS m WHERE m != keep"
            )
            client.command(
                f"ALTER TABLE {db}.{table.name} DELETE WHERE "
                f"({table.key}, toYYYYMM(event_time)) IN ({doomed}) "
                "SETTINGS mutations_sync = 2"
            )
    except ClickHouseError as exc:
        raise WarehouseError(f"cannot remove keys spanning partitions: {exc}") from exc
    left = {t: n for t, n in spanning_keys(client, database).items() if n}
    if left:
        raise WarehouseError(f"keys still spanning partitions after the fix: {left}")
    return found
