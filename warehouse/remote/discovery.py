"""The owner file: how the owner announces itself and how other processes find it.

``<path>.owner.json`` next to the data directory of ``chdb:///<path>`` holds ``{"pid",
"url", "token", "started_at"}``, mode 0600; ``publish_owner``/``withdraw_owner`` write and
remove it, ``find_owner`` reads it back while its process lives.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import orjson

from warehouse.client import WarehouseError
from warehouse.remote.codec import dumps

__all__ = [
    "OwnerInfo",
    "find_owner",
    "new_token",
    "owner_file",
    "publish_owner",
    "withdraw_owner",
]


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
    body = dumps(
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
