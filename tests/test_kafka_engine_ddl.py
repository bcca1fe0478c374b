"""The DDL for ClickHouse's Kafka table engine (``warehouse.kafka_engine``) against the sink.

Real worker output (the shared pipeline with the local engine over the example log, the
malformed-record fixture and a tombstone, into ``TopicOutputs`` as a transactional worker
does) goes two ways into two migrated databases of the embedded store:

- the sink's path: ``refusal_audit.streaming.warehouse_sink.WarehouseSink.store_block``;
- the shipped views: every statement of ``kafka_engine_statements``, with each Kafka table
  replaced by a ``Null`` table of the same columns (``stand_in=True``) into which the messages
  are inserted as the Kafka engine hands them to its views (empty values are not: the engine
  skips them, see the broker test).

Every table, the current-assessments view, the first arrivals and every named query must
then read the same. Against the real broker, chDB's own Kafka engine runs the shipped DDL
unchanged: only committed transactions arrive, and the result equals the real sink's.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME
from test_pipeline import settings

from processors.adapters import DecodeOptions, SourceRecord
from refusal_audit.audit.batch import build_pipeline
from refusal_audit.audit.pipeline import InputSource
from refusal_audit.config import Settings
from refusal_audit.streaming.warehouse_sink import WarehouseSink
from refusal_audit.streaming.window_outputs import TopicOutputs
from schemas.audit import StoredAssessment
from schemas.events import StoredEvent
from streams.blocks import Block
from streams.dead_letters import kafka_location, original_record
from streams.topics import ROLES, Topics
from streams.transactional import OutputMessage
from warehouse import Warehouse, connect, migrate
from warehouse.client import Client
from warehouse.kafka_engine import (
    DEFAULT_BROKER_LIST,
    DEFAULT_DATABASE,
    DEFAULT_GROUP,
    DEFAULT_TOPIC_PREFIX,
    KAFKA_SOURCES,
    QUEUE_COLUMNS,
    KafkaEngineConfig,
    kafka_engine_drop_statements,
    kafka_engine_statements,
    render_kafka_consumer_config,
    render_kafka_engine_sql,
)
from warehouse.queries import NAMED_QUERIES, run_named

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"
MALFORMED = REPO / "tests" / "fixtures" / "malformed.jsonl"
DEPLOY = REPO / "deploy" / "clickhouse"
PREFIX = "ke."
TOPICS = Topics.from_prefix(PREFIX)
T0_MS = 1_780_000_000_000  # when the first window's messages were written


# ---- real worker output ---------------------------------------------------------------


@dataclass(frozen=True)
class Msg:
    """A consumed record as confluent-kafka's ``Message`` shows it to the sink (``ts``: its
    timestamp, ms since the epoch)."""

    t: str
    p: int
    o: int
    v: bytes | None
    k: bytes | None = None
    h: Any = None
    ts: int = 0

    def topic(self) -> str:
        return self.t

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def value(self) -> bytes | None:
        return self.v

    def key(self) -> bytes | None:
        return self.k

    def headers(self) -> Any:
        return self.h

    def timestamp(self) -> tuple[int, int]:
        return (TIMESTAMP_CREATE_TIME, self.ts)

    def error(self) -> None:
        return None

    @classmethod
    def of(cls, msg: Any) -> Msg:
        """A copy of a real consumed ``confluent_kafka.Message``."""
        _, ts = msg.timestamp()
        return cls(msg.topic() or "", msg.partition() or 0, msg.offset() or 0, msg.value(),
                   msg.key(), msg.headers(), ts)  # fmt: skip


def _input_records() -> tuple[list[SourceRecord], dict[tuple[str, str], Any]]:
    """The example log, the malformed fixture and a tombstone as records of the input topic,
    with their originals (what ``TransactionalWorker.process`` builds from a window)."""
    lines = [*EXAMPLE_LOG.read_bytes().splitlines(), *MALFORMED.read_bytes().splitlines()]
    values: list[bytes | None] = [*lines, None]
    records, originals = [], {}
    for offset, value in enumerate(values):
        location = kafka_location(0, offset)
        records.append(SourceRecord(TOPICS.input, location, value if value is not None else b"",
                                    tombstone=value is None))  # fmt: skip
        originals[(TOPICS.input, location)] = original_record(
            f"k{offset}".encode(), [("trace", b"t")], value
        )
    return records, originals


@pytest.fixture(scope="module")
def worker_messages() -> list[OutputMessage]:
    """One window's output messages of a transactional worker over ``_input_records``."""
    outputs = TopicOutputs(TOPICS)
    pipeline = build_pipeline(settings(), outputs)
    pipeline.flush_every = 10_000  # one flush, as a worker window
    records, originals = _input_records()
    outputs.use_originals(originals)
    asyncio.run(pipeline.run([InputSource(records, "jsonl", DecodeOptions())]))
    return outputs.take()


