"""The one factory of Kafka clients (issue 26): every confluent-kafka ``Consumer``,
``Producer`` (plain and transactional) and ``AdminClient`` of the project is built here,
from a :class:`KafkaConfig`.

:class:`KafkaConfig` is a small frozen value: the bootstrap servers, an optional
``client.id``, librdkafka settings applied to every client (``extra``: security, SASL, TLS,
...) and the producers' delivery timeout. The application builds it from its settings in one
place (``refusal_audit.config.Settings.kafka``); the Kafka side never sees ``Settings``. A
function here also takes a plain bootstrap string (``KafkaConfig.of``), for tests and tools.

The shared librdkafka settings live here once: the consumers' commit rules (no automatic
commit, ``read_committed`` where a transactional writer may be upstream), the session
timeouts and poll intervals of the service consumers and of the stream readers, and the
idempotent producer (``acks=all``). Each builder takes ``**overrides`` last, so a caller's
own setting wins. librdkafka's log lines go to the ``refusal_audit.kafka`` Python logger
(:data:`KAFKA_LOGGER`) unless a ``logger`` override names another.

The application layer may name a few confluent-kafka types (:data:`Message`,
:data:`KafkaError`, :data:`KafkaException`) through this module, for annotations and for
catching a broker error; it never imports ``confluent_kafka`` itself (``tests/test_layers.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from streams.logs import RepeatFilter, TransientRetryFilter

KAFKA_LOGGER = logging.getLogger("refusal_audit.kafka")
KAFKA_LOGGER.addFilter(TransientRetryFilter())  # start-up retries are not warnings
KAFKA_LOGGER.addFilter(RepeatFilter(prefixes=None))

READ_COMMITTED = "read_committed"
"""``isolation.level`` of every consumer that reads what a transactional or idempotent
writer produced: aborted transactions are never seen."""

SERVICE_SESSION_TIMEOUT_MS = 10_000
"""``session.timeout.ms`` of the service consumers (clarification, calibration, A/B): a
killed consumer leaves its group after 10 s, so its restart gets the partitions back soon
(librdkafka's default is 45 s; heartbeats come from librdkafka's own thread, so a busy
handler does not miss them)."""

LONG_HANDLER_MAX_POLL_INTERVAL_MS = 900_000
"""``max.poll.interval.ms`` of a consumer whose handler may take minutes per batch (a batch
of LLM calibrations): it must ask for the next batch within this or it leaves the group."""

STREAM_SESSION_TIMEOUT_MS = 30_000
"""``session.timeout.ms`` of the transactional worker's consumer (unless the worker's
settings give one)."""

STREAM_MAX_POLL_INTERVAL_MS = 600_000
"""``max.poll.interval.ms`` of the stream readers (the transactional worker, the sink): a
window's audit or a block's storage may take minutes."""

PRODUCER_MESSAGE_TIMEOUT_MS = 120_000
"""``message.timeout.ms`` of the plain producers: rides out a broker restart of about a
minute."""

SERVICE_CONSUMER: Mapping[str, Any] = {
    "auto.offset.reset": "earliest",
    "isolation.level": READ_COMMITTED,
    "session.timeout.ms": SERVICE_SESSION_TIMEOUT_MS,
}
"""A service consumer (``streams.consumer_loop``): from the oldest message of a new group,
committed messages only, the short session."""

STREAM_READER: Mapping[str, Any] = {
    "isolation.level": READ_COMMITTED,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "max.poll.interval.ms": STREAM_MAX_POLL_INTERVAL_MS,
}
"""A stream reader that commits explicit offsets (the transactional worker, the sink)."""


@dataclass(frozen=True)
class KafkaConfig:
    """How to reach the brokers: ``bootstrap_servers`` (``host:port[,host:port...]``), an
    optional ``client_id`` (``client.id`` of every client; None: librdkafka's default),
    ``extra`` librdkafka settings applied to every client (e.g. ``security.protocol``,
    ``sasl.mechanism``; a builder's own overrides win) and ``message_timeout_ms``, the plain
    producers' delivery timeout in milliseconds."""

    bootstrap_servers: str
    client_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    message_timeout_ms: int = PRODUCER_MESSAGE_TIMEOUT_MS

    @classmethod
    def of(cls, brokers: KafkaConfig | str) -> KafkaConfig:
        """``brokers`` itself, or a config of just the bootstrap servers ``brokers``."""
        return brokers if isinstance(brokers, KafkaConfig) else cls(brokers)

    def common(self) -> dict[str, Any]:
        """The settings every client gets: ``bootstrap.servers``, ``client.id`` (when set)
        and ``extra``."""
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        if self.client_id is not None:
            config["client.id"] = self.client_id
        config.update(self.extra)
        return config


Brokers = KafkaConfig | str
"""What the builders take: a :class:`KafkaConfig` or a bootstrap string."""


# -- producers ---------------------------------------------------------------------------------
def producer_config(brokers: Brokers, **overrides: Any) -> dict[str, Any]:
    """The librdkafka settings of an idempotent producer (``enable.idempotence``,
    ``acks=all``, lz4, ``linger.ms`` 5, the config's message timeout), then ``overrides``."""
    kafka = KafkaConfig.of(brokers)
    return {
        **kafka.common(),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        "message.timeout.ms": kafka.message_timeout_ms,
        "logger": KAFKA_LOGGER,
        **overrides,
    }


def transactional_producer_config(
    brokers: Brokers, transactional_id: str, transaction_timeout_ms: int, **overrides: Any
) -> dict[str, Any]:
    """The librdkafka settings of a transactional producer (``transactional.id``,
    ``transaction.timeout.ms`` in ms, idempotent, ``acks=all``, lz4, ``linger.ms`` 5; no
    message timeout of its own: the transaction's bounds it), then ``overrides``."""
    return {
        **KafkaConfig.of(brokers).common(),
        "transactional.id": transactional_id,
        "transaction.timeout.ms": transaction_timeout_ms,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        "logger": KAFKA_LOGGER,
        **overrides,
    }


def build_producer(config: Mapping[str, Any]) -> Producer:
    """A producer of the librdkafka settings ``config`` (from :func:`producer_config` or
    :func:`transactional_producer_config`; a transactional producer is renewed from the
    same settings). Raises ``KafkaException`` on a setting librdkafka refuses."""
    return Producer(dict(config))


def producer(brokers: Brokers, **overrides: Any) -> Producer:
    """An idempotent producer (:func:`producer_config`)."""
    return build_producer(producer_config(brokers, **overrides))


# -- consumers ---------------------------------------------------------------------------------
def consumer_config(brokers: Brokers, group_id: str, **overrides: Any) -> dict[str, Any]:
    """The librdkafka settings of a consumer in group ``group_id`` that commits only
    explicitly (``enable.auto.commit`` false), logging to :data:`KAFKA_LOGGER`, then
    ``overrides`` (e.g. ``**SERVICE_CONSUMER``, ``**STREAM_READER``)."""
    return {
        **KafkaConfig.of(brokers).common(),
        "group.id": group_id,
        "enable.auto.commit": False,
        "logger": KAFKA_LOGGER,
        **overrides,
    }


def build_consumer(config: Mapping[str, Any]) -> Consumer:
    """A consumer of the librdkafka settings ``config`` (from :func:`consumer_config`; a
    stream renews its consumer from the same settings). Raises ``KafkaException`` on a
    setting librdkafka refuses."""
    return Consumer(dict(config))


def consumer(brokers: Brokers, group_id: str, **overrides: Any) -> Consumer:
    """A consumer (:func:`consumer_config`). Raises ``KafkaException`` on a setting
    librdkafka refuses."""
    return build_consumer(consumer_config(brokers, group_id, **overrides))


# -- admin -------------------------------------------------------------------------------------
def admin(brokers: Brokers, **overrides: Any) -> AdminClient:
    """An AdminClient. librdkafka's log lines go to :data:`KAFKA_LOGGER` unless
    ``overrides`` names another ``logger``; they are forwarded when the client is polled."""
    config: dict[str, Any] = {**KafkaConfig.of(brokers).common(), **overrides}
    logger = config.pop("logger", KAFKA_LOGGER)
    return AdminClient(config, logger=logger)


# -- errors ------------------------------------------------------------------------------------
def error_of(exc: BaseException) -> KafkaError | None:
    """The ``KafkaError`` a ``KafkaException`` carries, None for anything else."""
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return error if isinstance(error, KafkaError) else None


__all__ = [
    "KAFKA_LOGGER",
    "LONG_HANDLER_MAX_POLL_INTERVAL_MS",
    "PRODUCER_MESSAGE_TIMEOUT_MS",
    "READ_COMMITTED",
    "SERVICE_CONSUMER",
    "SERVICE_SESSION_TIMEOUT_MS",
    "STREAM_MAX_POLL_INTERVAL_MS",
    "STREAM_READER",
    "STREAM_SESSION_TIMEOUT_MS",
    "Brokers",
    "KafkaConfig",
    "KafkaError",
    "KafkaException",
    "Message",
    "admin",
    "build_consumer",
    "build_producer",
    "consumer",
    "consumer_config",
    "error_of",
    "producer",
    "producer_config",
    "transactional_producer_config",
]
