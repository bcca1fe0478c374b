"""The other processes' side of the channel: ``RemoteClient``, a driver client over HTTP."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson
from clickhouse_connect.datatypes.registry import get_from_name
from clickhouse_connect.driver.exceptions import (
    ClickHouseError,
    DatabaseError,
    Error,
    InterfaceError,
    OperationalError,
    ProgrammingError,
)
from clickhouse_connect.driver.query import QueryResult
from clickhouse_connect.driver.summary import QuerySummary

from warehouse.remote.codec import ERROR_CLASSES, CodecError, decode_value, dumps, encode_value

if TYPE_CHECKING:  # httpx is imported where a client is made: a process that never reaches an
    import httpx  # owner (a topics worker) never loads it

__all__ = ["CONNECT_TIMEOUT", "DEFAULT_TIMEOUT", "RemoteClient", "RemoteInsertContext"]

#: Default read timeout of a remote call (seconds); connecting is given ``CONNECT_TIMEOUT``.
DEFAULT_TIMEOUT = 300.0
CONNECT_TIMEOUT = 5.0

_JSON = "application/json"


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
    cls = ERROR_CLASSES.get(cls_name)
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
    ignored); ``insert_arrow`` takes ``table``, a ``pyarrow.Table``, ``database`` and
    ``settings``; ``create_insert_context`` returns a ``RemoteInsertContext``. ``database`` is
    the default database, sent with every call, like the driver's attribute.

    Errors are the driver's exception classes: the ClickHouse error as the owner's client
    raised it (same class, message and code); ``OperationalError`` when the owner cannot be
    reached, times out or answers 5xx (transient for ``warehouse.retryable.is_transient``);
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
        import httpx

        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            headers={"Authorization": f"Bearer {token}", "Content-Type": _JSON},
            trust_env=False,  # loopback: never through a proxy from the environment
        )

    def _call(self, op: str, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        if self._closed:
            raise ProgrammingError("The client has been closed")
        try:
            body = dumps({"op": op, "database": self.database, **fields})
        except (CodecError, orjson.JSONEncodeError) as exc:
            raise ProgrammingError(f"cannot send this call to the warehouse owner: {exc}") from exc
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        import httpx

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

    def insert_arrow(
        self,
        table: str,
        arrow_table: Any,
        database: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> QuerySummary:
        """Insert the ``pyarrow.Table`` ``arrow_table`` into ``table`` on the owner (one
        ``INSERT ... FORMAT Arrow`` there, as the driver's ``insert_arrow``); it travels as
        an Arrow IPC stream. See ``clickhouse_connect`` ``Client.insert_arrow``."""
        import pyarrow as pa  # only a columnar writer needs it

        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, arrow_table.schema) as writer:
            writer.write_table(arrow_table)
        out = self._call(
            "insert_arrow",
            table=table,
            arrow=encode_value(sink.getvalue().to_pybytes()),
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
        import httpx

        self._http.close()
        self._http = httpx.Client(
            timeout=self._http.timeout, headers=self._http.headers, trust_env=False
        )
