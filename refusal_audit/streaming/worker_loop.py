"""A long-lived event loop in a thread of its own, on which a worker runs its pipeline.

Shared by the faust worker (``refusal_audit.streaming.worker``) and the transactional worker
(``refusal_audit.streaming.transactional_worker``): intake and the local engine are CPU work that
must
not stall the caller's loop or its polling, and the openai engine's client binds to the
loop it first runs on, so the loop lives as long as the worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger("refusal_audit.worker")

_T = TypeVar("_T")


class PipelineLoop:
    """One long-lived asyncio event loop running in a daemon thread of its own.

    ``run(coro)`` (awaited on another loop, e.g. faust's) runs ``coro`` on this loop and
    returns its result or raises its exception; cancelling the awaiting task cancels
    ``coro``. Coroutines run here one after another or concurrently, like on any loop, and
    may use ``asyncio.to_thread`` (this loop's default executor). ``close`` stops the loop.
    """

    def __init__(self, name: str = "refusal-audit-pipeline") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    @property
    def thread(self) -> threading.Thread:
        """The thread the loop runs in."""
        return self._thread

    def run_sync(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on this loop and wait for its outcome from a thread that runs no
        loop. Raises whatever ``coro`` raises; ``RuntimeError`` when the loop is closed."""
        if not self._thread.is_alive() or self.loop.is_closed():
            coro.close()
            raise RuntimeError("the pipeline loop is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Start ``coro`` on this loop and return its future at once (from any thread):
        ``result()`` waits for it, ``cancel()`` cancels it. Raises ``RuntimeError`` when the
        loop is closed."""
        if not self._thread.is_alive() or self.loop.is_closed():
            coro.close()
            raise RuntimeError("the pipeline loop is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on this loop and await its outcome from the calling loop.

        Raises whatever ``coro`` raises; ``RuntimeError`` when the loop is closed.
        """
        if not self._thread.is_alive() or self.loop.is_closed():
            coro.close()
            raise RuntimeError("the pipeline loop is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return await asyncio.wrap_future(future)

    def close(
        self, finalizer: Callable[[], Awaitable[None]] | None = None, timeout: float = 10.0
    ) -> None:
        """Cancel what still runs on the loop, await ``finalizer()`` there, stop the loop.

        Blocks up to about ``2 * timeout`` seconds; never raises (problems are logged).
        Closing twice is a no-op.
        """
        if not self._thread.is_alive():
            return

        async def shutdown() -> None:
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if finalizer is not None:
                await finalizer()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(timeout)
        except Exception as exc:  # a shutdown problem must not hide the exit reason
            log.warning("pipeline loop shutdown incomplete: %r", exc)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
