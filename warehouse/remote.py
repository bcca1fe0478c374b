"""The owner channel: other processes reach an embedded (chDB) store through its owner.

chDB lets one process at a time open a data path. The long-running owner of an embedded
store (the stream worker) serves requests for it over HTTP on loopback, and announces
itself in an *owner file* next to the data directory (``<path>.owner.json`` for
``chdb:///<path>``): ``{"pid", "url", "token", "started_at"}``, mode 0600. While that
process lives, ``warehouse.connect.connect`` returns a ``RemoteClient`` to it instead of
opening the store (which would fail on chDB's lock).

Wire format: one ``POST`` per call, a JSON object ``{"op", "database", ...}`` with a
``Authorization: Bearer <token>`` header; the answer is JSON too. Values that JSON cannot
carry exactly travel tagged by ``encode_value``/``decode_value`` (the typed codec), so a
remote query returns the same Python values as a local one. Ops:

- ``ping`` -> ``{"pid"}`` (does not touch the store);
- ``query`` (``sql``, ``parameters``, ``settings``, ``column_formats``) ->
  ``{"column_names", "column_types", "rows", "summary"}``;
- ``command`` (``sql``, ``parameters``, ``settings``) -> ``{"result"}`` or ``{"summary"}``;
- ``insert`` (``table``, ``rows``, ``column_names``, ``database``, ``settings``) ->
  ``{"summary"}`` (the owner reads the column types itself).

Failures answer ``{"error": {"class", "message", "code", "name"}}`` with status 400
(malformed request), 401 (token), 422 (the statement failed), 503 (transient) or 500; never
a traceback. ``serve_request`` and ``check_bearer`` are the server side, reusable by any
HTTP stack (the worker's faust page, an ASGI app).
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import logging
import math
import os
import re
import secrets
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

import httpx
import orjson
from clickhouse_connect.datatypes.registry import get_from_name
from clickhouse_connect.driver.binding import _query_is_insert
from clickhouse_connect.driver.exceptions import (
    ClickHouseError,
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
)
from clickhouse_connect.driver.query import QueryResult
from clickhouse_connect.driver.summary import QuerySummary

from warehouse.client import Client, WarehouseError, validate_identifier
from warehouse.sql_guard import SqlGuardError, check_owner_statement

__all__ = [
    "OWNER_PATH",
    "CodecError",
    "OwnerInfo",
    "RemoteClient",
    "RemoteInsertContext",
    "check_bearer",
    "decode_value",
    "encode_value",
    "find_owner",
    "new_token",
    "owner_file",
    "publish_owner",
    "serve_request",
    "withdraw_owner",
]

log = logging.getLogger(__name__)

#: Path of the channel on the owner's web server.
OWNER_PATH = "/_owner/warehouse"

#: Default read timeout of a remote call (seconds); connecting is given ``CONNECT_TIMEOUT``.
DEFAULT_TIMEOUT = 300.0
CONNECT_TIMEOUT = 5.0

_TAG = "$t"
_TABLE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?$")
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what orjson writes as a JSON number
_JSON = "application/json"


# ---- the typed codec --------------------------------------------------------------------


class CodecError(ValueError):
    """A value the codec cannot encode, or a payload it cannot decode."""


def encode_value(value: Any) -> Any:
    """``value`` as JSON-native data (for ``orjson.dumps``), non-JSON values tagged.

    Plain: None, bool, str, int within 64 bits, finite float, list, dict with str keys.
    Tagged as ``{"$t": tag, "v": ...}``: larger ints, nan/inf, bytes, datetime (ISO 8601;
    aware ones keep their UTC offset, naive stay naive), date, time, timedelta, Decimal,
    UUID, IPv4/IPv6 addresses, tuples, and dicts with a non-str key or a ``"$t"`` key
    (as ``[[key, value], ...]``). Raises ``CodecError`` for anything else.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if _INT_MIN <= value <= _INT_MAX else {_TAG: "int", "v": str(value)}
    if isinstance(value, float):
        return value if math.isfinite(value) else {_TAG: "float", "v": repr(value)}
    if isinstance(value, list):
        return [encode_value(v) for v in value]
    if isinstance(value, tuple):
        return {_TAG: "tuple", "v": [encode_value(v) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and _TAG not in value:
            return {k: encode_value(v) for k, v in value.items()}
        return {_TAG: "map", "v": [[encode_value(k), encode_value(v)] for k, v in value.items()]}
    encoder = _ENCODERS.get(type(value))
    if encoder is None:
        encoder = next((f for t, f in _ENCODERS.items() if isinstance(value, t)), None)
    if encoder is None:
        raise CodecError(f"cannot encode a {type(value).__name__} for the owner channel")
    tag, text = encoder(value)
    return {_TAG: tag, "v": text}


def _encode_bytes(value: Any) -> tuple[str, Any]:
    return "bytes", base64.b64encode(bytes(value)).decode("ascii")


def _encode_timedelta(value: timedelta) -> tuple[str, Any]:
    return "td", [value.days, value.seconds, value.microseconds]


# Order matters for the isinstance fallback: datetime before its base class date.
_ENCODERS: dict[type, Callable[[Any], tuple[str, Any]]] = {
    bytes: _encode_bytes,
    bytearray: _encode_bytes,
    memoryview: _encode_bytes,
    datetime: lambda v: ("dt", v.isoformat()),
    date: lambda v: ("date", v.isoformat()),
    time: lambda v: ("time", v.isoformat()),
    timedelta: _encode_timedelta,
    Decimal: lambda v: ("dec", str(v)),
    UUID: lambda v: ("uuid", str(v)),
    ipaddress.IPv4Address: lambda v: ("ip4", str(v)),
    ipaddress.IPv6Address: lambda v: ("ip6", str(v)),
}


def _decode_td(v: Any) -> timedelta:
    days, seconds, micros = v
    return timedelta(days=days, seconds=seconds, microseconds=micros)


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "int": int,
    "float": float,
    "bytes": lambda v: base64.b64decode(v, validate=True),
    "dt": datetime.fromisoformat,
    "date": date.fromisoformat,
    "time": time.fromisoformat,
    "td": _decode_td,
    "dec": Decimal,
    "uuid": UUID,
    "ip4": ipaddress.IPv4Address,
    "ip6": ipaddress.IPv6Address,
    "tuple": lambda v: tuple(decode_value(x) for x in v),
    "map": lambda v: {decode_value(k): decode_value(x) for k, x in v},
}


def decode_value(data: Any) -> Any:
    """The inverse of ``encode_value`` (on what ``orjson.loads`` made of its output).

    Raises ``CodecError`` for an unknown tag or a tagged value of the wrong shape.
    """
    if isinstance(data, list):
        return [decode_value(v) for v in data]
    if not isinstance(data, dict):
        return data
    if _TAG not in data:
        return {k: decode_value(v) for k, v in data.items()}
    tag = data[_TAG]
    decoder = _DECODERS.get(tag) if isinstance(tag, str) else None
    if decoder is None or set(data) != {_TAG, "v"}:
        raise CodecError(f"unknown tagged value {str(tag)[:40]!r}")
    try:
        return decoder(data["v"])
    except CodecError:
        raise
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise CodecError(f"bad {tag} value: {exc}") from exc


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value)


