"""Holds on dirty days (migration 0030): what keeps ``warehouse.daily.refresh`` from
recording a day between a writer's first mark and its insert.

Policy-gap sightings (``warehouse.gaps.insert_sightings``) and review verdicts
(``warehouse.review.insert_verdicts``) reach their daily aggregates (migrations 0028, 0029)
only through their writers' marks: no materialized view can mark their events' days in the
insert, as the events' views do (0024), because a sighting or a verdict names a log id, not
its event's day. Such a writer marks the days before and after its insert. A refresh that
read the first mark before the rows were visible recorded the days without them; the second
mark normally makes them dirty again, but a writer killed (or failing for good) between its
insert and that mark left them recorded without the rows for good (break9's reproduction,
``tests/test_gap_daily_edges.py``).

So the writer holds the days first (:func:`hold_days`: a row per day, ``until`` = now +
``WRITER_HOLD_S``), marks, inserts, marks again and releases them (:func:`release_days`:
``until`` = now). :func:`refresh` skips every day with a hold neither released nor expired
(``HELD_DAYS``); the readers compute a dirty day live whatever its holds, so a hold costs
speed, never a correct answer. A writer that dies holding days leaves them dirty for at most
``WRITER_HOLD_S``; the first refresh after that recomputes them with whatever its insert
left. Times are the server's clock (``now64``). Rows expire a day after their ``until``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import date

from clickhouse_connect.driver.exceptions import ClickHouseError

from warehouse.client import Client, WarehouseError, quote_identifier

__all__ = [
    "HELD_DAYS",
    "WRITER_HOLD_S",
    "held_filter",
    "hold_days",
    "new_holder",
    "release_days",
]

#: Seconds a writer holds its days at most: longer than an insert with its retries takes
#: (``Warehouse``'s insert retries with backoff, a server's 300 s socket timeout), so a
#: live writer releases its hold before it expires.
WRITER_HOLD_S = 900.0

#: The days ``warehouse.daily.refresh`` must leave dirty: held, neither released nor expired.
HELD_DAYS = "SELECT day FROM {db:Identifier}.dirty_day_holds FINAL WHERE until > now64(3)"


def held_filter(client: Client, database: str) -> str:
    """The condition (`` AND day NOT IN (...)``, on the database parameter ``db``) that keeps
    the held days out of a read of ``dirty_days``, or ``""`` on a store not migrated to
    0030 yet (no holds table: nothing can be held). Raises ``WarehouseError`` when the
    catalogue cannot be read."""
    try:
        found = client.query(
            "SELECT count() FROM system.tables WHERE database = {db:String} "
            "AND name = 'dirty_day_holds'",
            parameters={"db": database},
        ).result_rows[0][0]
    except ClickHouseError as exc:
        raise WarehouseError(f"reading {database}'s tables failed: {exc}") from exc
    return f" AND day NOT IN ({HELD_DAYS})" if found else ""


def new_holder() -> str:
    """A fresh holder id (32 hex characters) for one writer's insert."""
    return uuid.uuid4().hex


def _insert(client: Client, database: str, days: Sequence[date], holder: str, until: str) -> None:
    if not days:
        return
    sql = (
        f"INSERT INTO {quote_identifier(database)}.dirty_day_holds (day, holder, version, until) "
        "SELECT arrayJoin({days:Array(Date)}), {holder:String}, "
        f"toUnixTimestamp64Nano(now64(9)), {until}"
    )
    params = {"days": sorted(set(days)), "holder": holder}
    try:
        client.command(sql, parameters=params)
    except ClickHouseError as exc:
        raise WarehouseError(f"insert into {database}.dirty_day_holds failed: {exc}") from exc


def hold_days(
    client: Client,
    database: str,
    days: Sequence[date],
    holder: str,
    seconds: float = WRITER_HOLD_S,
) -> None:
    """Hold ``days`` for ``holder`` for ``seconds`` (server clock) from now: ``refresh``
    leaves them dirty until :func:`release_days` or the end of the hold. Empty ``days``:
    no-op. Raises ``ValueError`` for a negative ``seconds``, ``WarehouseError`` when the
    insert fails."""
    if seconds < 0:
        raise ValueError(f"seconds must not be negative, got {seconds}")
    until = f"now64(3) + toIntervalMillisecond({int(seconds * 1000)})"
    _insert(client, database, days, holder, until)


def release_days(client: Client, database: str, days: Sequence[date], holder: str) -> None:
    """End ``holder``'s hold on ``days`` (a newer row with ``until`` = now). Empty ``days``:
    no-op. Raises ``WarehouseError`` when the insert fails."""
    _insert(client, database, days, holder, "now64(3)")
