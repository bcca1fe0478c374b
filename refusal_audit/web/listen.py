"""Listen first, then say so: the servers' listening socket is bound before anything prints
that they are up, so a port already in use is one clear error and no "listening" line."""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["ListenError", "bind_listener", "serve_uvicorn"]


class ListenError(OSError):
    """The address cannot be listened on (port in use, address not local, no permission)."""


def bind_listener(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening (IPv4 or IPv6 by ``host``).

    Raises ``ListenError`` naming the address and the reason (e.g. "Address already in use").
    """
    try:
        return socket.create_server((host, port), backlog=2048)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ListenError(exc.errno, f"cannot listen on {host}:{port}: {reason}") from exc


def serve_uvicorn(app: Any, listener: socket.socket, **options: Any) -> None:
    """Run ``app`` with uvicorn on the already bound ``listener`` until stopped (what
    ``uvicorn.run`` does, minus the binding). ``options``: ``uvicorn.Config`` keywords
    (``host``/``port`` only name the address in uvicorn's log). Raises ``SystemExit(3)``
    when the app fails to start, as ``uvicorn.run`` does."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, **options))
    try:
        server.run(sockets=[listener])
    finally:
        listener.close()
    if not server.started:
        raise SystemExit(3)
