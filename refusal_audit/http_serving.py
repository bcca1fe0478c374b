"""Serving the project's HTTP apps (``review serve``, ``clarify serve``; ``llm serve`` binds
its socket here too) with uvicorn, bounded against slow and greedy clients; shared by the
review, clarification and llm rooms.

Listen first, then say so (``bind_listener``): the servers' listening socket is bound before
anything prints that they are up, so a port already in use is one clear error
(``ListenError``) and no "listening" line.

uvicorn alone keeps a connection that sends half a request header open forever and has no
cap per client address, so one client could hold every file descriptor of the process and
stop the server (issue 23: 19,950 such sockets; ``/healthz`` timed out for 40 s and the log
filled with "Too many open files" tracebacks). ``guarded_protocol`` wraps uvicorn's h11
protocol with:

* a header deadline (the request line and headers must arrive within
  ``http_header_timeout_seconds`` of the connection opening or of the previous response)
  and a body deadline (``http_body_timeout_seconds`` from the end of the headers to the end
  of the body); past either the connection is closed;
* at most ``http_max_connections_per_client`` open connections per peer address and
  ``http_max_connections`` in all (the latter also at most half the process's open-file
  limit): a connection over either cap is answered 503 and closed at once;
* uvicorn's own keep-alive timeout (``http_keep_alive_seconds``) and header size cap
  (h11, 16 KiB), and a listen backlog of at most a quarter of the open-file limit (the
  event loop accepts up to that many connections at once, before any is checked).

Repeated log records of the event loop and of uvicorn (e.g. accept errors) are folded to
one line per interval with a count (``streams.logs.RepeatFilter``, as the worker does).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
from collections import Counter
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from refusal_audit.config import Settings
from streams.logs import RepeatFilter

__all__ = [
    "ConnectionCount",
    "HttpLimits",
    "ListenError",
    "bind_listener",
    "bounded_config",
    "fold_repeated_logs",
    "guarded_protocol",
    "serve_bounded",
]

log = logging.getLogger("refusal_audit.web")
#: loggers whose repeated records are folded
FOLDED_LOGGERS = ("asyncio", "uvicorn.error")
_BUSY_TEXT = b"too many connections, try again later\n"
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_BUSY_TEXT), _BUSY_TEXT)
)


class ListenError(OSError):
    """The address cannot be listened on (port in use, address not local, no permission)."""


def bind_listener(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening (IPv4 or IPv6 by ``host``) with a
    listen queue of ``backlog`` connections (``HttpLimits.backlog``).

    Raises ``ListenError`` naming the address and the reason (e.g. "Address already in use").
    """
    try:
        return socket.create_server((host, port), backlog=backlog)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ListenError(exc.errno, f"cannot listen on {host}:{port}: {reason}") from exc


@dataclass(frozen=True)
class HttpLimits:
    """The bounds ``guarded_protocol`` enforces: seconds for the header and body
    deadlines and the keep-alive wait, connection counts in all and per peer address."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive: float = 5.0
    max_connections: int = 1000
    max_connections_per_client: int = 100
    #: the listen queue, also the most connections the event loop accepts in one go (each
    #: holds a file descriptor until the cap check closes it): at most a quarter of the
    #: open-file limit, so a burst cannot exhaust it
    backlog: int = 2048

    @classmethod
    def from_settings(cls, cfg: Settings) -> HttpLimits:
        """The ``http_*`` settings; ``max_connections`` lowered to half the process's
        open-file limit (the rest stays for the store, logs and Kafka)."""
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        total, backlog = cfg.http_max_connections, cls.backlog
        if soft != resource.RLIM_INFINITY:
            backlog = min(backlog, max(16, soft // 4))
            if total > soft // 2:
                total = max(1, soft // 2)
                log.info("http: at most %d connections (half the open-file limit %d)",
                         total, soft)  # fmt: skip
        return cls(
            header_timeout=cfg.http_header_timeout_seconds,
            body_timeout=cfg.http_body_timeout_seconds,
            keep_alive=cfg.http_keep_alive_seconds,
            max_connections=total,
            max_connections_per_client=min(cfg.http_max_connections_per_client, total),
            backlog=backlog,
        )


class ConnectionCount:
    """Open connections in all and per peer address (used from the event loop only)."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self.total = 0
        self.per_client: Counter[str] = Counter()

    def admit(self, client: str) -> bool:
        """Count a new connection from ``client``; False (nothing counted) over a cap."""
        if (
            self.total >= self.limits.max_connections
            or self.per_client[client] >= self.limits.max_connections_per_client
        ):
            return False
        self.total += 1
        self.per_client[client] += 1
        return True

    def release(self, client: str) -> None:
        """A connection counted by ``admit`` closed."""
        self.total -= 1
        self.per_client[client] -= 1
        if self.per_client[client] <= 0:
            del self.per_client[client]