def as_records(messages: Sequence[OutputMessage], written: int = T0_MS) -> list[Msg]:
    """The messages as consumed from one partition per topic, written in their order one
    millisecond apart from ``written`` (ms since the epoch)."""
    next_offset: dict[str, int] = {}
    out = []
    for i, m in enumerate(messages):
        o = next_offset.get(m.topic, 0)
        next_offset[m.topic] = o + 1
        out.append(Msg(m.topic, 0, o, m.value, m.key, m.headers, written + i))
    return out


# ---- the two paths ----------------------------------------------------------------------


def sink_path(store: Warehouse, records: Sequence[Msg], topics: Topics = TOPICS) -> None:
    """What ``refusal-audit sink`` does with one block of these records."""
    block = Block()
    for r in records:
        block.add(r)  # type: ignore[arg-type]
    WarehouseSink(store, None, topics).store_block(block)  # type: ignore[arg-type]


def _header_bytes(value: str | bytes | None) -> bytes:
    return value.encode() if isinstance(value, str) else (value or b"")


def engine_path(client: Client, database: str, records: Sequence[Msg]) -> None:
    """Insert the records into the stand-ins of the Kafka tables as the Kafka engine hands
    them to its views (``QUEUE_COLUMNS``): one block per topic; empty values are skipped."""
    for source in KAFKA_SOURCES:
        rows = [
            [r.v, r.t, r.p, r.o, [n for n, _ in r.h or []],
             [_header_bytes(v) for _, v in r.h or []],
             datetime.fromtimestamp(r.ts / 1000, UTC), b"", b""]
            for r in records
            if r.t == PREFIX + source.suffix and r.v
        ]  # fmt: skip
        if rows:
            client.insert(f"kafka_{source.role}_queue", rows, column_names=list(QUEUE_COLUMNS),
                          database=database)  # fmt: skip


def apply(client: Client, statements: Sequence[str]) -> None:
    for statement in statements:
        client.command(statement)


# ---- what a reader sees -----------------------------------------------------------------

TABLE_READS = {
    "refusal_events": "SELECT * FROM {db:Identifier}.refusal_events FINAL ORDER BY log_id",
    "assessments": "SELECT * FROM {db:Identifier}.assessments FINAL ORDER BY policy_bundle, log_id",
    "current_assessments": "SELECT * FROM {db:Identifier}.current_assessments "
    "ORDER BY policy_bundle, log_id",
    "audit_batches": "SELECT * FROM {db:Identifier}.audit_batches FINAL ORDER BY batch_id",
    "first_arrivals": "SELECT log_id, min(first_ingested_at) FROM {db:Identifier}.event_arrivals "
    "GROUP BY log_id ORDER BY log_id",
    "dead_letters": "SELECT * FROM {db:Identifier}.dead_letters FINAL "
    "WHERE reason_code != 'sink_decode' ORDER BY dead_letter_id",
}


def _rows(client: Client, database: str, sql: str) -> list[tuple[Any, ...]]:
    result = client.query(sql, parameters={"db": database}, column_formats={"raw": "bytes"})
    return [tuple(row) for row in result.result_rows]


def reader_view(client: Client, database: str) -> dict[str, Any]:
    """Every table the sink writes, read as the queries read them, and every named query."""
    seen: dict[str, Any] = {name: _rows(client, database, sql) for name, sql in TABLE_READS.items()}
    for name in NAMED_QUERIES:
        result = run_named(client, database, name)
        seen[f"query {name}"] = [tuple(row) for row in result.rows]
    return seen


def empty_value_letters(records: Sequence[Msg]) -> set[str]:
    """Ids of the dead letters whose topic copy has no value (a tombstone, an empty line)."""
    return {
        _header_bytes(dict(r.h)["x-dead-letter-id"]).decode()
        for r in records
        if r.t == TOPICS.dead_letters and not r.v
    }


