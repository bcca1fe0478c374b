"""confluent-kafka producers: idempotent, acks=all, with delivery reports counted.

Used by the worker (outputs, alerts, dead letters) and by ``refusal-audit produce``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

Headers = list[tuple[str, str | bytes | None]]


class DeliveryError(RuntimeError):
    """Some messages were not acknowledged by the broker (the message says how many and why)."""


def make_producer(bootstrap_servers: str, **extra: Any) -> Producer:
    """An idempotent producer (``enable.idempotence``, ``acks=all``) for ``bootstrap_servers``.

    ``extra`` overrides librdkafka settings (e.g. ``{"linger.ms": 20}``).
    """
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        "message.timeout.ms": 30_000,
    }
    config.update(extra)
    return Producer(config)


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
        self, topic: str, value: bytes, key: bytes | None = None, headers: Headers | None = None
    ) -> None:
        """Queue one message (retries on a full local queue by serving callbacks)."""
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

    def confirm(self, timeout: float = 60.0) -> int:
        """Wait for every queued message; return how many were delivered since the last call.

        Raises ``DeliveryError`` on any failure or timeout.
        """
        with self._lock:
            remaining = self.producer.flush(timeout)
            tracker, self._tracker = self._tracker, DeliveryTracker()
        if remaining or tracker.failed:
            detail = "; ".join(tracker.errors) or f"{remaining} still queued after {timeout}s"
            raise DeliveryError(
                f"{tracker.failed + remaining} message(s) not acknowledged by the broker: {detail}"
            )
        return tracker.delivered
