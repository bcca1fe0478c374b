"""The settings of the Kafka side: broker, topics, consumer groups, and the audit workers: one
group of :class:`refusal_audit.config.Settings`, which composes every group (the field names are
the config keys; the environment variables are ``REFUSAL_AUDIT_`` plus the name in capitals;
docs/configuration.md lists them all).
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class StreamingSettings(BaseModel):
    """The Kafka side: broker, topics, consumer groups, and the audit workers: fields only
    (validated and read through :class:`refusal_audit.config.Settings`)."""

    # kafka (the streaming worker and its tools)
    kafka_bootstrap_servers: str = Field(
        default="127.0.0.1:9092", description="Kafka bootstrap servers for the streaming side."
    )
    kafka_topic_prefix: str = Field(
        default="refusal-audit.", description="Prefix of every topic name."
    )
    kafka_consumer_group: str = Field(
        default="refusal-audit-worker", description="Consumer group (faust app id) of the worker."
    )
    kafka_topic_partitions: int = Field(
        default=3, ge=1, description="Partitions of the topics `topics create` makes."
    )
    kafka_replication_factor: int = Field(
        default=1, ge=1, description="Replication factor of the topics `topics create` makes."
    )
    kafka_static_membership: bool = Field(
        default=True,
        description="Join the consumer group as a static member (KIP-345): a restarted "
        "worker takes its partitions back at once.",
    )
    kafka_group_instance_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=249,
        description="The worker's group.instance.id; unset: <host name>-<hash of data_dir>. "
        "Unique per live worker.",
    )
    kafka_session_timeout_seconds: float = Field(
        default=45.0,
        ge=6.0,
        le=300.0,
        description="Consumer session timeout: how long a worker that died without leaving "
        "keeps its partitions when no process with its instance id comes back.",
    )
    # worker
    worker_take_max: int = Field(
        default=1000, ge=1, description="Max events the worker takes from the stream per window."
    )
    worker_take_within_seconds: float = Field(
        default=2.0,
        gt=0.0,
        description="Tumbling time bound of a window: a partly filled "
        "window is audited after this many seconds.",
    )
    worker_windows_in_flight: int = Field(
        default=2,
        ge=1,
        le=16,
        description="Windows a transactional worker (--outputs topics) has in hand at once: "
        "it reads and audits the next ones while the oldest is committed (in order).",
    )
    worker_recovery_seconds: float = Field(
        default=600.0,
        ge=10.0,
        description="How long a transactional worker keeps retrying to recover its producer "
        "and rewind its consumer (after a broker restart) before it exits 70, and a worker or "
        "the sink waits for a broker that does not answer at its start before it exits 2.",
    )
    worker_web_host: str = Field(
        default="127.0.0.1", description="Bind address of the worker's /metrics and /health."
    )
    worker_web_port: int = Field(
        default=6066, ge=0, le=65535, description="Port of the worker's /metrics and /health."
    )