# ---- the server side --------------------------------------------------------------------


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
    return status, _dumps({"error": body})


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
    if op == "insert":
        table = _field(req, "table", str, required=True)
        if not _TABLE_NAME_RE.match(table):  # a dotted name reaches the SQL text unquoted
            raise _BadRequest("field 'table' must be a table name (db.table or table)")
        table_database = _identifier_field(req, "table_database")
        rows = decode_value(_field(req, "rows", list, required=True))
        if not all(isinstance(r, list | tuple) for r in rows):
            raise _BadRequest("field 'rows' must be a list of rows")
        names = _field(req, "column_names", (str, list))
        if isinstance(names, list) and not all(isinstance(n, str) for n in names):
            raise _BadRequest("field 'column_names' must be a list of names")
        return (
            op,
            database,
            {
                "table": table,
                "data": rows,
                "column_names": names if names is not None else "*",
                "database": table_database,
                "settings": settings,
            },
        )
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
    summary = client.insert(**kwargs)
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
    ``table`` must be a plain ``[db.]table`` name.
    """
    try:
        op, database, kwargs = _parse(orjson.loads(body))
    except (orjson.JSONDecodeError, _BadRequest, CodecError, RecursionError) as exc:
        return _error(400, "ProgrammingError", f"malformed owner-channel request: {exc}")
    if op == "ping":
        return 200, _dumps({"pid": os.getpid()})
    if _sticks_readonly(op, kwargs):
        message = f"{op} with the setting readonly is refused by the owner channel (READONLY)"
        return _error(422, "DatabaseError", message, 164, "READONLY")
    try:
        with _lock_for(client):
            client.database = database or "default"
            out = _execute(client, op, kwargs)
        return 200, _dumps(out)
    except OperationalError as exc:
        return _error(503, type(exc).__name__, str(exc), exc.code, exc.name)
    except Error as exc:
        cls = type(exc).__name__ if type(exc).__name__ in _ERROR_CLASSES else "DatabaseError"
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
            type(exc).__name__ if type(exc).__name__ in _ERROR_CLASSES else "ValueError",
            str(exc),
        )
    except OSError as exc:
        return _error(503, "OperationalError", str(exc))
    except Exception as exc:
        log.exception("owner channel: %s failed", op)
        return _error(500, "InternalError", f"{type(exc).__name__}: {exc}")


# ---- the client side --------------------------------------------------------------------

_ERROR_CLASSES: dict[str, type[Exception]] = {
    c.__name__: c
    for c in (
        Error,
        DatabaseError,
        DataError,
        IntegrityError,
        InterfaceError,
        InternalError,
        NotSupportedError,
        OperationalError,
        ProgrammingError,
        ValueError,
        TypeError,
        KeyError,
    )
}


def _raise_error(url: str, response: httpx.Response) -> None:
    status = response.status_code
    try:
        err = orjson.loads(response.content)["error"]
        cls_name, message = str(err["class"]), str(err["message"])
        code = err.get("code") if isinstance(err.get("code"), int) else None
        name = err.get("name") if isinstance(err.get("name"), str) else None
    except (orjson.JSONDecodeError, KeyError, TypeError):
        cls_name, message, code, name = "", response.text[:500], None, None
    if status == 401:
        raise InterfaceError(f"the warehouse owner at {url} refused the token: {message}")
    cls = _ERROR_CLASSES.get(cls_name)
    if cls is None:
        cls = (
            OperationalError
            if status >= 500
            else ProgrammingError
            if status == 400
            else DatabaseError
        )
        message = f"the warehouse owner at {url} answered {status}: {message}"
    if issubclass(cls, Error):
        raise cls(message, code=code, name=name)
    raise cls(message)


class RemoteInsertContext:
    """What ``RemoteClient.create_insert_context`` returns: the table and column names.

    ``column_types`` is empty; a remote insert ignores column types (the owner reads them).
    """

    def __init__(self, table: str, column_names: Sequence[str], database: str | None) -> None:
        self.table = table
        self.column_names = list(column_names)
        self.database = database
        self.column_types: list[Any] = []


class RemoteClient:
    """The subset of clickhouse-connect's ``Client`` this package uses, served by the
    store's owner over the owner channel (``url``, bearer ``token``).

    ``query`` (``parameters``, ``settings``, ``column_formats``) returns a real
    clickhouse-connect ``QueryResult`` (``result_rows`` as tuples, ``column_names``,
    ``column_types``, ``named_results()``...); ``command`` returns what the local driver
    would (str, int, list of str or ``QuerySummary``); ``insert`` takes ``table``, rows,
    ``column_names``, ``database`` and ``settings`` (``column_types`` is accepted and
    ignored); ``create_insert_context`` returns a ``RemoteInsertContext``. ``database`` is
    the default database, sent with every call, like the driver's attribute.

    Errors are the driver's exception classes: the ClickHouse error as the owner's client
    raised it (same class, message and code); ``OperationalError`` when the owner cannot be
    reached, times out or answers 5xx (transient for ``warehouse.store.is_transient``);
    ``InterfaceError`` for a refused token; ``ProgrammingError`` for a malformed request
    or a closed client. Thread-safe.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        database: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        self.url = url
        self.token = token
        self.database = database
        self._closed = False
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            headers={"Authorization": f"Bearer {token}", "Content-Type": _JSON},
            trust_env=False,  # loopback: never through a proxy from the environment
        )

    def _call(self, op: str, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        if self._closed:
            raise ProgrammingError("The client has been closed")
        try:
            body = _dumps({"op": op, "database": self.database, **fields})
        except (CodecError, orjson.JSONEncodeError) as exc:
            raise ProgrammingError(f"cannot send this call to the warehouse owner: {exc}") from exc
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        try:
            response = self._http.post(self.url, content=body, **extra)
        except httpx.TimeoutException as exc:
            raise OperationalError(
                f"the warehouse owner at {self.url} did not answer in time: {exc}"
            ) from exc
        except httpx.HTTPError as exc:
            raise OperationalError(
                f"cannot reach the warehouse owner at {self.url}: {exc}"
            ) from exc
        if response.status_code != 200:
            _raise_error(self.url, response)
        try:
            out = orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise OperationalError(
                f"the warehouse owner at {self.url} sent an unreadable answer: {exc}"
            ) from exc
        if not isinstance(out, dict):
            raise OperationalError(f"the warehouse owner at {self.url} sent {type(out).__name__}")
        return out

    def ping(self, timeout: float | None = CONNECT_TIMEOUT) -> bool:
        """Whether the owner answers (within ``timeout`` seconds); never raises."""
        try:
            self._call("ping", timeout=timeout)
        except ClickHouseError:
            return False
        return True

    def query(
        self,
        query: str,
        parameters: Sequence[Any] | dict[str, Any] | None = None,
        settings: dict[str, Any] | None = None,
        column_formats: dict[str, str | dict[str, str]] | None = None,
    ) -> QueryResult:
        """Run ``query`` on the owner; see ``clickhouse_connect`` ``Client.query``."""
        out = self._call(
            "query",
            sql=query,
            parameters=encode_value(parameters),
            settings=encode_value(settings),
            column_formats=column_formats,
        )
        try:
            rows = [tuple(r) for r in decode_value(out["rows"])]
            names = tuple(str(n) for n in out["column_names"])
            summary = decode_value(out.get("summary") or {})
        except (CodecError, KeyError, TypeError) as exc:
            raise OperationalError(f"bad answer from the warehouse owner: {exc}") from exc
        types: tuple[Any, ...] = ()
        with contextlib.suppress(Exception):  # types are informative only
            types = tuple(get_from_name(t) for t in out.get("column_types") or ())
        return QueryResult(rows, None, names, types, summary=summary)

    def command(
        self,
        cmd: str,
        parameters: Sequence[Any] | dict[str, Any] | None = None,
        settings: dict[str, Any] | None = None,
    ) -> str | int | Sequence[str] | QuerySummary:
        """Run ``cmd`` on the owner; see ``clickhouse_connect`` ``Client.command``."""
        out = self._call(
            "command", sql=cmd, parameters=encode_value(parameters), settings=encode_value(settings)
        )
        if "summary" in out:
            return QuerySummary(decode_value(out["summary"]))
        result = decode_value(out.get("result"))
        if not isinstance(result, str | int | list):
            raise OperationalError(f"bad answer from the warehouse owner: {result!r}")
        return result

    def insert(
        self,
        table: str,
        data: Sequence[Sequence[Any]],
        column_names: str | Sequence[str] = "*",
        database: str | None = None,
        column_types: Sequence[Any] | None = None,
        settings: dict[str, Any] | None = None,
    ) -> QuerySummary:
        """Insert ``data`` (rows) into ``table`` on the owner; ``column_types`` is ignored.

        See ``clickhouse_connect`` ``Client.insert``. Raises ``ProgrammingError`` for a
        value the channel cannot carry.
        """
        try:
            rows = encode_value([list(r) for r in data])
        except CodecError as exc:
            raise ProgrammingError(f"cannot send these rows to the warehouse owner: {exc}") from exc
        out = self._call(
            "insert",
            table=table,
            rows=rows,
            column_names=column_names if isinstance(column_names, str) else list(column_names),
            table_database=database,
            settings=encode_value(settings),
        )
        return QuerySummary(decode_value(out.get("summary") or {}))

    def create_insert_context(
        self, table: str, column_names: Sequence[str], database: str | None = None
    ) -> RemoteInsertContext:
        """A ``RemoteInsertContext`` (no round trip; its ``column_types`` is empty)."""
        return RemoteInsertContext(table, column_names, database)

    def close(self) -> None:
        """Close the HTTP connections (idempotent); later calls raise ``ProgrammingError``."""
        self._closed = True
        self._http.close()

    def close_connections(self) -> None:
        """Drop pooled HTTP connections (the client stays usable)."""
        self._http.close()
        self._http = httpx.Client(
            timeout=self._http.timeout, headers=self._http.headers, trust_env=False
        )


# ---- the owner file ---------------------------------------------------------------------


@dataclass(frozen=True)
class OwnerInfo:
    """An owner file's content: the owning process, its channel URL and bearer token, and
    when it started (aware UTC)."""

    pid: int
    url: str
    token: str
    started_at: datetime


def owner_file(dsn: str) -> Path | None:
    """The owner file of a ``chdb:///path`` DSN, ``<realpath>.owner.json``; None for an
    in-memory or server DSN (they have no owner)."""
    if dsn.partition(":")[0].lower() != "chdb":
        return None
    parts = urlsplit(dsn)
    if parts.netloc or not dsn[len("chdb://") :].startswith("/"):
        return None
    path = os.path.realpath(dsn[len("chdb://") :])
    return Path(f"{path}.owner.json")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return False
    return True


def _read_owner(path: Path) -> OwnerInfo | None:
    try:
        data = orjson.loads(path.read_bytes())
        info = OwnerInfo(
            pid=int(data["pid"]),
            url=str(data["url"]),
            token=str(data["token"]),
            started_at=datetime.fromisoformat(str(data["started_at"])),
        )
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    if info.pid <= 0 or not info.token or urlsplit(info.url).scheme not in ("http", "https"):
        return None
    return info


def find_owner(dsn: str) -> OwnerInfo | None:
    """The live owner of the embedded store at ``dsn``, from its owner file.

    None when there is no owner file, it is unreadable or malformed, its process is not
    alive (a stale file, left by a crash), it is this process (which opens the store
    itself), or ``dsn`` is not a ``chdb:///path`` DSN. Never raises.
    """
    path = owner_file(dsn)
    if path is None:
        return None
    info = _read_owner(path)
    if info is None or info.pid == os.getpid() or not _pid_alive(info.pid):
        return None
    return info


def new_token() -> str:
    """A fresh bearer token for the owner channel (256 random bits, URL-safe text)."""
    return secrets.token_urlsafe(32)


def publish_owner(dsn: str, url: str, token: str | None = None) -> str:
    """Announce this process as the owner of the store at ``dsn``, serving the channel at
    ``url``; return the bearer token (``token``, or a new one from ``new_token``). A
    server that already accepts ``token`` is never announced before it can answer.

    Writes the owner file atomically (a temporary file, mode 0600, renamed over it),
    replacing any previous one. Raises ``WarehouseError`` for a DSN without an owner file
    (in-memory, server) or when the file cannot be written.
    """
    path = owner_file(dsn)
    if path is None:
        raise WarehouseError(f"{dsn!r} is not an embedded store path: it has no owner file")
    token = token or new_token()
    body = _dumps(
        {
            "pid": os.getpid(),
            "url": url,
            "token": token,
            "started_at": datetime.now(UTC).isoformat(),
        }
    )
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise WarehouseError(f"cannot write the owner file {path}: {exc.strerror or exc}") from exc
    return token


def withdraw_owner(dsn: str, token: str) -> None:
    """Remove the owner file of ``dsn`` if it still announces ``token`` (a successor's file
    is left alone). Never raises."""
    path = owner_file(dsn)
    if path is None:
        return
    info = _read_owner(path)
    if info is not None and secrets.compare_digest(info.token, token):
        with contextlib.suppress(OSError):
            path.unlink()
