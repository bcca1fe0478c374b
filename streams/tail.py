"""Read alerts from the alert topics for operators (``refusal-audit alerts tail``).

``alert_consumer`` first asks the broker for the topics' metadata (bounded by a timeout), so
an unreachable broker or a missing alert topic is a ``TailError`` with a one-line message,
not a silent wait. The consumer is then assigned every partition of the alert topics
directly: no consumer-group join (alerts flow at once) and nothing is committed.

``tail`` never reports "no alerts" for a broker it cannot reach: when the idle timeout runs
out, and every ``PROBE_INTERVAL`` seconds without an alert, it checks that the broker still
answers, and raises ``TailError`` when it does not at the idle timeout, or for
``UNREACHABLE_TIMEOUT`` seconds. librdkafka's log lines go to the ``refusal_audit.kafka``
Python logger.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from streams import clients
from streams.clients import KAFKA_LOGGER, Brokers, KafkaConfig

CONNECT_TIMEOUT = 10.0
UNREACHABLE_TIMEOUT = 30.0
PROBE_INTERVAL = 10.0
PROBE_TIMEOUT = 5.0

_CONNECTIVITY = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._TIMED_OUT,
    }
)
_MISSING_TOPIC = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)


class TailError(RuntimeError):
    """The alerts cannot be read: broker unreachable, topic missing, or a fatal consumer error."""


def _describe(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else None
    return error.str() if isinstance(error, KafkaError) else str(exc)


def alert_consumer(
    brokers: Brokers,
    topics: Sequence[str],
    from_beginning: bool,
    timeout: float = CONNECT_TIMEOUT,
    *,
    quiet: bool = False,
) -> Consumer:
    """A consumer assigned every partition of ``topics``; commits nothing.

    Starts at the oldest retained alert with ``from_beginning``, else at the end. Raises
    ``TailError`` when the broker does not answer within ``timeout`` seconds or a topic of
    ``topics`` does not exist. ``quiet`` drops librdkafka's own log lines (a refused
    connection is logged about 20 times a second): for callers that report broker
    problems themselves, as ``alerts tail`` does through ``TailError``.
    """
    kafka = KafkaConfig.of(brokers)
    bootstrap_servers = kafka.bootstrap_servers
    extra: dict[str, Any] = {"enable.auto.offset.store": False, "enable.partition.eof": False}
    if quiet:
        extra["log_level"] = 0
    # never joined (partitions are assigned, not subscribed); nothing is committed
    consumer = clients.consumer(kafka, f"refusal-audit-tail-{uuid.uuid4().hex[:12]}", **extra)
    try:
        try:
            metadata = consumer.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise TailError(
                f"cannot reach the Kafka broker at {bootstrap_servers} within {timeout:g} s "
                f"({_describe(exc)}); check kafka_bootstrap_servers and that the broker runs"
            ) from exc
        missing = [
            name
            for name in topics
            if name not in metadata.topics or metadata.topics[name].error is not None
        ]
        if missing:
            raise TailError(
                f"alert topic(s) {', '.join(repr(m) for m in missing)} do not exist; create "
                "the topics with `refusal-audit topics create` (or check kafka_topic_prefix)"
            )
        offset = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign(
            [
                TopicPartition(name, partition, offset)
                for name in topics
                for partition in sorted(metadata.topics[name].partitions)
            ]
        )
    except BaseException:
        consumer.close()
        raise
    return consumer


def _broker_answers(consumer: Consumer, timeout: float = PROBE_TIMEOUT) -> bool:
    """True when the broker answers a metadata request within ``timeout`` seconds."""
    try:
        consumer.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return True


def tail(
    consumer: Consumer,
    max_messages: int | None = None,
    idle_timeout: float | None = None,
    *,
    unreachable_timeout: float = UNREACHABLE_TIMEOUT,
    probe_interval: float = PROBE_INTERVAL,
) -> Iterator[dict[str, Any]]:
    """Yield each alert as a dict with ``topic``, ``partition``, ``offset``, ``key`` and ``alert``.

    Stops after ``max_messages`` alerts, or after ``idle_timeout`` seconds without one
    (both None: runs until interrupted). A value that is not JSON is passed on as a string
    under ``alert`` (a null value as None). Raises ``TailError`` on a fatal consumer error,
    a topic that disappears, or a broker that does not answer at the idle timeout or for
    ``unreachable_timeout`` seconds (checked every ``probe_interval`` seconds without an
    alert). Closes ``consumer`` when done.
    """
    seen = 0
    last = last_ok = time.monotonic()
    next_probe = last + probe_interval
    try:
        while max_messages is None or seen < max_messages:
            msg = consumer.poll(0.5)
            now = time.monotonic()
            if msg is None:
                idle = idle_timeout is not None and now - last >= idle_timeout
                if not idle and now < next_probe:
                    continue
                if _broker_answers(consumer):
                    last_ok = now
                    if idle:
                        return
                elif idle or now - last_ok >= unreachable_timeout:
                    raise TailError(
                        f"lost the Kafka broker: no answer for {now - last_ok:.0f} s"
                        + (" (at the idle timeout)" if idle else "")
                    )
                next_probe = time.monotonic() + probe_interval
                continue
            error = msg.error()
            if error is not None:
                code = error.code()
                if code == KafkaError._PARTITION_EOF or code in _CONNECTIVITY:
                    continue  # the probes decide whether the broker is gone
                if code in _MISSING_TOPIC:
                    raise TailError(
                        f"alert topic {msg.topic()!r} is gone ({error.str()}); create the "
                        "topics with `refusal-audit topics create`"
                    )
                if error.fatal() or not error.retriable():
                    raise TailError(f"consumer error: {error.str()}")
                KAFKA_LOGGER.warning("consumer error (retried): %s", error.str())
                continue
            last = last_ok = now
            next_probe = now + probe_interval
            seen += 1
            value = msg.value()
            alert: Any = None
            if value is not None:
                try:
                    alert = orjson.loads(value)
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
