"""Listen first, then say so: the servers' listening socket is bound before anything prints
that they are up, so a port already in use is one clear error and no "listening" line."""

from __future__ import annotations

import socket

__all__ = ["ListenError", "bind_listener"]


class ListenError(OSError):
    """The address cannot be listened on (port in use, address not local, no permission)."""


def bind_listener(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening (IPv4 or IPv6 by ``host``) with a
    listen queue of ``backlog`` connections (``serving.HttpLimits.backlog``).

    Raises ``ListenError`` naming the address and the reason (e.g. "Address already in use").
    """
    try:
        return socket.create_server((host, port), backlog=backlog)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ListenError(exc.errno, f"cannot listen on {host}:{port}: {reason}") from exc

