"""The worker's side of the owner channel (``warehouse.remote``).

A worker whose warehouse is an embedded chDB path holds that store's lock for as long as it
runs. So that the CLI keeps working meanwhile, it serves the store on its web server
(``POST /_owner/warehouse``) through a second client of its own on the same path (channel
requests never share the pipeline's client), and announces itself in the store's owner
file once the web server answers; the file is withdrawn on shutdown (a crash leaves a file
whose process is gone, which readers ignore).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from refusal_audit.config import Settings
from warehouse.client import Client, WarehouseError
from warehouse.connect import connect
from warehouse.follow import FollowingClient
from warehouse.remote.discovery import new_token, owner_file, publish_owner, withdraw_owner
from warehouse.remote.server import OWNER_PATH, check_bearer, serve_request
from warehouse.store import Warehouse

__all__ = [
    "MAX_REQUEST_BYTES",
    "OwnerChannel",
    "OwnerServer",
    "OwnerSlot",
    "channel_url",
    "owner_routes",
]

log = logging.getLogger("refusal_audit.worker")

#: Largest channel request the worker's web server accepts (an insert of a whole audit run).
MAX_REQUEST_BYTES = 512 * 1024 * 1024

UNAUTHORIZED = orjson.dumps(
    {"error": {"class": "InterfaceError", "message": "missing or wrong bearer token",
               "code": None, "name": None}}
)  # fmt: skip


PROBE_QUERY = "?listening-probe"
"""Query string of the request by which a server checks that its own channel listens."""


class _ProbeFilter(logging.Filter):
    """Drops uvicorn access-log records of the channel's own listening probe."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        path = args[2] if isinstance(args, tuple) and len(args) > 2 else None
        return path != OWNER_PATH + PROBE_QUERY


