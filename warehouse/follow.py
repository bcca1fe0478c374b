"""A client of an embedded store that follows whichever process owns it (``warehouse.remote``).

``connect`` returns a ``FollowingClient`` when another process owns the embedded store. It
sends every call to the owner's channel; when a call cannot reach the owner (it stopped,
crashed or restarted with a new token), it reads the owner file again and follows the new
owner, or, when nobody owns the store any more, opens the store in this process and becomes
its owner: ``owned`` turns true and ``on_owned()`` runs once (a long-running process then
serves the channel itself). So a review server started beside the worker keeps working when
the worker restarts or stops, and a worker started beside the review server works through
it, and takes the store over when the review server stops.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from clickhouse_connect.driver.exceptions import InterfaceError, OperationalError

from warehouse.client import Client, WarehouseError
from warehouse.remote.client import RemoteClient
from warehouse.remote.discovery import find_owner

log = logging.getLogger(__name__)

#: How long a follower waits for a new owner to announce itself after losing the old one
#: (another follower may be taking the store over), in seconds.
TAKEOVER_WAIT = 15.0


class FollowingClient:
    """The subset of ``Client`` this package uses (``query``, ``command``, ``insert``,
    ``insert_arrow``, ``create_insert_context``, ``close``, ``database``), on the current
    owner's channel (``remote``) or, after a takeover, on the store opened here.

    ``open_local()`` opens the store in this process (it raises ``WarehouseError`` while
    another process holds it). A call that fails with ``OperationalError`` (owner
    unreachable) or ``InterfaceError`` (token refused) is retried once after following the
    owner again; other errors, and a failure after the retry, propagate as raised. When no
    owner can be found or taken over within ``TAKEOVER_WAIT`` seconds the call raises
    ``OperationalError`` (transient: inserts retry it). Thread-safe.
    """

    def __init__(
        self,
        dsn: str,
        remote: RemoteClient,
        open_local: Callable[[], Client],
        takeover_wait: float = TAKEOVER_WAIT,
    ) -> None:
        self.dsn = dsn
        self.on_owned: Callable[[], None] | None = None
        self.owned = False
        self._current: Any = remote
        self._open_local = open_local
        self._takeover_wait = takeover_wait
        self._lock = threading.Lock()

    @property
    def database(self) -> str | None:
        return self._current.database  # type: ignore[no-any-return]

    @database.setter
    def database(self, value: str | None) -> None:
        self._current.database = value

    @property
    def current(self) -> Any:
        """The client calls go to now (a ``RemoteClient`` or, once owned, the local one)."""
        return self._current

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        current = self._current
        try:
            return getattr(current, name)(*args, **kwargs)
        except (OperationalError, InterfaceError) as exc:
            if not isinstance(current, RemoteClient):
                raise
            if not self._follow(current, exc):
                raise
        return getattr(self._current, name)(*args, **kwargs)

    def query(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("query", *args, **kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("command", *args, **kwargs)

    def insert(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("insert", *args, **kwargs)

    def insert_arrow(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("insert_arrow", *args, **kwargs)

    def create_insert_context(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("create_insert_context", *args, **kwargs)

    def close(self) -> None:
        self._current.close()

    def _follow(self, failed: RemoteClient, error: Exception) -> bool:
        """Move to the store's current owner (or take the store over). True when the call
        should be retried on ``self._current``; False when ``failed`` is still the owner's
        channel (the error was the owner's own). Raises ``OperationalError`` when nobody
        owns the store and it cannot be opened here within the wait."""
        with self._lock:
            if self._current is not failed:  # another thread moved on already
                return True
            deadline = time.monotonic() + self._takeover_wait
            while True:
                owner = find_owner(self.dsn)
                if owner is not None and (owner.url, owner.token) == (failed.url, failed.token):
                    if failed.ping():
                        return False  # the same owner, alive: its error stands
                elif owner is not None:
                    candidate = RemoteClient(owner.url, owner.token, database=failed.database)
                    if candidate.ping():
                        log.info("warehouse %s: now following process %d", self.dsn, owner.pid)
                        self._current = candidate
                        failed.close()
                        return True
                    candidate.close()
                if owner is None:
                    try:
                        local = self._open_local()
                    except WarehouseError as exc:  # locked: someone else is taking over
                        log.debug("taking over %s failed: %s", self.dsn, exc)
                    else:
                        self._become_owner(local, failed)
                        return True
                if time.monotonic() >= deadline:
                    raise OperationalError(
                        f"the owner of the embedded store {self.dsn} is gone and no process "
                        f"took it over within {self._takeover_wait:.0f} s ({error})"
                    ) from error
                time.sleep(0.25)

    def _become_owner(self, local: Client, failed: RemoteClient) -> None:
        local.database = failed.database
        self._current = local
        self.owned = True
        failed.close()
        log.warning("warehouse %s: its owner is gone; this process owns it now", self.dsn)
        if self.on_owned is not None:
            try:
                self.on_owned()
            except Exception:  # the store works; only other processes cannot reach it
                log.exception("announcing the taken-over store failed")
