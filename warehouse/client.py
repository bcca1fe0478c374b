"""Connecting to the warehouse, and the SQL text helpers the rest of the package shares.

``connect`` takes a DSN: ``chdb:///abs/path`` (or ``chdb://memory``) gives an in-process
chDB engine, ``http(s)://user@host:8123`` a ClickHouse server; everything else in this package
(DDL, inserts, queries) is the same for both. All calls block: run them off the event loop.

chDB hosts ONE data path per process; connecting to a second path raises ``WarehouseError``.
And one process at a time may open a data path: while another process owns it and serves
the owner channel (the stream worker does, see ``warehouse.remote``), ``connect`` returns a
client that reaches the store through that owner instead.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from warehouse.private import make_private_dir

__all__ = [
    "Client",
    "SqlStatement",
    "WarehouseError",
    "connect",
    "ping",
    "quote_identifier",
    "redact_dsn",
    "split_sql",
    "validate_identifier",
]

log = logging.getLogger(__name__)

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


def _check_dsn(dsn: str) -> bool:
    """Validate the DSN's shape; return True for a chDB DSN, False for an HTTP(S) one."""
    scheme = dsn.partition(":")[0].lower()
    if scheme == "chdb":
        parts = urlsplit(dsn)
        if parts.netloc and parts.netloc not in ("memory", ":memory:"):
            raise WarehouseError(
                f"chDB DSN {dsn!r} names a relative path; use chdb:///absolute/path (three "
                "slashes) or chdb://memory"
            )
        return True
    if scheme in ("http", "https"):
        return False
    raise WarehouseError(
        f"unsupported warehouse DSN {redact_dsn(dsn)!r}: expected chdb:///abs/path, "
        "http://... or https://..."
    )


def _owner_client(dsn: str) -> Client | None:
    """A client to the live owner of the embedded store at ``dsn`` (see ``warehouse.remote``),
    or None when there is none or it does not answer a ping."""
    from warehouse.remote import RemoteClient, find_owner

    owner = find_owner(dsn)
    if owner is None:
        return None
    remote = RemoteClient(owner.url, owner.token)
    if remote.ping():
        log.debug("warehouse %s: using its owner, process %d, at %s", dsn, owner.pid, owner.url)
        # RemoteClient implements the subset of Client this package uses (query, command,
        # insert, create_insert_context, close, database)
        return cast(Client, remote)
    remote.close()
    log.warning(
        "the owner of %s (process %d, %s) does not answer; opening the store directly",
        dsn,
        owner.pid,
        owner.url,
    )
    return None


def _lock_hint(dsn: str, via_owner: bool) -> str:
    """The hint for a store locked by another process (naming its owner, if announced)."""
    from warehouse.remote import find_owner

    owner = find_owner(dsn) if via_owner else None
    if owner is not None:
        return (
            f" (process {owner.pid} owns this embedded store and serves it at {owner.url}, "
            "but did not answer: it may still be starting, try again in a moment)"
        )
    return (
        " (another process, e.g. a running worker or audit, holds this embedded "
        "store: stop it, or use a ClickHouse server DSN to share the warehouse)"
    )


