"""Opening the warehouse: ``connect`` turns a DSN into a client bound to a database (an
in-process chDB engine, a ClickHouse server, or the owner channel of an embedded store
another process owns: :mod:`warehouse.remote`, :mod:`warehouse.follow`).

Kept apart from :mod:`warehouse.client` (the shared definitions the owner channel's modules
import) so that the channel's modules and this one do not import each other.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import clickhouse_connect
from clickhouse_connect.driver.exceptions import ClickHouseError

from warehouse.client import (
    Client,
    WarehouseError,
    quote_identifier,
    redact_dsn,
    validate_identifier,
)
from warehouse.follow import FollowingClient
from warehouse.private import make_private_dir
from warehouse.remote.client import RemoteClient
from warehouse.remote.discovery import find_owner

log = logging.getLogger("warehouse.client")


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
    alive and announces the owner channel (``warehouse.remote.discovery.find_owner``), the
    result is a ``warehouse.follow.FollowingClient`` on that owner's channel, typed as
    ``Client``: it implements the subset of ``Client`` this package uses, and follows a new
    owner or takes the store over when the owner goes away. ``via_owner=False`` always opens
    the store in this process (the owner itself does so). If the owner does not answer, the
    store is opened here, which fails while the owner holds chDB's lock.

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
                f"cannot create the embedded warehouse directory {path}: {exc.strerror or exc}"
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
                    return _following(_use_database(remote, dsn, database), dsn, database, password)
            hint = _lock_hint(dsn, via_owner)
        raise WarehouseError(f"cannot open warehouse {redact_dsn(dsn)}{hint}: {exc}") from exc
    return _use_database(client, dsn, database)


def _following(remote: Client, dsn: str, database: str, password: str | None) -> Client:
    """``remote`` (a ``RemoteClient``) wrapped in a ``warehouse.follow.FollowingClient``,
    which follows a new owner or takes the store over when this one goes away."""
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
