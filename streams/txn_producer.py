"""A transactional producer that survives a broker restart (issue 23 A).

librdkafka 2.16 (confluent-kafka 2.16.1, the newest release) can hang in
``send_offsets_to_transaction`` for ever after a broker restart: when every broker is lost the
producer re-bootstraps and *decommissions* the broker objects it knew, the group coordinator
cached for ``TxnOffsetCommit`` stays the decommissioned one, and the coordinator request is
only retried on a state change of that broker, which never comes (librdkafka issues #5511,
"send_offsets_to_transaction() hangs when the group coordinator is decommissioned", and
#5456, the call's timeout is never checked; both open, fix in PR #5457 unreleased). Seen
here with a single-node KRaft broker: ``Decommissioning 1 broker(s): re-bootstrap`` in the
producer's ``eos,broker`` debug log, then the call never returns, whatever the outage's
length (5 s is enough) and whether a transaction was open or the worker was idle.

A fresh ``Producer`` has no such stale cache, and ``init_transactions`` with the same
``transactional.id`` bumps the producer epoch: the broker aborts the open transaction of the
old producer and fences it (KIP-98), so nothing it still sends can commit. So
:class:`TxnProducer`

- runs each blocking transaction call in a thread of its own and waits for it with its own
  deadline (the call's timeout + :data:`STUCK_GRACE_SECONDS`): an overrun abandons that
  producer (its thread stays inside librdkafka) and raises :class:`ProducerStuck`;
- notes librdkafka's "all brokers down" error (``error_cb``) so the caller can renew the
  producer *before* the next transaction instead of waiting for the hang;
- :meth:`renew` builds a new producer with the same configuration and initialises its
  transactions.

More than ``max_abandoned`` abandoned producers still stuck at once raises
:class:`ProducerStuck` from :meth:`renew` with ``fatal=True``: each holds a thread and its
connections, and the process should rather be restarted.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, Producer
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

from streams.clients import build_producer

log = logging.getLogger("refusal_audit.transactional")

T = TypeVar("T")

#: Seconds a transaction call may overrun its own timeout before its producer is abandoned.
STUCK_GRACE_SECONDS = 15.0


class ProducerStuck(RuntimeError):
    """A transaction call did not return within its allowance; its producer was abandoned
    (``fatal``: too many abandoned producers are still stuck to build another)."""

    def __init__(self, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


class TxnProducer:
    """The current transactional ``Producer`` of one ``transactional.id`` (module docstring).

    ``conf`` is the librdkafka configuration (with ``transactional.id``); ``init_timeout``
    the seconds ``init_transactions`` may take. The constructor initialises a first producer
    and raises ``KafkaException`` when it cannot (or :class:`ProducerStuck`). Calls are made
    from one thread (the stream's); each blocking one runs in a daemon thread of its own.
    """

    def __init__(
        self,
        conf: dict[str, Any],
        init_timeout: float,
        max_abandoned: int = 8,
        start_within: float = 0.0,
    ):
        self._conf = dict(conf)
        self.init_timeout = init_timeout
        self.max_abandoned = max_abandoned
        self.brokers_lost = False  # librdkafka reported every broker down since the last renew
        self.renewals = 0
        self._abandoned: list[tuple[Producer, concurrent.futures.Future[Any]]] = []
        self._pending: Producer | None = None  # built, its init_transactions not done yet
        self.init_abandoned = 0  # abandoned inside init_transactions: may fence a later one
        self.producer = self._first(start_within)

    def _first(self, start_within: float) -> Producer:
        """The first producer, its transactions initialised; a broker that does not answer
        in time (a timeout, a transport error: it may be starting) is waited for, again
        after 1 s doubling to 30 s, for up to ``start_within`` seconds; then, or for any
        other error, ``KafkaException`` is raised."""
        for attempt in Retrying(
            retry=retry_if_exception(_broker_away),
            wait=wait_exponential(multiplier=1, max=30),
            stop=stop_after_delay(start_within),
            before_sleep=_log_wait,
            reraise=True,
        ):
            with attempt:
                return self._initialised()
        raise AssertionError("unreachable: Retrying reraises")  # pragma: no cover

    def _on_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self.brokers_lost = True

    def _initialised(self) -> Producer:
        # a producer whose init_transactions timed out goes on acquiring its producer id in
        # the background (librdkafka): call init again on it, never build a second one that
        # the first would fence when the broker is back
        producer = self._pending or build_producer({**self._conf, "error_cb": self._on_error})
        self._pending = producer
        timeout = self.init_timeout
        self._guarded(producer, "init_transactions", lambda p: p.init_transactions(timeout),
                      timeout)  # fmt: skip
        self._pending = None
        return producer

    def _guarded(
        self, producer: Producer, what: str, fn: Callable[[Producer], T], timeout: float
    ) -> T:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn(producer))
            except BaseException as exc:  # handed to the waiting thread
                future.set_exception(exc)

        threading.Thread(target=run, name=f"txn-{what}", daemon=True).start()
        allowance = timeout + STUCK_GRACE_SECONDS
        try:
            return future.result(allowance)
        except concurrent.futures.TimeoutError:
            self._abandoned.append((producer, future))
            if producer is self._pending:
                self._pending, self.init_abandoned = None, self.init_abandoned + 1
            log.error("%s has not returned after %.0f s (librdkafka #5456/#5511): producer "
                      "abandoned", what, allowance)  # fmt: skip
            raise ProducerStuck(f"{what} has not returned after {allowance:.0f} s") from None

    def call(self, what: str, fn: Callable[[Producer], T], timeout: float) -> T:
        """``fn(producer)`` on the current producer, waited for at most ``timeout`` +
        :data:`STUCK_GRACE_SECONDS` seconds; raises what ``fn`` raises, or
        :class:`ProducerStuck` (the producer is abandoned: :meth:`renew` before going on)."""
        return self._guarded(self.producer, what, fn, timeout)

    def poll(self, timeout: float = 0.0) -> None:
        """Serve the current producer's callbacks (delivery reports, errors)."""
        self.producer.poll(timeout)

    def renew(self, why: str) -> None:
        """Replace the producer by a new one with the same ``transactional.id`` and
        initialise its transactions: the old producer is fenced and its open transaction
        aborted by the broker. Raises ``KafkaException`` (for instance a timeout while the
        broker is still away: call again) or :class:`ProducerStuck` (``fatal`` when more than
        ``max_abandoned`` abandoned producers are still stuck)."""
        self._abandoned = [(p, f) for p, f in self._abandoned if not f.done()]
        if len(self._abandoned) > self.max_abandoned:
            raise ProducerStuck(
                f"{len(self._abandoned)} abandoned producers are still stuck in librdkafka",
                fatal=True,
            )
        log.warning("renewing the transactional producer: %s", why)
        self.producer = self._initialised()
        # errors of the broker still away during init: that producer never cached a group
        # coordinator, so there is nothing stale to renew
        self.producer.poll(0)
        self.brokers_lost = False
        self.renewals += 1

    def stuck(self) -> int:
        """How many abandoned producers are still inside a librdkafka call."""
        return sum(1 for _p, f in self._abandoned if not f.done())

    def flush(self, timeout: float) -> int:
        """Flush the current producer (on close); messages still queued."""
        return int(self.producer.flush(timeout))


def _broker_away(exc: BaseException) -> bool:
    """A ``KafkaException`` that says the broker did not answer (worth waiting for)."""
    if not isinstance(exc, KafkaException) or not exc.args:
        return False
    err = exc.args[0]
    away = (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
            KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
            KafkaError.COORDINATOR_LOAD_IN_PROGRESS)  # fmt: skip
    return isinstance(err, KafkaError) and (err.code() in away or bool(err.retriable()))


def _log_wait(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome is not None else None
    log.warning("the broker has not initialised this producer's transactions yet (%s); "
                "again in %.0f s", exc,
                state.next_action.sleep if state.next_action else 0.0)  # fmt: skip
