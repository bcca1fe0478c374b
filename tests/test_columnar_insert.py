"""The columnar inserts (``warehouse.columnar``, issue 27) store exactly what the driver's
row inserts stored.

The sink's four tables are now inserted as one Arrow table each, typed from the table's DDL;
before, clickhouse-connect serialised the same rows (``warehouse.rows``' builders) itself.
Every row built from real worker output (the shared pipeline, local engine, over the example
log and the malformed-record fixture, as the transactional worker writes it) and from records
with odd values (nulls, empty and unicode texts, NUL and quote characters, sub-millisecond and
pre-1970 times, naive and offset times, the integer columns' limits, nested policy-gap flags,
non-UTF-8 dead-letter bytes) goes both ways into two databases of the embedded store, and every
table (and the first-arrivals table the events' materialized view fills) must read back the
same. The deduplication token is the insert's, as before: an insert repeated with it adds
nothing. The owner channel carries the columnar insert too (tests/test_owner_channel.py runs
the CLI through it).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pytest
from clickhouse_connect.datatypes.registry import get_from_name
from test_kafka_engine_ddl import TOPICS, worker_messages  # noqa: F401  (a fixture)

from schemas.audit import (
    AuditSummary,
    BatchRecord,
    EngineUsage,
    PolicyGapFlag,
    StoredAssessment,
)
from schemas.deadletter import DeadLetter
from schemas.events import ClassifierSignal, RefusalEvent, StoredEvent
from streams.dead_letters import dead_letter_from_message
from streams.transactional import OutputMessage
from warehouse import Warehouse, migrate
from warehouse.client import Client
from warehouse.columnar import arrow_type
from warehouse.rows import (
    TABLE_COLUMNS,
    assessment_row,
    batch_row,
    dead_letter_row,
    event_row,
)

pytestmark = pytest.mark.integration

NEPAL = timezone(timedelta(hours=5, minutes=45))
T = datetime(2026, 3, 1, 12, 0, 0, 999_999, tzinfo=NEPAL)
#: The audit provenance of the odd assessments and batches.
PROVENANCE: dict[str, Any] = {"policy_bundle": "default", "bundle_version": "v", "engine": "local",
                              "engine_model": "", "engine_version": "1",
                              "prompt_version": "none"}  # fmt: skip


def odd_events() -> list[StoredEvent]:
    """Events with the values a columnar encoding could get wrong."""
    texts = ["", "plain", "naïve café 東京 🙂 مرحبا", "nul\x00inside", "quote ' \" ` \\ \t\n"]
    out = []
    for i, text in enumerate(texts):
        signal = (None, ClassifierSignal(), ClassifierSignal(flagged=True, score=0.0,
                  labels=["a", text], is_refusal=False))[i % 3]  # fmt: skip
        out.append(StoredEvent(
            event=RefusalEvent(log_id=f"odd-{i}-{text[:3]}", request=text, response=text * 3,
                               event_time=T if i % 2 else datetime(1970, 1, 1, tzinfo=UTC),
                               model="m", conversation_id=None if i % 2 else text,
                               classifier=signal, attributes={text: text, "k": ""} if i else {}),
            redactions={"email": 2**32 - 1, "ünï": 0} if i else {},
            is_refusal=bool(i % 2), refusal_kind=("full", "partial", "none")[i % 3],
            refusal_score=(0.0, 1.0, 0.1 + 0.2)[i % 3], refusal_cues=[text] if i else [],
            source=text, ingested_at=T + timedelta(microseconds=i * 333),
            content_fingerprint="" if i == 2 else f"fp{i}",
            detected_is_refusal=None if i % 2 else True,
            detected_refusal_score=None if i % 2 else 0.5,
            refusal_disagreement=("none", "classifier_refusal_detector_not")[i % 2],
        ))  # fmt: skip
    return out


def odd_assessments() -> list[StoredAssessment]:
    """Assessments with naive, pre-1970, offset and far-future times and null fields."""
    times = [datetime(1969, 12, 31, 23, 59, 59, 999_500), T, datetime(2299, 12, 31, 23, 59, 59),
             datetime(1900, 1, 1, 0, 0, 0, 1)]  # fmt: skip
    return [
        StoredAssessment(
            log_id=f"odd-{i}",
            category="über ✓",
            is_estimated_false_positive=bool(i % 2),
            policy_clause_cited=None if i % 2 else "AUP-1",
            assessment_rationale="r ' \\ 🙂",
            requires_human_review=not i % 2,
            batch_id=f"b{i}",
            **PROVENANCE,
            audited_at=at,
            event_time=at,
            model="m",
            product="p",
            false_positive_score=None if i % 2 else 0.123456789,
            sampled_for_review=bool(i),
            review_reason="" if i else "flagged",
        )
        for i, at in enumerate(times)
    ]


def odd_batches() -> list[BatchRecord]:
    """Batches with nested policy-gap flags, empty collections and the integer limits."""
    flags = [PolicyGapFlag(description="gap ' 東京", example_log_ids=["a", "b"]),
             PolicyGapFlag(description="second", example_log_ids=["c"])]  # fmt: skip
    return [
        BatchRecord(
            batch_id=f"batch-{i}",
            **PROVENANCE,
            audited_at=T,
            log_ids=["a", "b"] if i else [],
            summary=AuditSummary(
                total_refusals=2**32 - 1 if i else 0,
                categorization={"privacy": 1, "ünï": 2**32 - 1} if i else {},
                estimated_false_positives=i,
                policy_gap_flags=flags if i else [],
                trends_identified=["t ✓"] if i else [],
            ),
            usage=EngineUsage(
                prompt_tokens=2**64 - 1 if i else 0,
                cached_tokens=i,
                completion_tokens=7,
                latency_ms=float("inf") if i else 0.1 + 0.2,
            ),
        )
        for i in range(2)
    ]


def odd_letters() -> list[DeadLetter]:
    """Dead letters with non-UTF-8 bytes, an empty value and a missing log id."""
    return [
        DeadLetter(dead_letter_id="d1", stage="decode", reason_code="not_json", reason="r",
                   source="s", location="line 1", raw=b"\xff\xfe\x00'\\", log_id=None,
                   created_at=T),
        DeadLetter(dead_letter_id="d2", stage="store", reason_code="sink_decode", reason="",
                   source="", location="", raw=b"", raw_length=10**12, raw_sha256="ab" * 32,
                   raw_truncated=True, log_id="x 🙂", created_at=datetime(2001, 1, 1)),
    ]  # fmt: skip


def real_rows(messages: Sequence[OutputMessage]) -> dict[str, list[list[Any]]]:
    """The rows of real worker output, per table, built as the sink builds them."""
    rows: dict[str, list[list[Any]]] = {table: [] for table in TABLE_COLUMNS}
    for m in messages:
        if m.topic == TOPICS.stored_events:
            rows["refusal_events"].append(event_row(StoredEvent.model_validate_json(m.value)))
        elif m.topic == TOPICS.assessments:
            item = StoredAssessment.model_validate_json(m.value)
            rows["assessments"].append(assessment_row(item))
        elif m.topic == TOPICS.audit_batches:
            rows["audit_batches"].append(batch_row(BatchRecord.model_validate_json(m.value)))
        elif m.topic == TOPICS.dead_letters and m.value:
            letter = dead_letter_from_message(m.value, m.headers)
            rows["dead_letters"].append(dead_letter_row(letter))
    return rows


@pytest.fixture
def two_databases(warehouse_db: tuple[Client, str]) -> Iterator[tuple[Warehouse, Warehouse]]:
    """The same store's fixture database (rows) and a second migrated one (columnar)."""
    client, database = warehouse_db
    other = f"t_{uuid.uuid4().hex[:16]}"
    client.command(f"CREATE DATABASE `{other}`")
    migrate(client, other)
    try:
        yield Warehouse(client, database, retries=1), Warehouse(client, other, retries=1)
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{other}`")


def read_back(wh: Warehouse, table: str) -> list[tuple[Any, ...]]:
    """Every stored row of ``table`` (all parts, no FINAL), in a stable order."""
    result = wh.client.query(
        f"SELECT * FROM `{wh.database}`.`{table}`", column_formats={"raw": "bytes"}
    )
    return sorted((tuple(r) for r in result.result_rows), key=repr)


def test_columnar_and_row_inserts_store_the_same_rows(
    two_databases: tuple[Warehouse, Warehouse],
    worker_messages: list[OutputMessage],  # noqa: F811
) -> None:
    by_rows, by_columns = two_databases
    built = real_rows(worker_messages)
    assert all(built.values()), "the worker output has rows for every table"
    built["refusal_events"] += [event_row(e) for e in odd_events()]
    built["assessments"] += [assessment_row(a) for a in odd_assessments()]
    built["audit_batches"] += [batch_row(b) for b in odd_batches()]
    built["dead_letters"] += [dead_letter_row(d) for d in odd_letters()]
    for table, rows in built.items():
        by_rows._insert(table, TABLE_COLUMNS[table], rows, "t1")  # the driver's rows
        by_columns.insert_built(table, rows, "t1")
    for table in [*TABLE_COLUMNS, "event_arrivals"]:
        expected = read_back(by_rows, table)
        assert expected, table
        assert read_back(by_columns, table) == expected, table
    # the deduplication token is the insert's: the same block again adds nothing, another
    # token adds the rows again
    for table, rows in built.items():
        by_columns.insert_built(table, rows, "t1")
        assert len(read_back(by_columns, table)) == len(rows), table
    by_columns.insert_built("dead_letters", built["dead_letters"], "t2")
    assert len(read_back(by_columns, "dead_letters")) == 2 * len(built["dead_letters"])


def test_every_column_of_the_sink_tables_has_an_arrow_type(warehouse: Warehouse) -> None:
    for table, columns in TABLE_COLUMNS.items():
        described = dict(warehouse.client.query(
            f"SELECT name, type FROM system.columns WHERE database = '{warehouse.database}' "
            f"AND table = '{table}'"
        ).result_rows)  # fmt: skip
        assert set(columns) <= set(described), table  # the builders fill existing columns
        for column in columns:
            assert isinstance(arrow_type(get_from_name(described[column])), pa.DataType)


def test_unknown_types_and_bad_values_are_refused(warehouse: Warehouse) -> None:
    with pytest.raises(TypeError, match="no Arrow mapping"):
        arrow_type(get_from_name("IPv4"))
    bad = [dead_letter_row(d) for d in odd_letters()]
    bad[0][7] = -1  # raw_length is a UInt64
    from warehouse.client import WarehouseError

    with pytest.raises(WarehouseError, match="insert of 2 row"):
        warehouse.insert_built("dead_letters", bad, "t")
    assert read_back(warehouse, "dead_letters") == []


def test_timestamps_are_floored_to_the_column_precision_nested_ones_too() -> None:
    """The driver floors a datetime to its ``DateTime64`` ticks (pyarrow would truncate
    toward zero, which differs before 1970); a naive datetime is UTC."""
    from warehouse.columnar import arrow_schema, arrow_table

    before_epoch = datetime(1969, 12, 31, 23, 59, 59, 999_500, tzinfo=UTC)
    schema = arrow_schema([
        ("at", "DateTime64(3, 'UTC')"), ("ats", "Array(Nullable(DateTime64(3, 'UTC')))"),
        ("pair", "Tuple(name String, at DateTime64(6, 'UTC'))"),
        ("by", "Map(String, DateTime64(0, 'UTC'))"),
    ])  # fmt: skip
    rows = [[before_epoch, [T, None], ("x", datetime(1970, 1, 1, 0, 0, 1)), {"k": T}]]
    table = arrow_table(schema, rows).to_pylist()[0]
    assert table["at"] == datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
    assert table["ats"] == [datetime(2026, 3, 1, 6, 15, 0, 999_000, tzinfo=UTC), None]
    assert table["pair"] == {"name": b"x", "at": datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)}
    assert table["by"] == [(b"k", datetime(2026, 3, 1, 6, 15, 0, tzinfo=UTC))]
    with pytest.raises(ValueError, match="every row must have 4 values"):
        arrow_table(schema, [[before_epoch]])
