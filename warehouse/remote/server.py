"""The owner's side of the channel: ``serve_request`` runs one request on a local client.

``check_bearer`` checks the request's token; both are reusable by any HTTP stack (the
worker's faust page, an ASGI app), which serves them at ``OWNER_PATH``.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import threading
import weakref
from collections.abc import Mapping
from typing import Any

import orjson
import pyarrow as pa
from clickhouse_connect.driver.binding import _query_is_insert
from clickhouse_connect.driver.exceptions import ClickHouseError, Error, OperationalError
from clickhouse_connect.driver.summary import QuerySummary

from warehouse.client import Client, WarehouseError, validate_identifier
from warehouse.remote.codec import ERROR_CLASSES, CodecError, decode_value, dumps, encode_value
from warehouse.sql_guard import SqlGuardError, check_owner_statement

__all__ = ["OWNER_PATH", "check_bearer", "serve_request"]

log = logging.getLogger("warehouse.remote")  # the channel's logger, named as before the split

#: Path of the channel on the owner's web server.
OWNER_PATH = "/_owner/warehouse"

_TABLE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?$")


class _BadRequest(Exception):
    pass


# One lock per served client: the request's database is set on the client, then used.
_client_locks: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_client_locks_guard = threading.Lock()


def _lock_for(client: Client) -> threading.Lock:
    with _client_locks_guard:
        lock = _client_locks.get(client)
        if lock is None:
            lock = _client_locks[client] = threading.Lock()
        return lock


def _error(
    status: int, cls: str, message: str, code: int | None = None, name: str | None = None
) -> tuple[int, bytes]:
    body = {"class": cls, "message": message, "code": code, "name": name}
    return status, dumps({"error": body})


def _refused(exc: SqlGuardError) -> tuple[int, bytes]:
    """422 for a statement the channel refuses: the ClickHouse error that refused it (a
    syntax error, a second statement), else ``ACCESS_DENIED`` (code 497)."""
    cause = exc.__cause__
    if isinstance(cause, OperationalError):  # the check itself failed for a passing reason
        return _error(503, "OperationalError", str(cause), cause.code, cause.name)
    if isinstance(cause, Error) and cause.code is not None:
        return _error(422, "DatabaseError", str(exc), cause.code, cause.name)
    message = f"refused by the owner channel: {exc}"
    return _error(422, "DatabaseError", message, 497, "ACCESS_DENIED")


def check_bearer(header_value: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header value is ``Bearer <token>`` (constant-time
    comparison; False for a missing header, another scheme or an empty ``token``)."""
    if not header_value or not token:
        return False
    scheme, _, given = header_value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return secrets.compare_digest(given.strip().encode(), token.encode())


def _field(
    req: Mapping[str, Any], name: str, kind: type | tuple[type, ...], required: bool = False
) -> Any:
    value = req.get(name)
    if value is None:
        if required:
            raise _BadRequest(f"missing field {name!r}")
        return None
    if not isinstance(value, kind):
        raise _BadRequest(f"field {name!r} has the wrong type")
    return value


def _identifier_field(req: Mapping[str, Any], name: str) -> str | None:
    """An optional field holding a database name (a plain identifier)."""
    value = _field(req, name, str)
    if value is not None:
        try:
            validate_identifier(value)
        except WarehouseError as exc:
            raise _BadRequest(str(exc)) from exc
    return value  # type: ignore[no-any-return]


def _arrow_field(req: Mapping[str, Any]) -> pa.Table:
    """The ``arrow`` field of an ``insert_arrow`` request (an Arrow IPC stream) as a table."""
    data = decode_value(_field(req, "arrow", dict, required=True))
    if not isinstance(data, bytes):
        raise _BadRequest("field 'arrow' must be bytes (an Arrow IPC stream)")
    try:
        return pa.ipc.open_stream(data).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise _BadRequest(f"field 'arrow' is not an Arrow IPC stream: {exc}") from exc


def _parse(req: Any) -> tuple[str, str | None, dict[str, Any]]:
    """(op, database, keyword arguments for the client call) of a decoded request."""
    if not isinstance(req, dict):
        raise _BadRequest("the request must be a JSON object")
    op = req.get("op")
    database = _identifier_field(req, "database")
    settings = decode_value(_field(req, "settings", dict))
    if op == "ping":
        return op, database, {}
    if op in ("query", "command"):
        kwargs: dict[str, Any] = {
            "parameters": decode_value(_field(req, "parameters", (dict, list))),
            "settings": settings,
        }
        if op == "query":
            kwargs["column_formats"] = decode_value(_field(req, "column_formats", dict))
        return op, database, {"sql": _field(req, "sql", str, required=True), **kwargs}
    if op in ("insert", "insert_arrow"):
        table = _field(req, "table", str, required=True)
        if not _TABLE_NAME_RE.match(table):  # a dotted name reaches the SQL text unquoted
            raise _BadRequest("field 'table' must be a table name (db.table or table)")
        target = {"table": table, "database": _identifier_field(req, "table_database"),
                  "settings": settings}  # fmt: skip
        if op == "insert_arrow":
            return op, database, {**target, "arrow_table": _arrow_field(req)}
        rows = decode_value(_field(req, "rows", list, required=True))
        if not all(isinstance(r, list | tuple) for r in rows):
            raise _BadRequest("field 'rows' must be a list of rows")
        names = _field(req, "column_names", (str, list))
        if isinstance(names, list) and not all(isinstance(n, str) for n in names):
            raise _BadRequest("field 'column_names' must be a list of names")
        return op, database, {**target, "data": rows,
                              "column_names": names if names is not None else "*"}  # fmt: skip
    raise _BadRequest(f"unknown op {str(op)[:40]!r}")