def quiet_probes() -> None:
    """Leave the listening probe out of uvicorn's access log (idempotent)."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, _ProbeFilter) for f in access.filters):
        access.addFilter(_ProbeFilter())


def channel_url(host: str, port: int) -> str:
    """The channel's URL on a web server bound to ``host:port`` (a wildcard address is
    reached on loopback, ``127.0.0.1``)."""
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:  # a host name
        pass
    return f"http://{host}:{port}{OWNER_PATH}"


class OwnerChannel:
    """Serves the embedded store at ``dsn`` to other processes with ``client`` (opened in
    this process, not the pipeline's) at ``url``.

    ``handle`` answers one request; ``publish_when_listening`` announces the channel in the
    owner file once ``url`` answers; ``close`` withdraws the file and closes the client.
    """

    def __init__(self, dsn: str, client: Client, url: str) -> None:
        self.dsn = dsn
        self.client = client
        self.url = url
        self.token: str | None = None  # set when the channel is announced
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="owner-channel")
        self._stop = threading.Event()
        self._publisher: threading.Thread | None = None

    @classmethod
    def open(
        cls, cfg: Settings, host: str | None = None, port: int | None = None
    ) -> OwnerChannel | None:
        """The channel of ``cfg``'s warehouse on the web server at ``host:port`` (default:
        the worker's, ``worker_web_host:worker_web_port``), or None when the warehouse is not
        an embedded path (a server or in-memory store needs none) or the port is 0 (unknown
        in advance).

        Call after this process opened the store itself. Raises ``WarehouseError``.
        """
        dsn = cfg.resolved_warehouse_dsn
        if owner_file(dsn) is None:
            return None
        host = cfg.worker_web_host if host is None else host
        port = cfg.worker_web_port if port is None else port
        if port == 0:
            log.warning("web port 0: other commands cannot reach the embedded store")
            return None
        client = connect(dsn, cfg.warehouse_database, via_owner=False)
        return cls(dsn, client, channel_url(host, port))

    async def handle(self, authorization: str | None, body: bytes) -> tuple[int, bytes]:
        """Answer one request (``Authorization`` header value, body): ``(status, JSON)``.

        401 until the channel is announced or for a wrong token; otherwise
        ``warehouse.remote.server.serve_request`` run in this channel's threads.
        """
        token = self.token
        if token is None or not check_bearer(authorization, token):
            return 401, UNAUTHORIZED
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, serve_request, self.client, body)

    def publish_when_listening(self, timeout: float = 600.0) -> None:
        """In a daemon thread: wait until ``url`` answers (at most ``timeout`` seconds), then
        write the owner file. Returns at once. The probe (``url`` + ``PROBE_QUERY``, answered
        401 as it carries no token) is left out of uvicorn's access log (``quiet_probes``):
        a "401 Unauthorized" line at every start reads as an error."""
        quiet_probes()

        def run() -> None:
            with httpx.Client(timeout=2.0, trust_env=False) as http:
                waited = 0.0
                while not self._stop.is_set() and waited < timeout:
                    try:
                        if http.post(self.url + PROBE_QUERY, content=b"").status_code == 401:
                            break
                    except httpx.HTTPError:
                        pass
                    self._stop.wait(0.2)
                    waited += 0.2
                else:
                    if not self._stop.is_set():
                        log.warning("web server not up: the embedded store is not announced")
                    return
            self.publish()

        self._publisher = threading.Thread(target=run, name="owner-publisher", daemon=True)
        self._publisher.start()

    def publish(self) -> None:
        """Write the owner file now (a new token). Logs, and does not raise, on failure."""
        self.token = new_token()  # accepted before anyone can read it
        try:
            publish_owner(self.dsn, self.url, self.token)
        except WarehouseError as exc:
            log.warning("cannot announce the embedded store to other commands: %s", exc)
            return
        log.info("embedded store announced", extra={"owner_url": self.url})

    def close(self) -> None:
        """Withdraw the owner file, stop serving and close the client. Never raises."""
        self._stop.set()
        if self._publisher is not None:
            self._publisher.join(5.0)
        token, self.token = self.token, None
        if token is not None:
            withdraw_owner(self.dsn, token)
        self._executor.shutdown(wait=True, cancel_futures=True)
        try:
            self.client.close()
        except Exception as exc:  # closing must not hide the exit reason
            log.warning("closing the owner channel's client failed: %r", exc)


_NOT_OWNER = orjson.dumps(
    {"error": {"class": "OperationalError", "message": "this process does not own the store",
               "code": None, "name": None}}
)  # fmt: skip


class OwnerSlot:
    """The owner channel of a long-running process (the worker, the review server) on an
    embedded store: served from the start when the process opened the store itself, or from
    the moment it takes the store over from an owner that went away
    (``warehouse.follow.FollowingClient.on_owned``); until then requests get 503.

    ``host``/``port``: the process's web server, where the channel is served.
    """

    def __init__(self, cfg: Settings, host: str, port: int) -> None:
        self.cfg = cfg
        self.host = host
        self.port = port
        self.channel: OwnerChannel | None = None

    @classmethod
    def attach(cls, cfg: Settings, client: object, host: str, port: int) -> OwnerSlot | None:
        """The slot for ``cfg``'s warehouse opened as ``client``; None for a server or
        in-memory store. Raises ``WarehouseError``."""
        if owner_file(cfg.resolved_warehouse_dsn) is None:
            return None
        slot = cls(cfg, host, port)
        if isinstance(client, FollowingClient) and not client.owned:
            client.on_owned = slot.take_over
        else:
            slot.channel = OwnerChannel.open(cfg, host, port)
        return slot

    @property
    def owns(self) -> bool:
        """Whether this process serves the store now."""
        return self.channel is not None

    def announce_when_listening(self) -> None:
        """Announce the channel once the web server answers (when this process owns)."""
        if self.channel is not None:
            self.channel.publish_when_listening()

    def take_over(self) -> None:
        """Serve and announce the channel now (the web server is listening). Raises
        ``WarehouseError``."""
        channel = OwnerChannel.open(self.cfg, self.host, self.port)
        if channel is not None:
            self.channel = channel
            channel.publish()

    def authorized(self, authorization: str | None) -> bool:
        """Whether ``authorization`` carries the channel's token (check before reading a
        request body)."""
        channel = self.channel
        token = channel.token if channel is not None else None
        return token is not None and check_bearer(authorization, token)

    async def handle(self, authorization: str | None, body: bytes) -> tuple[int, bytes]:
        """``OwnerChannel.handle``, or 503 while this process does not own the store."""
        channel = self.channel
        if channel is None:
            return 503, _NOT_OWNER
        return await channel.handle(authorization, body)

    def close(self) -> None:
        """Withdraw and close the channel, if any. Never raises."""
        if self.channel is not None:
            self.channel.close()


class OwnerServer:
    """Serves an embedded store this process owns (or takes over) to the other commands: the
    owner channel (:class:`OwnerSlot`) on a loopback HTTP server of its own, port
    ``port`` (0: any free port; the owner file names it). :meth:`start` returns None for a
    ClickHouse server or in-memory store."""

    def __init__(self, slot: OwnerSlot, httpd: ThreadingHTTPServer) -> None:
        self.slot = slot
        self.httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="owner-channel-http",
            daemon=True,
        )  # fmt: skip

    @classmethod
    def start(cls, cfg: Settings, store: Warehouse, port: int = 0) -> OwnerServer | None:
        """Bind, serve and announce (once listening). Raises ``WarehouseError``,
        ``OSError`` (the port is taken)."""
        holder: list[OwnerSlot] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                log.debug("owner channel: " + format, *args)

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                slot = holder[0]
                if urlsplit(self.path).path != OWNER_PATH:
                    self._answer(404, b'{"error": {"message": "not found"}}')
                    return
                authorization = self.headers.get("Authorization")
                if not slot.owns:
                    self._answer(*asyncio.run(slot.handle(authorization, b"")))
                    return
                if not slot.authorized(authorization):  # before reading any of the body
                    self._answer(401, UNAUTHORIZED)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_REQUEST_BYTES:
                    self._answer(413, b'{"error": {"message": "request too large"}}')
                    return
                body = self.rfile.read(length)
                self._answer(*asyncio.run(slot.handle(authorization, body)))

        httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        httpd.daemon_threads = True
        bound = int(httpd.server_address[1])
        try:
            slot = OwnerSlot.attach(cfg, store.client, "127.0.0.1", bound)
        except BaseException:
            httpd.server_close()
            raise
        if slot is None:
            httpd.server_close()
            return None
        holder.append(slot)
        server = cls(slot, httpd)
        server._thread.start()
        slot.announce_when_listening()
        log.info("owner channel of the embedded store on 127.0.0.1:%d", bound)
        return server

    def close(self) -> None:
        """Withdraw the owner file, stop serving. Never raises."""
        self.slot.close()
        self.httpd.shutdown()
        self.httpd.server_close()


def owner_routes(cfg: Settings, store: Warehouse) -> tuple[list[Route], OwnerSlot | None]:
    """The owner channel's route (``POST /_owner/warehouse``) for a Starlette app on an
    embedded store (an ``OwnerSlot`` at ``cfg.review_web_host:review_web_port``): served
    when this process owns the store, or from the moment it takes the store over from an
    owner that went away (e.g. a worker that stopped); no route for a server DSN. Raises
    ``WarehouseError``."""
    slot = OwnerSlot.attach(cfg, store.client, cfg.review_web_host, cfg.review_web_port)
    if slot is None:
        return [], None

    async def endpoint(request: Request) -> Response:
        authorization = request.headers.get("authorization")
        if not slot.owns:
            status, body = await slot.handle(authorization, b"")
            return Response(body, status, media_type="application/json")
        if not slot.authorized(authorization):  # before reading any of the body
            return Response(UNAUTHORIZED, 401, media_type="application/json")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_REQUEST_BYTES:
                return Response(b'{"error": {"message": "request too large"}}', 413)
            chunks.append(chunk)
        status, body = await slot.handle(authorization, b"".join(chunks))
        return Response(body, status, media_type="application/json")

    return [Route(OWNER_PATH, endpoint, methods=["POST"])], slot
