"""A minimal owner of an embedded store, served with Starlette/uvicorn (tests only).

``python tests/owner_server.py DSN DATABASE`` opens the chDB path of ``DSN`` in this
process (``DATABASE`` migrated), serves the owner channel on 127.0.0.1 (a free port) with
``warehouse.remote.server.serve_request``/``check_bearer`` on a second client (as the worker
does), announces itself in the owner file and prints ``READY <url>``. SIGTERM/SIGINT stop
it and withdraw the file; SIGKILL leaves a stale one.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from warehouse.connect import connect
from warehouse.migrate import migrate
from warehouse.remote.discovery import new_token, publish_owner, withdraw_owner
from warehouse.remote.server import OWNER_PATH, check_bearer, serve_request


def main(dsn: str, database: str) -> None:
    store = connect(dsn, database, via_owner=False)
    migrate(store, database)
    channel = connect(dsn, database, via_owner=False)
    token = new_token()

    async def endpoint(request: Request) -> Response:
        if not check_bearer(request.headers.get("authorization"), token):
            return Response(b'{"error": {"class": "InterfaceError", "message": "token"}}', 401)
        status, body = await run_in_threadpool(serve_request, channel, await request.body())
        return Response(body, status, media_type="application/json")

    app = Starlette(routes=[Route(OWNER_PATH, endpoint, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}{OWNER_PATH}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))

    def announce() -> None:
        while not server.started:
            time.sleep(0.05)
        publish_owner(dsn, url, token)
        print(f"READY {url}", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    # uvicorn re-raises the signal that stopped it once it has shut down: exit cleanly then
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.run(sockets=[sock])
    finally:
        withdraw_owner(dsn, token)
        channel.close()
        store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