def _execute(client: Client, op: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    if op in ("query", "command"):
        # never on anyone's behalf: files, URLs, other servers, dictionaries, backups
        check_owner_statement(client, kwargs["sql"], kwargs["parameters"])
    if op == "query":
        result = client.query(
            kwargs["sql"],
            parameters=kwargs["parameters"],
            settings=kwargs["settings"],
            column_formats=kwargs["column_formats"],
        )
        return {
            "column_names": list(result.column_names),
            "column_types": [t.name for t in result.column_types],
            "rows": encode_value([list(r) for r in result.result_rows]),
            "summary": encode_value(dict(result.summary)),
        }
    if op == "command":
        out = client.command(
            kwargs["sql"], parameters=kwargs["parameters"], settings=kwargs["settings"]
        )
        if isinstance(out, QuerySummary):
            return {"summary": encode_value(dict(out.summary))}
        if not isinstance(out, str | int):  # a sequence of strings
            out = list(out)
        return {"result": encode_value(out)}
    summary = client.insert_arrow(**kwargs) if op == "insert_arrow" else client.insert(**kwargs)
    return {"summary": encode_value(dict(summary.summary))}


def _sticks_readonly(op: str, kwargs: dict[str, Any]) -> bool:
    """Whether this call would leave a chDB client in readonly mode for good.

    chDB's driver applies a command's settings, and an INSERT sent as a query's, with ``SET``
    and restores them afterwards; after ``SET readonly = 1`` the restore is refused, so every
    later call on the (shared) client would be read-only. Such calls are refused instead,
    as ClickHouse would refuse them anyway (a write in readonly mode).
    """
    settings = kwargs.get("settings") or {}
    if str(settings.get("readonly", "0")).strip() in ("", "0"):
        return False
    return op == "command" or (op == "query" and _query_is_insert(kwargs["sql"]))


def serve_request(client: Client, body: bytes) -> tuple[int, bytes]:
    """Execute one channel request (``body``: the JSON request) on a local ``client``.

    Returns ``(status, JSON body)``: 200 with the op's result, 400 for a malformed
    request, 422 when ClickHouse (or the driver, for bad data) refused the statement,
    503 for a transient failure, 500 for anything unexpected (logged here with its
    traceback; the answer carries only the message). Never raises for a bad ``body``.
    Blocking: run it in a thread from async code. Calls on the same ``client`` are
    serialised (each sets the client's database for its duration). A command, or an INSERT
    query, with the setting ``readonly`` is refused (422, code 164) without running: on chDB
    it would leave the client read-only for every later request. Every ``query`` and
    ``command`` first passes ``warehouse.sql_guard.check_owner_statement`` (ClickHouse's
    parser): one statement, nothing that reaches outside the store (table functions but
    ``numbers``/``zeros``, ``file()``, dictionary sources, foreign table engines, backups);
    a refused one answers 422 with code 497 (ACCESS_DENIED) and does not run. An insert's
    ``table`` must be a plain ``[db.]table`` name; ``insert_arrow`` carries its rows as an
    Arrow IPC stream (``arrow``, bytes) and runs the driver's ``insert_arrow``.
    """
    try:
        op, database, kwargs = _parse(orjson.loads(body))
    except (orjson.JSONDecodeError, _BadRequest, CodecError, RecursionError) as exc:
        return _error(400, "ProgrammingError", f"malformed owner-channel request: {exc}")
    if op == "ping":
        return 200, dumps({"pid": os.getpid()})
    if _sticks_readonly(op, kwargs):
        message = f"{op} with the setting readonly is refused by the owner channel (READONLY)"
        return _error(422, "DatabaseError", message, 164, "READONLY")
    try:
        with _lock_for(client):
            client.database = database or "default"
            out = _execute(client, op, kwargs)
        return 200, dumps(out)
    except OperationalError as exc:
        return _error(503, type(exc).__name__, str(exc), exc.code, exc.name)
    except Error as exc:
        cls = type(exc).__name__ if type(exc).__name__ in ERROR_CLASSES else "DatabaseError"
        return _error(422, cls, str(exc), exc.code, exc.name)
    except ClickHouseError as exc:
        return _error(422, "DatabaseError", str(exc))
    except SqlGuardError as exc:
        return _refused(exc)
    except CodecError as exc:  # a result value the channel cannot carry
        log.exception("owner channel: %s result not sent", op)
        return _error(500, "InternalError", f"cannot send the result: {exc}")
    except (ValueError, TypeError, KeyError) as exc:  # the driver refusing a value
        return _error(
            422,
            type(exc).__name__ if type(exc).__name__ in ERROR_CLASSES else "ValueError",
            str(exc),
        )
    except OSError as exc:
        return _error(503, "OperationalError", str(exc))
    except Exception as exc:
        log.exception("owner channel: %s failed", op)
        return _error(500, "InternalError", f"{type(exc).__name__}: {exc}")
