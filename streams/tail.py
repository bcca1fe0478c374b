"""Read alerts from the alert topics for operators (``refusal-audit alerts tail``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError


def alert_consumer(bootstrap_servers: str, topics: Sequence[str], from_beginning: bool) -> Consumer:
    """A consumer of ``topics`` in a throw-away group that commits nothing."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"refusal-audit-tail-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest" if from_beginning else "latest",
        }
    )
    consumer.subscribe(list(topics))
    return consumer


def tail(
    consumer: Consumer, max_messages: int | None = None, idle_timeout: float | None = None
) -> Iterator[dict[str, Any]]:
    """Yield each alert as a dict with ``topic``, ``partition``, ``offset``, ``key`` and ``alert``.

    Stops after ``max_messages`` alerts, or after ``idle_timeout`` seconds without one
    (both None: runs until interrupted). A value that is not JSON is passed on as a string
    under ``alert``. Raises ``RuntimeError`` on a fatal consumer error.
    """
    seen = 0
    last = time.monotonic()
    try:
        while max_messages is None or seen < max_messages:
            msg = consumer.poll(0.5)
            if msg is None:
                if idle_timeout is not None and time.monotonic() - last > idle_timeout:
                    return
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(f"consumer error: {error}")
            last = time.monotonic()
            seen += 1
            value = msg.value() or b""
            try:
                alert: Any = orjson.loads(value)
            except orjson.JSONDecodeError:
                alert = value.decode("utf-8", errors="replace")
            key = msg.key()
            yield {
                "topic": msg.topic(),
                "partition": msg.partition(),
                "offset": msg.offset(),
                "key": key.decode("utf-8", errors="replace") if key else None,
                "alert": alert,
            }
    finally:
        consumer.close()