def assert_same_results(
    client: Client, db_sink: str, db_engine: str, records: Sequence[Msg]
) -> None:
    """The reader sees the same in both databases, but for the dead letters the Kafka engine
    never sees (their topic copy has no value): those, and only those, are missing from the
    engine's side; without them in the sink's database, every read is the same."""
    missing = empty_value_letters(records)
    assert missing, "the input should hold a tombstone and an empty line"
    ids = "SELECT dead_letter_id FROM {db:Identifier}.dead_letters FINAL"
    sink_ids = {r[0] for r in _rows(client, db_sink, ids)}
    assert sink_ids - {r[0] for r in _rows(client, db_engine, ids)} == missing
    client.command(
        "ALTER TABLE {db:Identifier}.dead_letters "
        "DELETE WHERE dead_letter_id IN {ids:Array(String)}",
        parameters={"db": db_sink, "ids": sorted(missing)},
        settings={"mutations_sync": 2},
    )
    assert reader_view(client, db_engine) == reader_view(client, db_sink)


# ---- tests ------------------------------------------------------------------------------


@pytest.fixture
def two_stores(chdb_dsn: str) -> Iterator[tuple[Client, str, str]]:
    """``(client, sink database, engine database)``: two migrated databases, dropped after."""
    names = [f"t_{uuid.uuid4().hex[:12]}_sink", f"t_{uuid.uuid4().hex[:12]}_engine"]
    client = connect(chdb_dsn, names[0])
    try:
        for name in names:
            client.command(f"CREATE DATABASE IF NOT EXISTS `{name}`")
            migrate(client, name)
        yield client, names[0], names[1]
    finally:
        for name in names:
            client.command(f"DROP DATABASE IF EXISTS `{name}`")
        client.close()


def test_defaults_and_topics_match_the_application() -> None:
    defaults = {name: f.default for name, f in Settings.model_fields.items()}  # not the env's
    assert {
        "warehouse_database": DEFAULT_DATABASE,
        "kafka_topic_prefix": DEFAULT_TOPIC_PREFIX,
        "kafka_bootstrap_servers": DEFAULT_BROKER_LIST,
    }.items() <= defaults.items()
    group = defaults["kafka_consumer_group"]
    assert (f"{group}-clickhouse", f"{group}-sink") == (DEFAULT_GROUP, f"{group}-sink")
    # the topics the sink reads, with the names streams.topics gives them
    topics = Topics.from_prefix("p.")
    engine = KafkaEngineConfig(topic_prefix="p.")
    assert {s.role: engine.topic(s) for s in KAFKA_SOURCES} == {
        role: getattr(topics, role)
        for role in ("stored_events", "assessments", "audit_batches", "dead_letters")
    }
    assert all(ROLES[s.role][0] == s.suffix for s in KAFKA_SOURCES)


@pytest.mark.parametrize(
    "bad",
    [
        {"database": "x; DROP TABLE y"},
        {"topic_prefix": "a'b"},
        {"broker_list": "h:1', kafka_format = 'CSV"},
        {"broker_list": ""},
        {"group": ""},
        {"num_consumers": 0},
        {"extra_settings": {"kafka_format": "CSV"}},
        {"extra_settings": {"max_threads": 1}},
    ],
)
def test_values_that_cannot_go_into_the_ddl_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        kafka_engine_statements(KafkaEngineConfig(**bad))


def test_the_group_is_quoted_and_every_topic_has_its_own() -> None:
    cfg = KafkaEngineConfig(group="o'brien", extra_settings={"kafka_security_protocol": "ssl"})
    sql = "\n".join(kafka_engine_statements(cfg))
    for source in KAFKA_SOURCES:
        assert f"kafka_group_name = 'o\\'brien-{source.suffix}'" in sql
    assert sql.count("kafka_security_protocol = 'ssl'") == 4
    assert sql.count("kafka_handle_error_mode = 'stream'") == 4


def test_the_committed_files_are_the_rendered_defaults() -> None:
    assert (DEPLOY / "kafka_engine.sql").read_text(encoding="utf-8") == render_kafka_engine_sql()
    xml = (DEPLOY / "refusal-audit-kafka.xml").read_text(encoding="utf-8")
    assert xml == render_kafka_consumer_config()
    topics = ET.fromstring(xml).findall("./kafka/consumer/kafka_topic")
    assert {(t.findtext("name"), t.findtext("isolation_level")) for t in topics} == {
        (DEFAULT_TOPIC_PREFIX + s.suffix, "read_committed") for s in KAFKA_SOURCES
    }


