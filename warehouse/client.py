"""The warehouse client's shared definitions: the ``Client`` type, ``WarehouseError``, identifier
checks and quoting, DSN redaction, ``ping`` and the SQL text helpers the rest of the package
shares. Opening a warehouse is :mod:`warehouse.connect`.

``warehouse.connect.connect`` takes a DSN: ``chdb:///abs/path`` (or ``chdb://memory``) gives an
in-process chDB engine, ``http(s)://user@host:8123`` a ClickHouse server; everything else in
this package (DDL, inserts, queries) is the same for both. All calls block: run them off the
event loop.

chDB hosts ONE data path per process; connecting to a second path raises ``WarehouseError``. And
one process at a time may open a data path: while another process owns it and serves the owner
channel (the stream worker does, see ``warehouse.remote``), ``connect`` returns a client that
reaches the store through that owner instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from clickhouse_connect.driver.client import Client

__all__ = [
    "Client",
    "SqlStatement",
    "WarehouseError",
    "ping",
    "quote_identifier",
    "redact_dsn",
    "split_sql",
    "validate_identifier",
]


_IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_HEREDOC_RE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")


class WarehouseError(RuntimeError):
    """Any failure talking to the warehouse: connecting, migrating, inserting or querying.

    The underlying driver exception, when there is one, is chained as ``__cause__``.
    """


def validate_identifier(name: str) -> str:
    """Return ``name`` if it is a plain ClickHouse identifier (``[A-Za-z_][A-Za-z0-9_]*``).

    Database names are interpolated into DDL, so anything else is refused.
    Raises ``WarehouseError`` otherwise.
    """
    if not _IDENTIFIER_RE.match(name):
        raise WarehouseError(
            f"invalid database name {name!r}: use letters, digits and '_' (not first a digit)"
        )
    return name


def quote_identifier(name: str) -> str:
    """Validate ``name`` (see ``validate_identifier``) and return it back-quoted for DDL."""
    return f"`{validate_identifier(name)}`"


def redact_dsn(dsn: str) -> str:
    """The DSN with any password replaced by ``***`` (safe for messages and logs)."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "<unparseable dsn>"
    if parts.password is None:
        return dsn
    netloc = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def ping(client: Client) -> None:
    """Run ``SELECT 1`` on ``client``: returns when the warehouse answers, raises what the
    client raises (``ClickHouseError``, ``OSError``, ...) when it does not."""
    client.query("SELECT 1")


@dataclass(frozen=True)
class SqlStatement:
    """One statement of a SQL text, as ``split_sql`` found it.

    ``text``: the statement with comments replaced by a space, literals verbatim, stripped,
    without the ``;``; this is what should be sent to the server. ``skeleton``: the same
    with string literals replaced by ``''`` and quoted identifiers by ``_q_`` (for keyword
    checks that must not look inside literals).
    """

    text: str
    skeleton: str


def _quoted_end(sql: str, start: int) -> int:
    """Index just past the quoted token opening at ``start`` (``'``, ``"`` or backquote)."""
    quote = sql[start]
    i = start + 1
    n = len(sql)
    while i < n:
        ch = sql[i]
        if ch == "\\":
            i += 2
            continue
        if ch == quote:
            if i + 1 < n and sql[i + 1] == quote:  # doubled quote: an escaped quote
                i += 2
                continue
            return i + 1
        i += 1
    raise ValueError(f"unterminated quoted text starting at offset {start}")


def _block_comment_end(sql: str, start: int) -> int:
    """Index just past the (possibly nested) ``/* ... */`` comment opening at ``start``."""
    depth = 0
    i = start
    n = len(sql)
    while i < n:
        if sql.startswith("/*", i):
            depth += 1
            i += 2
        elif sql.startswith("*/", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    raise ValueError(f"unterminated /* comment starting at offset {start}")


def split_sql(sql: str) -> list[SqlStatement]:
    """Split SQL text into statements at ``;`` outside literals and comments.

    Understands ClickHouse's lexical forms: ``'strings'``, ``"identifiers"`` and backquoted
    identifiers (backslash escapes and doubled quotes), ``$tag$heredocs$tag$``, ``--`` and
    ``#`` line comments and nested ``/* */`` comments. Comments are removed from the returned
    statements (so what is sent is exactly what was checked); empty statements are dropped.

    Raises ``ValueError`` for an unterminated literal or comment.
    """
    statements: list[SqlStatement] = []
    text: list[str] = []
    skel: list[str] = []
    i = 0
    n = len(sql)

    def flush() -> None:
        stmt = "".join(text).strip()
        if stmt:
            statements.append(SqlStatement(text=stmt, skeleton="".join(skel).strip()))
        text.clear()
        skel.clear()

    while i < n:
        ch = sql[i]
        if ch in "'\"`":
            end = _quoted_end(sql, i)
            text.append(sql[i:end])
            skel.append("''" if ch == "'" else " _q_ ")
            i = end
        elif sql.startswith("--", i) or ch == "#":
            end = sql.find("\n", i)
            i = n if end < 0 else end
            text.append(" ")
            skel.append(" ")
        elif sql.startswith("/*", i):
            i = _block_comment_end(sql, i)
            text.append(" ")
            skel.append(" ")
        elif (
            ch == "$"
            and (i == 0 or sql[i - 1] not in _WORD_CHARS)
            and (heredoc := _HEREDOC_RE.match(sql, i))
        ):
            tag = heredoc.group(0)
            close = sql.find(tag, heredoc.end())
            if close < 0:
                raise ValueError(f"unterminated heredoc {tag} starting at offset {i}")
            end = close + len(tag)
            text.append(sql[i:end])
            skel.append("''")
            i = end
        elif ch == ";":
            flush()
            i += 1
        else:
            text.append(ch)
            skel.append(ch)
            i += 1
    flush()
    return statements
