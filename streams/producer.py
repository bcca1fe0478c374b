"""confluent-kafka producers: idempotent, acks=all, with delivery reports counted.

Used by the worker (outputs, alerts, dead letters) and by ``refusal-audit produce``.

librdkafka's own log lines (connection failures, idempotence warnings, ...) are routed
through Python logging, logger ``refusal_audit.kafka`` (``KAFKA_LOGGER``), instead of being
written raw to stderr, so they come out in the worker's JSON-lines logs. confluent-kafka
forwards them when the client is polled (``poll``/``flush``), which ``TopicWriter`` does on
every ``send`` and ``confirm``. Repeats are folded to one line per 30 s with a count
(``streams.logs.RepeatFilter``): librdkafka logs a refused connection about 20 times a
second.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from streams.clients import KAFKA_LOGGER, Brokers, producer

Headers = list[tuple[str, str | bytes | None]]

__all__ = [
    "KAFKA_LOGGER",
    "DeliveryError",
    "DeliveryTracker",
    "TopicWriter",
    "make_producer",
    "produce_and_wait",
]


class DeliveryError(RuntimeError):
    """Some messages were not acknowledged by the broker (the message says how many and why).

    The counts cover the messages of the failed ``confirm``: ``delivered`` acknowledged,
    ``failed`` with a failed delivery report, ``unconfirmed`` still queued at the timeout
    (their reports, when they come, are counted by the next ``confirm``).
    """

    def __init__(
        self, message: str, *, delivered: int = 0, failed: int = 0, unconfirmed: int = 0
    ) -> None:
        super().__init__(message)
        self.delivered = delivered
        self.failed = failed
        self.unconfirmed = unconfirmed


def make_producer(brokers: Brokers, **extra: Any) -> Producer:
    """An idempotent producer (``enable.idempotence``, ``acks=all``) for ``brokers`` (a
    ``streams.clients.KafkaConfig`` or a bootstrap string), built by
    ``streams.clients.producer``. ``extra`` overrides librdkafka settings (e.g.
    ``{"linger.ms": 20}``). librdkafka logs go to the ``KAFKA_LOGGER`` Python logger unless
    ``extra`` names another ``logger``.
    """
    return producer(brokers, **extra)


@dataclass
class DeliveryTracker:
    """Counts delivery reports; thread-safe (callbacks run in ``poll``/``flush`` callers)."""

    delivered: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        """confluent-kafka delivery callback."""
        with self._lock:
            if err is None:
                self.delivered += 1
            else:
                self.failed += 1
                if len(self.errors) < 20:
                    self.errors.append(f"{msg.topic()}: {err}")


class TopicWriter:
    """Produce to topics and confirm delivery: ``send`` many, then ``confirm`` once.

    ``confirm`` flushes and raises ``DeliveryError`` if any message sent since the last
    ``confirm`` failed or is still undelivered after ``timeout`` seconds, so a caller can
    acknowledge its input only once every output is on the broker.
    """

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self._tracker = DeliveryTracker()
        self._lock = threading.Lock()

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
    ) -> None:
        """Queue one message (retries on a full local queue by serving callbacks).

        A None ``value`` is sent as a null value (a tombstone).
        """
        while True:
            try:
                self.producer.produce(
                    topic,
                    value=value,
                    key=key,
                    headers=headers,
                    on_delivery=self._tracker.on_delivery,
                )
                break
            except BufferError:
                self.producer.poll(0.1)
        self.producer.poll(0)

    def confirm(self, timeout: float = 150.0) -> int:
        """Wait for every queued message; return how many were delivered since the last call.

        Raises ``DeliveryError`` on any failure or timeout; it carries the delivered, failed
        and unconfirmed counts of this call, so no delivery report goes uncounted.
        """
        with self._lock:
            remaining = self.producer.flush(timeout)
            tracker, self._tracker = self._tracker, DeliveryTracker()
        if remaining or tracker.failed:
            details = list(tracker.errors)
            if remaining:
                details.append(f"{remaining} still queued after {timeout:g}s")
            raise DeliveryError(
                f"{tracker.failed + remaining} message(s) not acknowledged by the broker: "
                + "; ".join(details),
                delivered=tracker.delivered,
                failed=tracker.failed,
                unconfirmed=remaining,
            )
        return tracker.delivered


def produce_and_wait(
    producer: Producer,
    messages: list[tuple[str, bytes]],
    key: bytes,
    timeout: float,
    what: str,
) -> None:
    """Produce ``messages`` (topic, value) keyed by ``key`` and wait up to ``timeout``
    seconds for the broker to confirm every one. Thread-safe: each call waits for its own
    messages' delivery reports, whichever thread serves them. Raises ``DeliveryError``
    naming the messages as ``output(s) <what>`` (unconfirmed, refused, or a produce error).
    """
    reports: list[KafkaError | None] = []

    def report(err: KafkaError | None, _msg: Message) -> None:
        reports.append(err)

    try:
        for topic, value in messages:
            while True:
                try:
                    producer.produce(topic, value=value, key=key, on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.1)
        deadline = time.monotonic() + timeout
        while len(reports) < len(messages):
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeliveryError(
                    f"{len(messages) - len(reports)} output(s) {what} "
                    f"not confirmed within {timeout:g} s",
                    unconfirmed=len(messages) - len(reports),
                )
            if producer.flush(min(left, 1.0)) == 0 and len(reports) < len(messages):
                time.sleep(0.001)  # another thread is serving our delivery reports
    except KafkaException as exc:
        raise DeliveryError(f"producing the outputs {what}: {exc}") from exc
    failed = [err for err in reports if err is not None]
    if failed:
        raise DeliveryError(
            f"the broker refused {len(failed)} output(s) {what}: {failed[0]}",
            failed=len(failed),
        )