@pytest.mark.integration
def test_the_views_produce_every_column_of_the_tables_with_their_types(
    two_stores: tuple[Client, str, str],
) -> None:
    client, _, database = two_stores
    apply(client, kafka_engine_statements(KafkaEngineConfig(database=database), stand_in=True))
    differ = {}
    for source in KAFKA_SOURCES:
        table = [(r[0], r[1]) for r in _rows(
            client, database, f"DESCRIBE TABLE {{db:Identifier}}.{source.table}"
        )]  # fmt: skip
        select = client.query(
            "SELECT as_select FROM system.tables "
            "WHERE database = {db:String} AND name = {n:String}",
            parameters={"db": database, "n": f"kafka_{source.role}_rows"},
        ).result_rows[0][0]
        view = [(r[0], r[1]) for r in _rows(client, database, f"DESCRIBE ({select})")]
        plain = [(n, t.replace("LowCardinality(String)", "String")) for n, t in table]
        assert [n for n, _ in view] == [n for n, _ in plain]
        differ.update(
            {(source.table, a[0]): (a[1], b[1]) for a, b in zip(view, plain, strict=True) if a != b}
        )
    assert differ == {}


@pytest.mark.integration
def test_the_views_store_what_the_sink_stores(
    two_stores: tuple[Client, str, str], worker_messages: list[OutputMessage]
) -> None:
    client, db_sink, db_engine = two_stores
    records = as_records(worker_messages)
    counts = {t: sum(1 for r in records if r.t == t) for t in {r.t for r in records}}
    assert counts[TOPICS.stored_events] > 400 and counts[TOPICS.assessments] > 200
    assert counts[TOPICS.audit_batches] > 1 and counts[TOPICS.dead_letters] > 10
    sink_path(Warehouse(client, db_sink, retries=1), records)
    apply(client, kafka_engine_statements(KafkaEngineConfig(database=db_engine), stand_in=True))
    engine_path(client, db_engine, records)
    store = Warehouse(client, db_engine, retries=1)
    assert store.count_events() == counts[TOPICS.stored_events]
    assert store.count_assessments() > 200 and store.count_batches() == counts[TOPICS.audit_batches]
    assert_same_results(client, db_sink, db_engine, records)
    # nothing was rejected: every worker message validates
    assert _rows(client, db_engine, "SELECT count() FROM {db:Identifier}.dead_letters "
                 "WHERE reason_code = 'sink_decode'") == [(0,)]  # fmt: skip
    # a redelivered block (at least once: no deduplication token) changes no result
    engine_path(client, db_engine, records)
    assert reader_view(client, db_engine) == reader_view(client, db_sink)


def _reject_cases(worker_messages: list[OutputMessage]) -> list[OutputMessage]:
    """Messages no worker of this version writes, each with what pydantic says of it."""
    event = orjson.loads(next(m.value for m in worker_messages if m.topic == TOPICS.stored_events
                              and m.value))  # fmt: skip
    assessment = next(m.value for m in worker_messages if m.topic == TOPICS.assessments)
    batch = orjson.loads(next(m.value for m in worker_messages
                              if m.topic == TOPICS.audit_batches and m.value))  # fmt: skip
    flags = [
        {"description": "d", "example_log_ids": []},
        {"description": "", "example_log_ids": [1]},
    ]
    batch_bad = {**batch, "summary": {**batch["summary"], "policy_gap_flags": flags}}
    letter = next(m for m in worker_messages if m.topic == TOPICS.dead_letters and m.value)
    bad_stage = [(n, "bogus" if n == "x-stage" else v) for n, v in letter.headers or []]
    cases: list[tuple[str, bytes | None, Any]] = [
        (TOPICS.stored_events, b"{not json", None),
        (TOPICS.stored_events, b"\xff\xfe binary", None),
        (TOPICS.stored_events, b"[1, 2]", None),
        (TOPICS.stored_events, b'{"a": 1}{"b": 2}', None),
        (TOPICS.stored_events, b"x" * 70_000, None),
        (TOPICS.stored_events, assessment, None),  # the wrong topic
        (
            TOPICS.stored_events,
            orjson.dumps({**event, "event": {**event["event"], "log_id": 5}}),
            None,
        ),
        (TOPICS.stored_events, orjson.dumps({**event, "refusal_kind": "maybe", "zzz": 1}), None),
        (
            TOPICS.stored_events,
            orjson.dumps({**event, "refusal_disagreement": "sideways"}),
            None,
        ),
        (TOPICS.stored_events, orjson.dumps({**event, "detected_refusal_score": 1.5}), None),
        (
            TOPICS.stored_events,
            orjson.dumps({**event, "redactions": {"EMAIL": "x"}, "ingested_at": "yesterday"}),
            None,
        ),
        (
            TOPICS.stored_events,
            orjson.dumps({k: v for k, v in event.items() if k != "event"}),
            None,
        ),
        (TOPICS.assessments, orjson.dumps({"log_id": "a"}), None),
        (
            TOPICS.assessments,
            orjson.dumps({**orjson.loads(assessment), "false_positive_score": 2}),
            None,
        ),
        (TOPICS.audit_batches, orjson.dumps(batch_bad), None),
        (TOPICS.dead_letters, b"raw bytes without our headers", [("x-stage", b"decode")]),
        (TOPICS.dead_letters, letter.value, bad_stage),
    ]
    return [OutputMessage(t, v, None, h) for t, v, h in cases]


