"""The one Kafka client factory (``streams.clients``, issue 26): every client's librdkafka
settings are built as documented, from a ``KafkaConfig`` or a bootstrap string, with the
config's client id and extra settings on every client and a builder's overrides winning;
the application builds the config from its settings in one place (``Settings.kafka``).
No broker is needed: nothing here connects."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from refusal_audit.config import Settings
from streams import clients
from streams.clients import (
    KAFKA_LOGGER,
    SERVICE_CONSUMER,
    STREAM_READER,
    KafkaConfig,
    consumer_config,
    producer_config,
    transactional_producer_config,
)
from streams.producer import KAFKA_LOGGER as PRODUCER_LOGGER

SECURE = KafkaConfig(
    "broker-a:9093,broker-b:9093",
    client_id="refusal-audit-test",
    extra={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"},
)


def test_a_bootstrap_string_gives_the_plain_settings_of_before() -> None:
    assert KafkaConfig.of("b:9092") == KafkaConfig("b:9092")
    assert KafkaConfig.of(SECURE) is SECURE
    assert producer_config("b:9092") == {
        "bootstrap.servers": "b:9092",
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        "message.timeout.ms": 120_000,
        "logger": KAFKA_LOGGER,
    }
    assert consumer_config("b:9092", "g") == {
        "bootstrap.servers": "b:9092",
        "group.id": "g",
        "enable.auto.commit": False,
        "logger": KAFKA_LOGGER,
    }
    assert PRODUCER_LOGGER is KAFKA_LOGGER  # one logger for librdkafka's lines


def test_client_id_and_extra_settings_reach_every_client_and_overrides_win() -> None:
    common = {
        "bootstrap.servers": "broker-a:9093,broker-b:9093",
        "client.id": "refusal-audit-test",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
    }
    for config in (
        producer_config(SECURE),
        transactional_producer_config(SECURE, "txn-1", 60_000),
        consumer_config(SECURE, "g"),
    ):
        assert common.items() <= config.items()
    assert producer_config(SECURE, **{"linger.ms": 0})["linger.ms"] == 0
    assert consumer_config(SECURE, "g", **{"client.id": "mine"})["client.id"] == "mine"
    assert producer_config(KafkaConfig("b", message_timeout_ms=3000))["message.timeout.ms"] == 3000


def test_transactional_and_consumer_presets() -> None:
    txn = transactional_producer_config("b:9092", "worker-1", 45_000, **{"linger.ms": 20})
    assert txn["transactional.id"] == "worker-1"
    assert txn["transaction.timeout.ms"] == 45_000
    assert (txn["enable.idempotence"], txn["acks"], txn["linger.ms"]) == (True, "all", 20)
    assert "message.timeout.ms" not in txn  # the transaction bounds delivery
    service = consumer_config("b:9092", "g", **SERVICE_CONSUMER)
    assert service["isolation.level"] == "read_committed"
    assert service["session.timeout.ms"] == 10_000
    assert service["auto.offset.reset"] == "earliest"
    reader = consumer_config("b:9092", "g", **STREAM_READER)
    assert reader["enable.auto.offset.store"] is False
    assert reader["max.poll.interval.ms"] == 600_000
    assert reader["isolation.level"] == "read_committed"


def test_the_builders_make_clients_without_connecting() -> None:
    made = [
        clients.producer("127.0.0.1:1"),
        clients.consumer("127.0.0.1:1", "g", **SERVICE_CONSUMER),
        clients.admin("127.0.0.1:1"),
    ]
    assert [type(c) for c in made] == [Producer, Consumer, AdminClient]
    made[1].close()


def test_the_application_builds_the_config_from_its_settings() -> None:
    cfg = Settings(kafka_bootstrap_servers="kafka-1:9092,kafka-2:9092")
    assert cfg.kafka() == KafkaConfig("kafka-1:9092,kafka-2:9092")
