"""Ask ClickHouse's own parser what a statement is, then apply ``processors.sql_policy``.

Nothing here looks at SQL text with patterns: the statement goes to the warehouse as a
bound string parameter of ``formatQuerySingleLine`` (which parses it, refuses a second
statement and prints it canonically: comments dropped, one line), and the canonical text
goes to ``EXPLAIN AST``, whose tree ``processors.clickhouse_ast`` reads. Both are parse-only:
no table is opened, no table function runs.

- ``checked_user_sql``: the guard of ``refusal-audit sql`` (``warehouse.queries.run_readonly``);
  returns the canonical text, which is what then runs, so the server runs what was checked.
- ``check_owner_statement``: the owner channel's guard for every ``query``/``command`` it
  serves (``warehouse.remote.server.serve_request``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clickhouse_connect.driver.binding import bind_query
from clickhouse_connect.driver.exceptions import ClickHouseError

from processors.clickhouse_ast import AstDumpError, AstNode, parse_ast_dump
from processors.sql_policy import (
    SqlRefused,
    UserSqlContext,
    check_outside_access,
    check_user_statement,
)
from warehouse.client import Client, WarehouseError

__all__ = ["SqlGuardError", "check_owner_statement", "checked_user_sql", "clickhouse_reason"]

#: Longest ad hoc statement accepted (characters).
MAX_SQL_CHARS = 100_000

_READONLY = {"readonly": 1}
_ACCESS_DENIED = 497

#: ClickHouse error codes whose message describes the query, not the data: they are shown
#: in full; any other failure is shown by its code and name only (the message of a failed
#: parse of data can quote the data, e.g. a file's first line).
SAFE_MESSAGE_CODES = frozenset(
    {
        20,  # NUMBER_OF_COLUMNS_DOESNT_MATCH
        36,  # BAD_ARGUMENTS
        42,  # NUMBER_OF_ARGUMENTS_DOESNT_MATCH
        43,  # ILLEGAL_TYPE_OF_ARGUMENT
        46,  # UNKNOWN_FUNCTION
        47,  # UNKNOWN_IDENTIFIER
        53,  # TYPE_MISMATCH
        60,  # UNKNOWN_TABLE
        62,  # SYNTAX_ERROR
        81,  # UNKNOWN_DATABASE
        159,  # TIMEOUT_EXCEEDED
        164,  # READONLY
        179,  # MULTIPLE_EXPRESSIONS_FOR_ALIAS
        184,  # ILLEGAL_AGGREGATION
        215,  # NOT_AN_AGGREGATE
        241,  # MEMORY_LIMIT_EXCEEDED
        352,  # AMBIGUOUS_COLUMN_NAME
        456,  # UNKNOWN_QUERY_PARAMETER
        497,  # ACCESS_DENIED (a server's grants, or the owner channel's check)
    }
)


class SqlGuardError(WarehouseError):
    """A statement the guard refuses (``str``: the reason), or one it cannot parse."""


def clickhouse_reason(exc: ClickHouseError) -> str:
    """A one-line account of a ClickHouse error that never quotes data: the first line of
    the message for the codes of ``SAFE_MESSAGE_CODES``, else only ``Code: N (NAME)``."""
    code = getattr(exc, "code", None)
    name = getattr(exc, "name", None) or _name_from(str(exc))
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if code in SAFE_MESSAGE_CODES and text:
        return text[:500]
    label = f"Code: {code}" if code is not None else "ClickHouse error"
    return f"{label} ({name})" if name else label


def _name_from(message: str) -> str | None:
    tail = message.rstrip().rsplit("(", 1)
    if len(tail) == 2 and tail[1].endswith(")") and tail[1][:-1].replace("_", "").isalnum():
        return tail[1][:-1]
    return None


def _tree(client: Client, canonical: str, parameters: Any = None) -> AstNode:
    # a command, not a query: the driver appends FORMAT (and chDB's also SETTINGS) to a
    # query's text, where they would become part of the statement's tree
    try:
        dump = client.command("EXPLAIN AST\n" + canonical, parameters=parameters)
    except ClickHouseError as exc:
        if getattr(exc, "code", None) == _ACCESS_DENIED:  # the owner channel refused it
            raise SqlGuardError(f"the query is refused: {clickhouse_reason(exc)}") from exc
        raise SqlGuardError(f"cannot parse the query: {clickhouse_reason(exc)}") from exc
    if not isinstance(dump, str):
        raise SqlGuardError("the query is refused: unexpected output from the parser")
    try:
        return parse_ast_dump(dump.split("\n"))
    except AstDumpError as exc:
        raise SqlGuardError(f"the query is refused: {exc}") from exc


def checked_user_sql(client: Client, sql: str) -> str:
    """The canonical single-line text of ``sql`` if ad hoc SQL may run it.

    ``client``: the warehouse client (its database is the warehouse database). Raises
    ``SqlGuardError`` when ``sql`` is empty, longer than ``MAX_SQL_CHARS``, not one
    statement, unparseable, or refused by ``processors.sql_policy.check_user_statement``
    (the message says why), and ``WarehouseError`` when the warehouse cannot be asked.
    """
    if not sql.strip().strip(";").strip():
        raise SqlGuardError("the query is empty")
    if len(sql) > MAX_SQL_CHARS:
        raise SqlGuardError(f"the query is longer than {MAX_SQL_CHARS} characters")
    try:
        row = client.query(
            "SELECT formatQuerySingleLine({q:String}), currentDatabase(), "
            "(SELECT groupArray(name) FROM system.tables WHERE database = currentDatabase())",
            parameters={"q": sql},
            settings=_READONLY,
        ).result_rows[0]
    except ClickHouseError as exc:
        if getattr(exc, "code", None) == 62:  # SYNTAX_ERROR: the user's own text
            raise SqlGuardError(f"cannot parse the query: {clickhouse_reason(exc)}") from exc
        raise WarehouseError(f"cannot check the query: {clickhouse_reason(exc)}") from exc
    canonical, database, tables = str(row[0]), str(row[1]), frozenset(row[2])
    try:
        check_user_statement(
            _tree(client, canonical), canonical, UserSqlContext(database, tables)
        )
    except SqlRefused as exc:
        raise SqlGuardError(str(exc)) from exc
    return canonical


def check_owner_statement(
    client: Client, sql: str, parameters: Sequence[Any] | dict[str, Any] | None = None
) -> None:
    """Refuse a statement the owner channel must not run on anyone's behalf.

    ``sql`` and ``parameters`` as the request gives them (client-side ``%(name)s`` values
    are bound here as the driver binds them, server-side ``{name:Type}`` ones by ClickHouse).
    Raises ``SqlGuardError`` for more than one statement, a statement ClickHouse cannot
    parse, or one that reaches outside the store
    (``processors.sql_policy.check_outside_access``).
    """
    try:
        final, bound = bind_query(sql, parameters)
    except (TypeError, ValueError, KeyError) as exc:
        raise SqlGuardError(f"cannot bind the statement's parameters: {exc}") from exc
    if isinstance(final, bytes):
        raise SqlGuardError("the owner channel does not take binary parameters")
    server_side = (
        {k: v for k, v in parameters.items() if f"param_{k}" in bound}
        if isinstance(parameters, Mapping)
        else {}
    )
    try:
        canonical = str(
            client.query(
                "SELECT formatQuerySingleLine({q:String})",
                parameters={"q": final},
                settings=_READONLY,
            ).result_rows[0][0]
        )
    except ClickHouseError as exc:
        raise SqlGuardError(f"cannot parse the statement: {clickhouse_reason(exc)}") from exc
    try:
        check_outside_access(_tree(client, canonical, server_side or None))
    except SqlRefused as exc:
        raise SqlGuardError(str(exc)) from exc