@pytest.mark.integration
def test_messages_the_sink_cannot_decode_become_the_same_dead_letters(
    two_stores: tuple[Client, str, str], worker_messages: list[OutputMessage]
) -> None:
    client, db_sink, db_engine = two_stores
    records = as_records(_reject_cases(worker_messages))
    sink_path(Warehouse(client, db_sink, retries=1), records)
    apply(client, kafka_engine_statements(KafkaEngineConfig(database=db_engine), stand_in=True))
    engine_path(client, db_engine, records)
    sql = (
        "SELECT source, location, stage, reason_code, reason, raw, raw_length, raw_sha256, "
        "raw_truncated, log_id, created_at FROM {db:Identifier}.dead_letters FINAL "
        "ORDER BY source, location"
    )
    sink, engine = _rows(client, db_sink, sql), _rows(client, db_engine, sql)
    assert len(sink) == len(records) and all(r[3] == "sink_decode" for r in sink)
    assert [r[:4] + r[5:] for r in engine] == [r[:4] + r[5:] for r in sink]
    # the failing fields are named as pydantic names them (sorted, as the sink lists them)
    json_topics = [(r[0], r[4]) for r in sink if r[0] != TOPICS.dead_letters]
    assert [(r[0], r[4]) for r in engine if r[0] != TOPICS.dead_letters] == json_topics
    assert ("ke.stored-events", "not a StoredEvent: refusal_kind, zzz") in json_topics
    assert ("ke.stored-events", "not a StoredEvent: refusal_disagreement") in json_topics
    assert ("ke.stored-events", "not a StoredEvent: detected_refusal_score") in json_topics
    assert ("ke.audit-batches", "not a BatchRecord: summary.policy_gap_flags.0.example_log_ids, "
            "summary.policy_gap_flags.1.description, summary.policy_gap_flags.1.example_log_ids.0"
            ) in json_topics  # fmt: skip
    reasons = [r[4] for r in engine if r[0] == TOPICS.dead_letters]
    assert sorted(reasons) == [
        "not a dead-letter message: x-dead-letter-created-at, x-dead-letter-id, x-reason, "
        "x-reason-code, x-source, x-source-location",
        "not a dead-letter message: x-stage",
    ]
    # nothing reached the other tables
    for table in ("refusal_events", "assessments", "audit_batches"):
        assert _rows(client, db_engine, f"SELECT count() FROM {{db:Identifier}}.{table}") == [(0,)]


@pytest.fixture(scope="module")
def later_copy() -> tuple[str, list[OutputMessage]]:
    """A later worker window holding one log id of the example log again, with another
    request: ``(log_id, its output messages)``."""
    first = orjson.loads(EXAMPLE_LOG.read_bytes().splitlines()[0])
    changed = {**first, "request": first["request"] + " Please, it is urgent."}
    outputs = TopicOutputs(TOPICS)
    pipeline = build_pipeline(settings(), outputs)
    record = SourceRecord(TOPICS.input, kafka_location(0, 10_000), orjson.dumps(changed))
    asyncio.run(pipeline.run([InputSource([record], "jsonl", DecodeOptions())]))
    return str(first["log_id"]), outputs.take()