def guarded_protocol(limits: HttpLimits) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol class with ``limits`` enforced (one ``ConnectionCount``
    shared by the connections of the returned class); pass it as ``uvicorn.Config(http=)``."""
    count = ConnectionCount(limits)
    deadlines = {"header": limits.header_timeout, "body": limits.body_timeout}

    class GuardedH11Protocol(H11Protocol):
        _peer: str | None = None  # set when admitted
        _phase: str | None = None
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            peer = transport.get_extra_info("peername")
            client = str(peer[0]) if isinstance(peer, tuple) and peer else ""
            if not count.admit(client):
                log.warning("http: connection refused: too many connections (from %s)", client)
                transport.write(_BUSY)  # type: ignore[attr-defined]
                transport.close()
                return
            self._peer = client
            super().connection_made(transport)  # type: ignore[arg-type]
            self._follow()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._peer is None:
                return
            count.release(self._peer)
            self._peer = None
            self._set_phase(None)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._follow()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._follow()

        def _follow(self) -> None:
            """Arm the deadline of the part of the request being read."""
            if self.transport.is_closing():
                self._set_phase(None)
                return
            state = self.conn.their_state
            self._set_phase(
                "header" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
            )

        def _set_phase(self, phase: str | None) -> None:
            if phase == self._phase:
                return
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            self._phase = phase
            if phase is not None:
                self._deadline = self.loop.call_later(deadlines[phase], self._expired)

        def _expired(self) -> None:
            log.debug("http: %s not read in time from %s; closing", self._phase, self._peer)
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol


def fold_repeated_logs(interval_seconds: float = 30.0) -> None:
    """Fold repeated records of ``FOLDED_LOGGERS`` (accept errors, refused connections) to
    one per ``interval_seconds`` with a count; idempotent."""
    for name in (*FOLDED_LOGGERS, log.name):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RepeatFilter) for f in logger.filters):
            logger.addFilter(RepeatFilter(interval_seconds, prefixes=None))


def bounded_config(app: Any, host: str, port: int, limits: HttpLimits) -> uvicorn.Config:
    """The uvicorn config of the project's servers: ``limits`` enforced, no ``Server``
    header, proxy headers off (each app decides whom to believe)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info",
        server_header=False,
        proxy_headers=False,
        http=guarded_protocol(limits),
        timeout_keep_alive=max(1, round(limits.keep_alive)),
        backlog=limits.backlog,
    )


def serve_bounded(
    app: Any, listener: socket.socket, host: str, port: int, limits: HttpLimits
) -> None:
    """Serve ``app`` on the already bound ``listener`` (``bind_listener``, with
    ``limits.backlog``) until stopped, with ``limits`` enforced and repeated log lines
    folded; ``host``/``port`` only name the address in uvicorn's log. Closes ``listener``.
    Ctrl-C ends it normally, as with ``uvicorn.run``. Raises ``SystemExit(3)`` when the app
    fails to start, as ``uvicorn.run`` does."""
    config = bounded_config(app, host, port, limits)
    fold_repeated_logs()  # after uvicorn configured its loggers (Config does it)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[listener])
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled; uvicorn.run swallows it
        pass
    finally:
        listener.close()
    if not server.started:
        raise SystemExit(3)
