"""ClickHouse's Kafka table engine instead of the warehouse sink: the DDL (issue 14).

A ClickHouse server can consume the transactional workers' result topics itself, in place
of ``refusal-audit sink``. For each of the four topics (``<prefix>stored-events``,
``<prefix>assessments``, ``<prefix>audit-batches``, ``<prefix>dead-letters``) this module
generates, in this order::

    kafka_<role>_landing   ENGINE = Null: one row per message, with its validation problems
    kafka_<role>_rows      MATERIALIZED VIEW landing -> the warehouse table (valid messages)
    kafka_<role>_rejects   MATERIALIZED VIEW landing -> dead_letters (everything else)
    kafka_<role>_queue     ENGINE = Kafka (kafka_format 'RawBLOB', kafka_handle_error_mode 'stream')
    kafka_<role>_consumer  MATERIALIZED VIEW queue -> landing

Consumption starts when ``kafka_<role>_consumer`` is attached, after both views that read
the landing table exist, so no block is read before every message has a place to go.
``RawBLOB`` hands each message's value to the views as one ``String`` (one message, one
row: ``JSONAsString`` would split a message holding two JSON objects into two rows); the
views parse the JSON. ``kafka_handle_error_mode = 'stream'`` keeps anything the format
could not read (``_error``/``_raw_message``) as a problem row instead of failing the block.

The rows views map each message to the table's columns exactly as the row builders of
``warehouse.rows`` (what ``warehouse.store``'s ``insert_*`` use) build rows from
``StoredEvent``, ``StoredAssessment``, ``BatchRecord`` and, for the dead-letter topic, from
the headers ``streams.dead_letters.dead_letter_message`` writes
(``streams.dead_letters.dead_letter_from_message`` reads them back for the sink); the columns are
those of ``warehouse.rows.EVENT_COLUMNS`` etc. A message that would not validate as its
model (``problems`` not empty) becomes a dead letter like the sink's undecodable messages:
stage ``store``, reason ``sink_decode``, the reason naming the failing fields the way
pydantic's error locations do (``not a StoredEvent: event.log_id``). The checks are
generated from the pydantic models (required fields, JSON types, literals, length and range
constraints, unknown fields); pydantic's lax coercions (``"true"`` for a bool, ``3.0`` for
an int, a number for a datetime) are rejected here, and such a message was never written by
a worker. The reject's ``dead_letter_id`` is a SHA-256 prefix, not the sink's BLAKE2b.

Use :func:`kafka_engine_statements` (or :func:`render_kafka_engine_sql` for a script,
``deploy/clickhouse/kafka_engine.sql`` is the default one) against a migrated database,
:func:`kafka_engine_drop_statements` to remove it again, and
:func:`render_kafka_consumer_config` for the server configuration that pins
``isolation.level`` for these topics. ``python -m warehouse.kafka_engine`` writes both files
(``--help``). The message checks are generated in ``warehouse.kafka_checks``, the column
mappings live in ``warehouse.kafka_columns``. Nothing here connects to a server.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape as xml_escape

from warehouse.client import WarehouseError, quote_identifier, validate_identifier
from warehouse.kafka_checks import lit, message_problems
from warehouse.kafka_columns import KAFKA_SOURCES, KafkaSource, source_columns
from warehouse.rows import DEAD_LETTER_COLUMNS

__all__ = [
    "DEFAULT_BROKER_LIST",
    "DEFAULT_DATABASE",
    "DEFAULT_GROUP",
    "DEFAULT_TOPIC_PREFIX",
    "KAFKA_SOURCES",
    "QUEUE_COLUMNS",
    "KafkaEngineConfig",
    "KafkaSource",
    "kafka_engine_drop_statements",
    "kafka_engine_statements",
    "message_problems",
    "render_kafka_consumer_config",
    "render_kafka_engine_sql",
    "source_columns",
]

#: The defaults of ``refusal_audit.config.Settings`` (this layer does not import it):
#: ``warehouse_database``, ``kafka_topic_prefix``, ``kafka_bootstrap_servers`` and
#: ``kafka_consumer_group`` + ``-clickhouse`` (the sink's group is ``<group>-sink``).
DEFAULT_DATABASE = "refusal_audit"
DEFAULT_TOPIC_PREFIX = "refusal-audit."
DEFAULT_BROKER_LIST = "127.0.0.1:9092"
DEFAULT_GROUP = "refusal-audit-worker-clickhouse"

#: The Kafka table's virtual columns the consumer view reads (ClickHouse's types; the value
#: column itself is ``value String``). A stand-in table (``stand_in=True``) has them as
#: ordinary columns.
QUEUE_COLUMNS: Mapping[str, str] = {
    "value": "String",
    "_topic": "LowCardinality(String)",
    "_partition": "UInt64",
    "_offset": "UInt64",
    "_headers.name": "Array(String)",
    "_headers.value": "Array(String)",
    "_timestamp_ms": "Nullable(DateTime64(3))",
    "_raw_message": "String",
    "_error": "String",
}

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]*$")  # Kafka's legal topic characters
_BROKERS_RE = re.compile(r"^[A-Za-z0-9._:\[\],-]+$")
_SETTING_RE = re.compile(r"^kafka_[a-z_]+$")
_RESERVED_SETTINGS = frozenset(
    {"kafka_broker_list", "kafka_topic_list", "kafka_group_name", "kafka_format",
     "kafka_handle_error_mode", "kafka_num_consumers"}
)  # fmt: skip
_MAX_REASON_CHARS = 1000  # refusal_audit.streaming.warehouse_sink._undecodable keeps why[:1000]
_MAX_REJECT_RAW_BYTES = 65_536  # ... and value[:65_536]


# ---- configuration and statements -------------------------------------------------------


@dataclass(frozen=True)
class KafkaEngineConfig:
    """What the generated DDL is for.

    ``database``: the migrated warehouse database; ``topic_prefix``: ``kafka_topic_prefix``;
    ``broker_list``: ``kafka_broker_list`` (``host:port[,host:port...]``); ``group``: the
    base of the consumer groups, one per topic (``<group>-<topic suffix>``, as ClickHouse
    recommends one group per Kafka table), never the sink's; ``num_consumers``:
    ``kafka_num_consumers`` per table (at most the topic's partitions);
    ``extra_settings``: more Kafka table settings, e.g. ``kafka_security_protocol``,
    ``kafka_sasl_mechanism`` (names ``kafka_*``, not the ones set here).
    """

    database: str = DEFAULT_DATABASE
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    broker_list: str = DEFAULT_BROKER_LIST
    group: str = DEFAULT_GROUP
    num_consumers: int = 1
    extra_settings: Mapping[str, str | int] = field(default_factory=dict)

    def validate(self) -> None:
        """Raise ``ValueError`` for a value that cannot go into the DDL: a database name
        that is not a plain identifier, a topic prefix with characters Kafka does not
        allow, an empty or malformed broker list, an empty group, ``num_consumers`` below
        1, or an extra setting that is not ``kafka_*`` or is one this module sets."""
        try:
            validate_identifier(self.database)
        except WarehouseError as exc:
            raise ValueError(str(exc)) from exc
        if not _TOPIC_RE.match(self.topic_prefix):
            raise ValueError(
                f"topic prefix {self.topic_prefix!r}: use letters, digits, '.', '_', '-'"
            )
        if not _BROKERS_RE.match(self.broker_list):
            raise ValueError(f"broker list {self.broker_list!r}: expected host:port[,host:port...]")
        if not self.group:
            raise ValueError("the consumer group must not be empty")
        if self.num_consumers < 1:
            raise ValueError(f"num_consumers must be at least 1, got {self.num_consumers}")
        for name in self.extra_settings:
            if not _SETTING_RE.match(name) or name in _RESERVED_SETTINGS:
                raise ValueError(
                    f"extra setting {name!r}: expected a kafka_* setting other than "
                    f"{sorted(_RESERVED_SETTINGS)}"
                )

    def topic(self, source: KafkaSource) -> str:
        """The topic name of ``source``."""
        return self.topic_prefix + source.suffix

    def group_name(self, source: KafkaSource) -> str:
        """The consumer group of ``source``'s Kafka table."""
        return f"{self.group}-{source.suffix}"


def _name(db: str, source: KafkaSource, kind: str) -> str:
    return f"{db}.kafka_{source.role}_{kind}"


def _setting_value(value: str | int) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else lit(str(value))


def _queue_ddl(cfg: KafkaEngineConfig, db: str, source: KafkaSource, stand_in: bool) -> str:
    name = _name(db, source, "queue")
    if stand_in:
        cols = ",\n".join(f"    `{c}` {t}" for c, t in QUEUE_COLUMNS.items())
        return f"CREATE TABLE IF NOT EXISTS {name}\n(\n{cols}\n)\nENGINE = Null"
    settings = {
        "kafka_broker_list": cfg.broker_list,
        "kafka_topic_list": cfg.topic(source),
        "kafka_group_name": cfg.group_name(source),
        "kafka_format": "RawBLOB",
        "kafka_handle_error_mode": "stream",
        "kafka_num_consumers": cfg.num_consumers,
        **cfg.extra_settings,
    }
    rendered = ",\n".join(f"    {k} = {_setting_value(v)}" for k, v in settings.items())
    return (
        f"CREATE TABLE IF NOT EXISTS {name}\n(\n    value String\n)\n"
        f"ENGINE = Kafka\nSETTINGS\n{rendered}"
    )


def _landing_ddl(db: str, source: KafkaSource) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {_name(db, source, 'landing')}\n(\n"
        "    message         String,\n"
        "    topic           LowCardinality(String),\n"
        "    kafka_partition UInt64,\n"
        "    kafka_offset    UInt64,\n"
        "    header_names    Array(String),\n"
        "    header_values   Array(String),\n"
        "    written_at      Nullable(DateTime64(3, 'UTC')),\n"
        "    problems        Array(String)\n"
        ")\nENGINE = Null"
    )


def _consumer_ddl(db: str, source: KafkaSource) -> str:
    return (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {_name(db, source, 'consumer')}\n"
        f"TO {_name(db, source, 'landing')} AS\n"
        "SELECT if(_error = '', value, _raw_message) AS message,\n"
        "       _topic AS topic,\n"
        "       _partition AS kafka_partition,\n"
        "       _offset AS kafka_offset,\n"
        "       `_headers.name` AS header_names,\n"
        "       `_headers.value` AS header_values,\n"
        "       _timestamp_ms AS written_at,\n"
        f"       if(_error = '', {source.problems()}, ['(value)']) AS problems\n"
        f"FROM {_name(db, source, 'queue')}"
    )


def _rows_ddl(db: str, source: KafkaSource) -> str:
    cols = ",\n       ".join(f"{expr} AS {name}" for name, expr in source.columns.items())
    return (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {_name(db, source, 'rows')}\n"
        f"TO {db}.{source.table} AS\n"
        f"SELECT {cols}\n"
        f"FROM {_name(db, source, 'landing')}\n"
        "WHERE empty(problems)"
    )


def _rejects_ddl(db: str, source: KafkaSource) -> str:
    """refusal_audit.streaming.warehouse_sink._undecodable in SQL: created_at is the message's
    timestamp (a
    redelivered message gives the same row); dead_letter_id is a SHA-256 prefix."""
    location = "concat('partition ', toString(kafka_partition), ' offset ', toString(kafka_offset))"
    reason = f"concat({lit(f'not {source.what}: ')}, arrayStringConcat(problems, ', '))"
    exprs = {
        "dead_letter_id": (
            f"lower(hex(substring(SHA256(concat(topic, '|', {location}, message)), 1, 16)))"
        ),
        "stage": "'store'",
        "reason_code": "'sink_decode'",
        "reason": f"substringUTF8({reason}, 1, {_MAX_REASON_CHARS})",
        "source": "topic",
        "location": location,
        "raw": f"substring(message, 1, {_MAX_REJECT_RAW_BYTES})",
        "raw_length": "length(message)",
        "raw_sha256": "lower(hex(SHA256(message)))",
        "raw_truncated": f"toBool(length(message) > {_MAX_REJECT_RAW_BYTES})",
        "log_id": "CAST(NULL, 'Nullable(String)')",
        "created_at": "ifNull(written_at, now64(3, 'UTC'))",
    }
    cols = ",\n       ".join(f"{exprs[n]} AS {n}" for n in DEAD_LETTER_COLUMNS)
    return (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {_name(db, source, 'rejects')}\n"
        f"TO {db}.dead_letters AS\n"
        f"SELECT {cols}\n"
        f"FROM {_name(db, source, 'landing')}\n"
        "WHERE notEmpty(problems)"
    )


def kafka_engine_statements(
    config: KafkaEngineConfig | None = None, *, stand_in: bool = False
) -> list[str]:
    """The DDL statements, in order, that make ClickHouse consume the result topics into
    the warehouse tables of ``config.database`` (default ``KafkaEngineConfig()``), which must
    already be migrated. Per topic: landing table, rows view, rejects view, Kafka table,
    consumer view (module docstring). Every statement is ``IF NOT EXISTS``: applying them
    again changes nothing (change a view by dropping first, see
    :func:`kafka_engine_drop_statements`).

    ``stand_in=True`` renders each Kafka table as a ``Null`` table of the same name with the
    value and the virtual columns the consumer view reads as ordinary columns
    (``QUEUE_COLUMNS``): inserting what the Kafka engine would hand over into it runs the
    same views (for tests, and to load messages by hand). Raises ``ValueError`` for an
    invalid ``config`` (``KafkaEngineConfig.validate``).
    """
    cfg = config or KafkaEngineConfig()
    cfg.validate()
    db = quote_identifier(cfg.database)
    out: list[str] = []
    for source in KAFKA_SOURCES:
        out += [
            _landing_ddl(db, source),
            _rows_ddl(db, source),
            _rejects_ddl(db, source),
            _queue_ddl(cfg, db, source, stand_in),
            _consumer_ddl(db, source),
        ]
    return out


def kafka_engine_drop_statements(config: KafkaEngineConfig | None = None) -> list[str]:
    """``DROP ... IF EXISTS`` of everything :func:`kafka_engine_statements` creates, the
    consumer views first (consumption stops before anything it writes to goes away). The
    warehouse tables and their rows stay; the consumer groups' offsets stay in Kafka.
    Raises ``ValueError`` for an invalid ``config``."""
    cfg = config or KafkaEngineConfig()
    cfg.validate()
    db = quote_identifier(cfg.database)
    out: list[str] = []
    for kind, what in (("consumer", "VIEW"), ("queue", "TABLE"), ("rows", "VIEW"),
                       ("rejects", "VIEW"), ("landing", "TABLE")):  # fmt: skip
        out += [f"DROP {what} IF EXISTS {_name(db, s, kind)}" for s in KAFKA_SOURCES]
    return out


def render_kafka_engine_sql(config: KafkaEngineConfig | None = None) -> str:
    """The statements of :func:`kafka_engine_statements` as one script for
    ``clickhouse-client --multiquery``, with a header saying what it is for. Raises
    ``ValueError`` for an invalid ``config``."""
    cfg = config or KafkaEngineConfig()
    statements = kafka_engine_statements(cfg)
    topics = ", ".join(cfg.topic(s) for s in KAFKA_SOURCES)
    header = [
        "-- ClickHouse's Kafka table engine in place of `refusal-audit sink` (docs/streaming.md,",
        '-- "ClickHouse\'s Kafka engine instead of the sink"). Generated by',
        "-- `python -m warehouse.kafka_engine` (warehouse/kafka_engine.py); do not edit by hand.",
        f"--   database {cfg.database} (migrated first: `refusal-audit migrate`)",
        f"--   topics   {topics}",
        f"--   brokers  {cfg.broker_list}",
        f"--   groups   {cfg.group}-<topic suffix>",
        "-- Apply: clickhouse-client --multiquery < kafka_engine.sql",
        "-- Consumers read with librdkafka's default isolation.level=read_committed (pinned for",
        "-- these topics by refusal-audit-kafka.xml in the server's config.d).",
    ]
    body = []
    for i, stmt in enumerate(statements):
        if i % 5 == 0:
            source = KAFKA_SOURCES[i // 5]
            body.append(f"-- {cfg.topic(source)} -> {cfg.database}.{source.table}")
        body.append(stmt + ";")
    return "\n".join(header) + "\n\n" + "\n\n".join(body) + "\n"


def render_kafka_consumer_config(config: KafkaEngineConfig | None = None) -> str:
    """A ClickHouse server configuration file (for ``config.d/``) setting librdkafka's
    ``isolation.level`` to ``read_committed`` for the consumers of these topics: the
    workers' outputs are transactional, and only committed ones may reach the warehouse.
    It is librdkafka's default and ClickHouse does not change it; this pins it against a
    server-wide ``read_uncommitted``. Raises ``ValueError`` for an invalid ``config``."""
    cfg = config or KafkaEngineConfig()
    cfg.validate()
    topics = "\n".join(
        "            <kafka_topic>\n"
        f"                <name>{xml_escape(cfg.topic(s))}</name>\n"
        "                <isolation_level>read_committed</isolation_level>\n"
        "            </kafka_topic>"
        for s in KAFKA_SOURCES
    )
    return (
        "<!-- refusal-audit: Kafka consumers of the result topics read committed transactions\n"
        "     only. Generated by `python -m warehouse.kafka_engine`; goes to the server's\n"
        "     config.d/. -->\n"
        "<clickhouse>\n    <kafka>\n        <consumer>\n"
        f"{topics}\n"
        "        </consumer>\n    </kafka>\n</clickhouse>\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m warehouse.kafka_engine``: write ``kafka_engine.sql`` and
    ``refusal-audit-kafka.xml`` for the given settings into ``--out-dir`` (default
    ``deploy/clickhouse``). Returns the exit status (2 for invalid settings)."""
    parser = argparse.ArgumentParser(prog="python -m warehouse.kafka_engine",
                                     description=main.__doc__)  # fmt: skip
    parser.add_argument("--database", default=DEFAULT_DATABASE)
    parser.add_argument("--topic-prefix", default=DEFAULT_TOPIC_PREFIX)
    parser.add_argument("--brokers", default=DEFAULT_BROKER_LIST)
    parser.add_argument("--group", default=DEFAULT_GROUP)
    parser.add_argument("--num-consumers", type=int, default=1)
    parser.add_argument("--out-dir", type=Path, default=Path("deploy/clickhouse"))
    args = parser.parse_args(argv)
    cfg = KafkaEngineConfig(args.database, args.topic_prefix, args.brokers, args.group,
                            args.num_consumers)  # fmt: skip
    try:
        sql, xml = render_kafka_engine_sql(cfg), render_kafka_consumer_config(cfg)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "kafka_engine.sql").write_text(sql, encoding="utf-8")
    (args.out_dir / "refusal-audit-kafka.xml").write_text(xml, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