@pytest.mark.integration
def test_a_later_copy_with_other_content_wins_in_the_views_but_not_in_the_sink(
    two_stores: tuple[Client, str, str],
    worker_messages: list[OutputMessage],
    later_copy: tuple[str, list[OutputMessage]],
) -> None:
    """The documented difference: the views cannot apply the duplicate-log-id rule across
    windows (the sink's ``refusal_audit.streaming.sink_rules``): ReplacingMergeTree keeps the
    newest."""
    client, db_sink, db_engine = two_stores
    log_id, later = later_copy
    records = as_records([*worker_messages, *later])
    first, second = records[: len(worker_messages)], records[len(worker_messages) :]
    store = Warehouse(client, db_sink, retries=1)
    apply(client, kafka_engine_statements(KafkaEngineConfig(database=db_engine), stand_in=True))
    for window in (first, second):
        sink_path(store, window)
        engine_path(client, db_engine, window)
    requests = "SELECT request FROM {db:Identifier}.refusal_events FINAL WHERE log_id = {id:String}"
    current = ("SELECT audited_at FROM {db:Identifier}.current_assessments "
               "WHERE log_id = {id:String}")  # fmt: skip
    dup = ("SELECT count() FROM {db:Identifier}.dead_letters FINAL "
           "WHERE reason_code = 'duplicate_log_id' AND log_id = {id:String}")  # fmt: skip

    def read(db: str, sql: str) -> list[Any]:
        return [r[0] for r in client.query(sql, parameters={"db": db, "id": log_id}).result_rows]

    audited = [StoredAssessment.model_validate_json(m.value or b"").audited_at
               for m in (*worker_messages, *later)
               if m.topic == TOPICS.assessments and m.key == log_id.encode()]  # fmt: skip
    assert len(audited) == 2
    assert read(db_sink, requests) != read(db_engine, requests)
    assert "urgent" not in read(db_sink, requests)[0] and "urgent" in read(db_engine, requests)[0]
    assert [a.replace(microsecond=a.microsecond // 1000 * 1000) for a in audited] == [
        *read(db_sink, current),
        *read(db_engine, current),
    ]
    assert (read(db_sink, dup), read(db_engine, dup)) == ([1], [0])


# ---- the real Kafka engine (chDB runs it) against the real broker ----------------------


def _create(client: Client, statement: str, database: str) -> None:
    """Run one statement. chDB (26.9) answers ``CREATE TABLE ... ENGINE = Kafka`` with
    "Shutdown was called" (LOGICAL_ERROR) although it created, started and attached the
    table (it then consumes): that answer counts as success when the table exists."""
    try:
        client.command(statement)
    except Exception as exc:
        if "Shutdown was called" not in str(exc) or "ENGINE = Kafka" not in statement:
            raise
        name = statement.split("IF NOT EXISTS ", 1)[1].split()[0].split(".", 1)[1]
        exists = client.query(
            "SELECT count() FROM system.tables WHERE database = {db:String} AND name = {n:String}"
            " AND engine = 'Kafka'",
            parameters={"db": database, "n": name},
        ).result_rows[0][0]
        if not exists:
            raise


def _produce_transactionally(
    bootstrap: str, batches: Sequence[tuple[bool, Sequence[OutputMessage]]]
) -> None:
    """Each batch in one transaction of one transactional producer: committed when its
    flag is true, else aborted (the way a worker's failed window ends)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"ke-test-{uuid.uuid4().hex[:8]}"})  # fmt: skip
    producer.init_transactions(30)
    for commit, messages in batches:
        producer.begin_transaction()
        for m in messages:
            producer.produce(m.topic, value=m.value, key=m.key, headers=m.headers)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def _poisoned(messages: Sequence[OutputMessage]) -> list[OutputMessage]:
    """Later copies of every assessment and event that would win in the tables if read."""
    out = []
    for m in messages:
        if m.topic.endswith("assessments") and m.value:
            a = StoredAssessment.model_validate_json(m.value)
            late = a.model_copy(
                update={"category": "ABORTED", "audited_at": a.audited_at.replace(year=2100)}
            )
            out.append(replace(m, value=late.model_dump_json().encode()))
        elif m.topic.endswith("stored-events") and m.value:
            e = StoredEvent.model_validate_json(m.value)
            late_e = e.model_copy(
                update={"source": "ABORTED", "ingested_at": e.ingested_at.replace(year=2100)}
            )
            out.append(replace(m, value=late_e.model_dump_json().encode()))
    return out


@pytest.mark.integration
@pytest.mark.kafka
def test_chdbs_kafka_engine_runs_the_shipped_ddl_like_the_sink(
    two_stores: tuple[Client, str, str],
    worker_messages: list[OutputMessage],
    kafka_bootstrap: str,
    unique_topic_prefix: str,
) -> None:
    from streams.blocks import BlockLimits, BlockReader
    from streams.topics import admin_client, create_topics, topic_specs

    client, db_sink, db_engine = two_stores
    topics = Topics.from_prefix(unique_topic_prefix)
    create_topics(admin_client(kafka_bootstrap), topic_specs(unique_topic_prefix, 3, 1))
    messages = [replace(m, topic=unique_topic_prefix + m.topic[len(PREFIX):])
                for m in worker_messages]  # fmt: skip
    produced = [m for m in messages if not m.topic.endswith("review-queue")]
    _produce_transactionally(kafka_bootstrap, [(True, messages), (False, _poisoned(messages))])

    # the sink's path, reading the topics as `refusal-audit sink` does (read_committed)
    reader = BlockReader(kafka_bootstrap, f"{unique_topic_prefix}sink",
                         [getattr(topics, s.role) for s in KAFKA_SOURCES],
                         BlockLimits(max_wait=0.5))  # fmt: skip
    sink = WarehouseSink(Warehouse(client, db_sink, retries=1), reader, topics)
    consumed: list[Msg] = []
    deadline = time.monotonic() + 120
    try:
        while len(consumed) < len(produced) and time.monotonic() < deadline:
            block = reader.next_block()
            if block is None:
                continue
            sink.store_block(block)
            reader.commit(block)
            consumed += [Msg.of(r) for rs in block.records.values() for r in rs]
    finally:
        reader.close()
    assert len(consumed) == len(produced)

    # the shipped DDL, unchanged, on chDB's Kafka engine
    cfg = KafkaEngineConfig(
        database=db_engine,
        topic_prefix=unique_topic_prefix,
        broker_list=kafka_bootstrap,
        group=f"{unique_topic_prefix}ch",
    )
    try:
        for statement in kafka_engine_statements(cfg):
            _create(client, statement, db_engine)
        # the stand-in tables of the other tests have the Kafka table's columns and types
        for source in KAFKA_SOURCES:
            described = _rows(
                client,
                db_engine,
                f"DESCRIBE TABLE {{db:Identifier}}.kafka_{source.role}_queue "
                "SETTINGS describe_include_virtual_columns = 1",
            )
            columns = {str(r[0]): str(r[1]) for r in described}
            assert {c: columns.get(c) for c in QUEUE_COLUMNS} == dict(QUEUE_COLUMNS)
        renamed = [replace(m, t=PREFIX + m.t[len(unique_topic_prefix) :]) for m in consumed]
        letters = "SELECT count() FROM {db:Identifier}.dead_letters FINAL"
        engine = Warehouse(client, db_engine, retries=1)
        want = Warehouse(client, db_sink, retries=1)
        expected = (
            want.count_events(),
            want.count_assessments(),
            want.count_batches(),
            _rows(client, db_sink, letters)[0][0] - len(empty_value_letters(renamed)),
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            got = (engine.count_events(), engine.count_assessments(), engine.count_batches(),
                   _rows(client, db_engine, letters)[0][0])  # fmt: skip
            if got == expected:
                break
            time.sleep(1)
        sink_view = reader_view(client, db_sink)
        engine_view = reader_view(client, db_engine)
        assert engine_view["refusal_events"] == sink_view["refusal_events"]
        assert_same_results(client, db_sink, db_engine, renamed)
        # the aborted transaction reached neither
        for db in (db_sink, db_engine):
            assert _rows(client, db, "SELECT count() FROM {db:Identifier}.assessments "
                         "WHERE category = 'ABORTED'") == [(0,)]  # fmt: skip
            assert _rows(client, db, "SELECT count() FROM {db:Identifier}.refusal_events "
                         "WHERE source = 'ABORTED'") == [(0,)]  # fmt: skip
    finally:
        for statement in kafka_engine_drop_statements(cfg):
            client.command(statement)
