"""Which warehouse failures are worth retrying (the store's inserts and lookups retry them).

ClickHouse error codes from its ``src/Common/ErrorCodes.cpp``; the store retries with tenacity
(``warehouse.store.Warehouse``, ``warehouse_insert_retries``).
"""

from __future__ import annotations

from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from warehouse.client import WarehouseError

# ClickHouse error codes worth retrying: the server is busy or a network hop failed.
_TRANSIENT_CODES = frozenset(
    {
        159,  # TIMEOUT_EXCEEDED
        209,  # SOCKET_TIMEOUT
        210,  # NETWORK_ERROR
        202,  # TOO_MANY_SIMULTANEOUS_QUERIES
        252,  # TOO_MANY_PARTS (merges behind: transient), but see _PERMANENT_MESSAGES
        279,  # ALL_CONNECTION_TRIES_FAILED
        999,  # KEEPER_EXCEPTION
    }
)

# Errors that share a transient code but fail the same way on every retry. ClickHouse
# reports "Too many partitions for single INSERT block" (max_partitions_per_insert_block)
# with code 252, the code of TOO_MANY_PARTS, so the message tells them apart.
_PERMANENT_MESSAGES = ("too many partitions for",)


def is_transient(exc: BaseException) -> bool:
    """Whether an insert failing with ``exc`` is worth retrying.

    True for connection-level failures (``OperationalError``, ``ConnectionError``,
    ``TimeoutError``) and for server errors whose code means "busy" or "network"
    (timeouts, too many parts/queries, Keeper); False for everything else (bad data, bad SQL,
    missing table, too many partitions in one insert block -- code 252 like TOO_MANY_PARTS,
    told apart by its message), which would fail the same way again.
    """
    if isinstance(exc, OperationalError | ConnectionError | TimeoutError):
        return True
    if not isinstance(exc, DatabaseError) or getattr(exc, "code", None) not in _TRANSIENT_CODES:
        return False
    message = str(exc).lower()
    return not any(marker in message for marker in _PERMANENT_MESSAGES)


def transient_cause(exc: BaseException) -> bool:
    """``is_transient`` of ``exc`` or, for a ``WarehouseError`` wrapping one, of its cause."""
    if isinstance(exc, WarehouseError) and exc.__cause__ is not None:
        return is_transient(exc.__cause__)
    return is_transient(exc)