def connect(
    dsn: str, database: str, password: str | None = None, *, via_owner: bool = True
) -> Client:
    """Open the warehouse at ``dsn`` and return a client bound to ``database``.

    ``dsn`` is ``chdb:///absolute/path`` (embedded, created if missing with mode 0700, and
    the process's umask made private before chDB writes: ``warehouse.private``; an existing
    directory open to others is warned about once), ``chdb://memory``
    or ``http(s)://user@host:port``; ``password`` is used for HTTP(S) when given (it
    overrides one in the DSN) and ignored for chDB. The database is created when missing.
    Datetimes come back timezone-aware (UTC).

    For an embedded path whose owner process (the stream worker or the review server) is
    alive and announces the owner channel (``warehouse.remote.find_owner``), the result is a
    ``warehouse.follow.FollowingClient`` on that owner's channel, typed as ``Client``: it
    implements the subset of ``Client`` this package uses, and follows a new owner or takes
    the store over when the owner goes away. ``via_owner=False`` always opens the store in
    this process (the owner itself does so). If the owner does not answer, the store is
    opened here, which fails while the owner holds chDB's lock.

    Raises ``WarehouseError`` for an invalid DSN or database name, an unreachable server,
    failed authentication, a missing chDB package, a second chDB data path in this
    process, or an embedded store locked by another process.
    """
    validate_identifier(database)
    is_chdb = _check_dsn(dsn)
    is_path = is_chdb and not urlsplit(dsn).netloc
    if is_path and via_owner:
        remote = _owner_client(dsn)
        if remote is not None:
            return _following(_use_database(remote, dsn, database), dsn, database, password)
    kwargs: dict[str, Any] = {"dsn": dsn, "tz_mode": "aware"}
    if is_path:
        # made here, so a path that cannot be a directory fails with one clear line
        # instead of chDB's C++ stack trace
        path = Path(dsn[len("chdb://") :])
        try:  # 0700, and the process's files 0600 from now on (warehouse.private)
            make_private_dir(path, "embedded warehouse directory")
        except OSError as exc:
            raise WarehouseError(
                f"cannot create the embedded warehouse directory {path}: "
                f"{exc.strerror or exc}"
            ) from exc
    if not is_chdb:
        # clickhouse-connect does not derive TLS from an https:// DSN: ask for it explicitly,
        # so credentials never travel in clear text to a server the user meant to be secure.
        secure = dsn.lower().startswith("https:")
        kwargs.update(interface="https" if secure else "http", secure=secure)
        if password is not None:
            kwargs["password"] = password
    try:
        client = clickhouse_connect.get_client(**kwargs)
    except (ClickHouseError, ImportError, OSError, ValueError) as exc:
        hint = ""
        if "already initialized" in str(exc):
            hint = " (chDB allows one data path per process)"
        elif "Cannot lock file" in str(exc) or "Error initializing EmbeddedServer" in str(exc):
            if is_path and via_owner:  # the owner may have announced itself meanwhile
                remote = _owner_client(dsn)
                if remote is not None:
                    return _following(
                        _use_database(remote, dsn, database), dsn, database, password
                    )
            hint = _lock_hint(dsn, via_owner)
        raise WarehouseError(f"cannot open warehouse {redact_dsn(dsn)}{hint}: {exc}") from exc
    return _use_database(client, dsn, database)


def ping(client: Client) -> None:
    """Run ``SELECT 1`` on ``client``: returns when the warehouse answers, raises what the
    client raises (``ClickHouseError``, ``OSError``, ...) when it does not."""
    client.query("SELECT 1")


def _following(remote: Client, dsn: str, database: str, password: str | None) -> Client:
    """``remote`` (a ``RemoteClient``) wrapped in a ``warehouse.follow.FollowingClient``,
    which follows a new owner or takes the store over when this one goes away."""
    from warehouse.follow import FollowingClient
    from warehouse.remote import RemoteClient

    assert isinstance(remote, RemoteClient)
    follower = FollowingClient(
        dsn, remote, lambda: connect(dsn, database, password, via_owner=False)
    )
    # FollowingClient implements the subset of Client this package uses
    return cast(Client, follower)


def _use_database(client: Client, dsn: str, database: str) -> Client:
    """Create ``database`` when missing and make it ``client``'s default; on failure close
    the client and raise ``WarehouseError``."""
    try:
        exists = client.query(
            "SELECT count() FROM system.databases WHERE name = {db:String}",
            parameters={"db": database},
        ).result_rows[0][0]
        if not exists:
            client.command(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(database)}")
        client.database = database
    except (ClickHouseError, OSError) as exc:
        client.close()
        raise WarehouseError(
            f"cannot open database {database!r} on {redact_dsn(dsn)}: {exc}"
        ) from exc
    return client


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
