"""The warehouse on the embedded chDB engine: migrations, idempotent storage, named trend
queries (figures computed here from the inputs), the read-only guard and insert retries."""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from processors.stats import wilson_interval
from schemas import (
    AuditSummary,
    BatchRecord,
    ClassifierSignal,
    DeadLetter,
    EngineUsage,
    PolicyGapFlag,
    RefusalEvent,
    StoredAssessment,
    StoredEvent,
)
from schemas.deadletter import DeadLetterStage
from schemas.events import DISAGREEMENT_DIRECTIONS, RefusalDisagreement
from schemas.review import Verdict, VerdictInput, verdict_id
from warehouse import (
    NAMED_QUERIES,
    Migration,
    MigrationError,
    QueryResult,
    ReadOnlyViolation,
    UnknownQueryError,
    UnsupportedFilterError,
    Warehouse,
    WarehouseError,
    check_readonly,
    connect,
    load_migrations,
    migrate,
    run_named,
    run_readonly,
)
from warehouse.queries import run_guarded
from warehouse.retryable import is_transient
from warehouse.review import insert_verdicts

pytestmark = pytest.mark.integration

TABLES = (
    "refusal_events", "assessments", "audit_batches", "alerts", "dead_letters", "review_verdicts",
)  # fmt: skip

# Three event days across a month boundary (partitions are monthly).
DAY0 = datetime(2024, 2, 28, 9, 0, tzinfo=UTC)
AUDIT_TIME = datetime(2024, 3, 2, 12, 0, tzinfo=UTC)


# ---- a small hand-built dataset -------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One event and, for refusals, its audit outcome."""

    log_id: str
    day: int
    model: str
    product: str
    is_refusal: bool
    category: str = ""
    fp: bool = False
    clause: str | None = None
    review: bool = False
    sampled: bool = False
    batch: str = ""
    offset: timezone = UTC


SPECS = (
    Spec("e01", 0, "m-a", "chat", True, "harm.violence", False, "PSP-1.1", False, True, "b1"),
    Spec("e02", 0, "m-a", "chat", True, "over_refusal", True, None, True, True, "b1"),
    Spec("e03", 0, "m-b", "api", True, "harm.violence", False, "PSP-1.1", False, False, "b1"),
    Spec("e04", 0, "m-a", "api", False),
    # 00:30 at +02:00 on day 1 is still day 0 in UTC
    Spec("e04b", 1, "m-b", "api", True, "privacy", False, "AUP-2.3", True, False, "b1",
         timezone(timedelta(hours=2))),
    Spec("e05", 1, "m-a", "chat", True, "over_refusal", True, "AUP-2.3", True, True, "b2"),
    Spec("e06", 1, "m-b", "chat", True, "privacy", False, "AUP-2.3", False, False, "b2"),
    Spec("e07", 1, "m-b", "api", True, "over_refusal", True, None, False, True, "b2"),
    Spec("e08", 1, "m-b", "api", False),
    Spec("e09", 2, "m-a", "chat", True, "harm.violence", False, "PSP-1.1", True, False, "b2"),
    Spec("e10", 2, "m-a", "chat", False),
    Spec("e11", 2, "m-b", "chat", True, "over_refusal", True, None, False, False, "b3"),
)  # fmt: skip

GAPS = {
    "b1": [PolicyGapFlag(description="recipes with alcohol", example_log_ids=["e02"])],
    "b2": [
        PolicyGapFlag(description="fiction with violence", example_log_ids=["e07", "e05"]),
        PolicyGapFlag(description="recipes with alcohol", example_log_ids=["e05"]),
    ],
    "b3": [],
}
BATCH_AUDIT_DAY = {"b1": 0, "b2": 1, "b3": 1}


def event_time(spec: Spec) -> datetime:
    base = DAY0 + timedelta(days=spec.day)
    if spec.offset is UTC:
        return base
    return datetime(base.year, base.month, base.day, 0, 30, tzinfo=spec.offset)


#: day-1 events carry the platform classifier's verdict (``is_refusal``); our detection
#: disagrees with it on these two, one each way
DETECTOR_DISAGREES: dict[str, RefusalDisagreement] = {
    "e07": "classifier_refusal_detector_not",
    "e08": "detector_refusal_classifier_not",
}


def make_event(spec: Spec, ingested_at: datetime = AUDIT_TIME) -> StoredEvent:
    direction: RefusalDisagreement = DETECTOR_DISAGREES.get(spec.log_id, "none")
    detected = spec.is_refusal if direction == "none" else not spec.is_refusal
    return StoredEvent(
        event=RefusalEvent(
            log_id=spec.log_id,
            event_time=event_time(spec),
            request=f"request {spec.log_id} [EMAIL_1]",
            response="I can't help with that." if spec.is_refusal else "Sure, here it is.",
            model=spec.model,
            product=spec.product,
            conversation_id=f"c-{spec.log_id}" if spec.day else None,
            classifier=ClassifierSignal(
                flagged=spec.is_refusal, score=0.5, labels=["x"], is_refusal=spec.is_refusal
            )
            if spec.day == 1
            else None,
            attributes={"team": "t1", "spec": spec.log_id},
        ),
        redactions={"email": 1},
        is_refusal=spec.is_refusal,
        refusal_kind="full" if spec.is_refusal else "none",
        refusal_score=0.9 if spec.is_refusal else 0.1,
        refusal_cues=["i can't"] if spec.is_refusal else [],
        source="logs/day.jsonl",
        ingested_at=ingested_at,
        detected_is_refusal=detected,
        detected_refusal_score=0.8 if detected else 0.2,
        refusal_disagreement=direction,
    )


def make_assessment(
    spec: Spec, audited_at: datetime = AUDIT_TIME, **changes: Any
) -> StoredAssessment:
    values: dict[str, Any] = {
        "log_id": spec.log_id,
        "category": spec.category,
        "is_estimated_false_positive": spec.fp,
        "policy_clause_cited": spec.clause,
        "assessment_rationale": f"rationale {spec.log_id}",
        "requires_human_review": spec.review,
        "batch_id": spec.batch,
        "policy_bundle": "default",
        "bundle_version": "v1",
        "engine": "local",
        "engine_model": "local",
        "engine_version": "1",
        "prompt_version": "p1",
        "audited_at": audited_at,
        "event_time": event_time(spec),
        "model": spec.model,
        "product": spec.product,
        "false_positive_score": 0.8 if spec.fp else 0.1,
        "sampled_for_review": spec.sampled,
        "review_reason": "flagged" if spec.review else ("random_sample" if spec.sampled else ""),
    }
    values.update(changes)
    return StoredAssessment(**values)


def make_batch(batch_id: str) -> BatchRecord:
    members = [s for s in SPECS if s.batch == batch_id]
    return BatchRecord(
        batch_id=batch_id,
        policy_bundle="default",
        bundle_version="v1",
        engine="local",
        engine_model="local",
        engine_version="1",
        prompt_version="p1",
        audited_at=DAY0 + timedelta(days=BATCH_AUDIT_DAY[batch_id], hours=5),
        log_ids=[s.log_id for s in members],
        summary=AuditSummary(
            total_refusals=len(members),
            categorization=dict(Counter(s.category for s in members)),
            estimated_false_positives=sum(s.fp for s in members),
            policy_gap_flags=GAPS[batch_id],
            trends_identified=[f"trend of {batch_id}"],
        ),
        usage=EngineUsage(prompt_tokens=100, completion_tokens=20, latency_ms=12.5),
    )


def make_dead_letters() -> list[DeadLetter]:
    def dl(i: int, stage: DeadLetterStage, code: str, source: str) -> DeadLetter:
        return DeadLetter(
            dead_letter_id=f"dl{i}",
            stage=stage,
            reason_code=code,
            reason=f"reason {i}",
            source=source,
            location=f"line {i}",
            raw=b"\xff\xfe not json " + bytes([i]),
            log_id=None if i % 2 else f"e{i}",
            created_at=DAY0 + timedelta(days=i % 3),
        )

    return [
        dl(1, "decode", "not_json", "a.jsonl"),
        dl(2, "decode", "not_json", "b.jsonl"),
        dl(3, "decode", "not_json", "a.jsonl"),
        dl(4, "validate", "missing_log_id", "a.jsonl"),
        dl(5, "audit", "engine_error", "topic"),
    ]


REFUSALS = [s for s in SPECS if s.is_refusal]
EVENTS = [make_event(s) for s in SPECS]
ASSESSMENTS = [make_assessment(s) for s in REFUSALS]
BATCHES = [make_batch(b) for b in ("b1", "b2", "b3")]
DEAD_LETTERS = make_dead_letters()


def verdicts() -> list[Verdict]:
    """One reviewer's verdict on every assessment: agree, except a corrected false-positive
    judgement on every third (so the review queries have rows)."""
    out = []
    for i, a in enumerate(ASSESSMENTS):
        said = (
            VerdictInput(log_id=a.log_id, reviewer="ann", verdict="agree")
            if i % 3
            else VerdictInput(log_id=a.log_id, reviewer="ann", verdict="disagree",
                              corrected_category=a.category,
                              corrected_false_positive=not a.is_estimated_false_positive)
        )  # fmt: skip
        out.append(
            Verdict(
                **said.model_dump(),
                verdict_id=verdict_id(said, a.policy_bundle, a.audited_at),
                policy_bundle=a.policy_bundle, assessment_audited_at=a.audited_at,
                model=a.model, product=a.product, model_category=a.category,
                model_false_positive=a.is_estimated_false_positive,
                model_clause=a.policy_clause_cited, engine=a.engine,
                engine_model=a.engine_model, engine_version=a.engine_version,
                prompt_version=a.prompt_version, bundle_version=a.bundle_version,
                review_reason=a.review_reason, submitted_at=AUDIT_TIME, source="test",
            )
        )  # fmt: skip
    return out


def load(wh: Warehouse) -> None:
    wh.insert_events(EVENTS)
    wh.insert_assessments(ASSESSMENTS)
    for batch in BATCHES:
        wh.insert_batch(batch)
    wh.insert_dead_letters(DEAD_LETTERS)
    insert_verdicts(wh, verdicts())


def utc_day(value: datetime) -> date:
    return value.astimezone(UTC).date()


def all_results(wh: Warehouse) -> dict[str, QueryResult]:
    return {name: run_named(wh.client, wh.database, name) for name in NAMED_QUERIES}


def stop_merges(wh: Warehouse) -> None:
    """Stop background merges in the test's database, so that ``raw_count`` only changes
    through inserts (a merge would collapse replaced rows and hide what dedup did)."""
    for table in TABLES:
        wh.client.command(f"SYSTEM STOP MERGES {wh.database}.{table}")


def raw_count(wh: Warehouse, table: str) -> int:
    """Rows physically stored (no FINAL): shows what insert deduplication dropped."""
    rows = wh.client.query(
        "SELECT count() FROM {db:Identifier}.{t:Identifier}",
        parameters={"db": wh.database, "t": table},
    ).result_rows
    return int(rows[0][0])


def assert_rows(result: QueryResult, expected: list[tuple[Any, ...]]) -> None:
    assert len(result.rows) == len(expected), (result.rows, expected)
    for got, want in zip(result.rows, expected, strict=True):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            if isinstance(w, float):
                assert g == pytest.approx(w, rel=1e-9, abs=1e-12), (got, want)
            else:
                assert g == w, (got, want)


# ---- migrations -----------------------------------------------------------------------------


def test_packaged_migrations_are_ordered_and_complete() -> None:
    migrations = load_migrations()
    versions = [m.version for m in migrations]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert len(migrations) >= len(TABLES)
    assert all(len(m.checksum) == 64 for m in migrations)


def test_migrations_are_idempotent(warehouse_db: tuple[Client, str]) -> None:
    client, database = warehouse_db
    # the fixture migrated already; running again applies nothing and changes nothing
    tables_before = client.query(
        "SELECT name, create_table_query FROM system.tables WHERE database = {db:String} "
        "ORDER BY name",
        parameters={"db": database},
    ).result_rows
    assert migrate(client, database) == []
    assert migrate(client, database) == []
    tables_after = client.query(
        "SELECT name, create_table_query FROM system.tables WHERE database = {db:String} "
        "ORDER BY name",
        parameters={"db": database},
    ).result_rows
    assert tables_after == tables_before
    names = {row[0] for row in tables_after}
    assert set(TABLES) | {"schema_migrations"} <= names
    recorded = client.query(
        "SELECT version FROM {db:Identifier}.schema_migrations FINAL ORDER BY version",
        parameters={"db": database},
    ).result_rows
    assert [r[0] for r in recorded] == [m.version for m in load_migrations()]


def test_fresh_database_gets_all_migrations(chdb_dsn: str) -> None:
    database = "t_fresh_migrate"
    client = connect(chdb_dsn, database)
    try:
        applied = migrate(client, database)
        assert applied == [m.id for m in load_migrations()]
        assert migrate(client, database) == []
    finally:
        client.command(f"DROP DATABASE IF EXISTS {database}")
        client.close()


def test_changed_applied_migration_raises(warehouse_db: tuple[Client, str]) -> None:
    client, database = warehouse_db
    original = Migration(
        "9001", "extra", "CREATE TABLE IF NOT EXISTS {db}.extra (a Int8) ENGINE = Memory"
    )
    assert migrate(client, database, migrations=[original]) == ["9001_extra"]
    assert migrate(client, database, migrations=[original]) == []
    changed = Migration("9001", "extra", original.sql + " -- edited")
    with pytest.raises(MigrationError, match="9001_extra"):
        migrate(client, database, migrations=[changed])


def test_failed_migration_is_not_recorded(warehouse_db: tuple[Client, str]) -> None:
    client, database = warehouse_db
    broken = Migration("9002", "broken", "CREATE TABLE {db}.nope (a NoSuchType) ENGINE = Memory")
    with pytest.raises(MigrationError, match="9002_broken"):
        migrate(client, database, migrations=[broken])
    fixed = Migration("9002", "broken", "CREATE TABLE IF NOT EXISTS {db}.nope (a Int8) ENGINE=Log")
    assert migrate(client, database, migrations=[fixed]) == ["9002_broken"]


# ---- connect ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dsn", "database", "match"),
    [
        ("chdb://relative/path", "db", "absolute"),
        ("ftp://host/x", "db", "unsupported"),
        ("chdb:///tmp/x", "bad-name; DROP", "invalid database name"),
        ("http://user:s3cret@127.0.0.1:1", "db", r"user:\*\*\*@"),
    ],
)
def test_connect_errors(dsn: str, database: str, match: str) -> None:
    with pytest.raises(WarehouseError, match=match) as info:
        connect(dsn, database)
    assert "s3cret" not in str(info.value)


def test_second_chdb_path_is_a_clear_error(
    warehouse_db: tuple[Client, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    other = tmp_path_factory.mktemp("other").resolve()
    with pytest.raises(WarehouseError, match="one data path per process"):
        connect(f"chdb://{other}", "db")


# ---- storage --------------------------------------------------------------------------------


def test_round_trip_of_all_record_kinds(warehouse: Warehouse) -> None:
    load(warehouse)
    assert warehouse.count_events() == len(EVENTS)
    assert warehouse.count_assessments() == len(ASSESSMENTS)
    assert warehouse.count_batches() == len(BATCHES)

    current = {a["log_id"]: a for a in warehouse.current_assessments()}
    assert set(current) == {a.log_id for a in ASSESSMENTS}
    for assessment in ASSESSMENTS:
        expected = assessment.model_dump()
        expected["event_time"] = assessment.event_time.astimezone(UTC)
        assert current[assessment.log_id] == expected

    subset = warehouse.current_assessments(["e02", "e05", "nope"])
    assert [a["log_id"] for a in subset] == ["e02", "e05"]
    assert warehouse.current_assessments([]) == []

    letters = {d["dead_letter_id"]: d for d in warehouse.dead_letters(limit=100)}
    assert set(letters) == {d.dead_letter_id for d in DEAD_LETTERS}
    for letter in DEAD_LETTERS:
        assert letters[letter.dead_letter_id] == letter.model_dump()
    assert len(warehouse.dead_letters(limit=2)) == 2

    batches = {b["batch_id"]: b for b in warehouse.batches()}
    b2 = batches["b2"]
    assert b2["policy_gap_flags"] == [f.model_dump() for f in GAPS["b2"]]
    assert b2["categorization"] == dict(Counter(s.category for s in SPECS if s.batch == "b2"))
    assert b2["log_ids"] == make_batch("b2").log_ids

    events = warehouse.client.query(
        "SELECT * FROM {db:Identifier}.refusal_events FINAL ORDER BY log_id",
        parameters={"db": warehouse.database},
    )
    by_id = {row["log_id"]: row for row in events.named_results()}
    for stored in EVENTS:
        row, event, signal = by_id[stored.event.log_id], stored.event, stored.event.classifier
        assert row["event_time"] == event.event_time.astimezone(UTC)
        assert (row["request"], row["response"]) == (event.request, event.response)
        assert (row["model"], row["product"]) == (event.model, event.product)
        assert row["conversation_id"] == event.conversation_id
        assert row["attributes"] == event.attributes
        assert row["redactions"] == stored.redactions
        assert row["has_classifier"] is (signal is not None)
        assert row["classifier_flagged"] == (signal.flagged if signal else None)
        assert row["classifier_score"] == (signal.score if signal else None)
        assert row["classifier_labels"] == (signal.labels if signal else [])
        assert row["is_refusal"] is stored.is_refusal
        assert (row["refusal_kind"], row["refusal_score"]) == (
            stored.refusal_kind,
            stored.refusal_score,
        )
        assert row["refusal_cues"] == stored.refusal_cues
        assert row["ingested_at"] == stored.ingested_at
        assert row["classifier_is_refusal"] == (signal.is_refusal if signal else None)
        ours = ("detected_is_refusal", "detected_refusal_score", "refusal_disagreement")
        assert [row[c] for c in ours] == [getattr(stored, c) for c in ours]


def test_alerts_round_trip(warehouse: Warehouse) -> None:
    created = datetime(2024, 3, 1, 8, 0, tzinfo=timezone(timedelta(hours=-5)))
    alert = {
        "alert_id": "a1",
        "kind": "false_positive_rate",
        "severity": "warning",
        "created_at": created,
        "model": "m-a",
        "window_start": DAY0,
        "payload": {"rate": 0.4, "baseline": 0.1},
    }
    warehouse.insert_alerts([alert, alert])
    rows = warehouse.alerts()
    assert len(rows) == 1
    assert rows[0]["created_at"] == created.astimezone(UTC)
    assert rows[0]["payload"] == '{"baseline": 0.1, "rate": 0.4}'
    assert rows[0]["product"] == "" and rows[0]["window_end"] is None
    with pytest.raises(ValueError, match="unknown alert field"):
        warehouse.insert_alerts([{**alert, "colour": "red"}])
    with pytest.raises(ValueError, match="missing required field 'severity'"):
        warehouse.insert_alerts([{k: v for k, v in alert.items() if k != "severity"}])


def test_empty_inserts_are_no_ops(warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("insert called for an empty sequence")

    monkeypatch.setattr(warehouse.client, "insert", boom)
    monkeypatch.setattr(warehouse.client, "insert_arrow", boom)
    warehouse.insert_events([])
    warehouse.insert_batches([])
    warehouse.insert_assessments([])
    warehouse.insert_dead_letters([])
    warehouse.insert_alerts([])


def test_redelivery_and_rerun_change_no_result(warehouse: Warehouse) -> None:
    stop_merges(warehouse)
    load(warehouse)
    counts = (warehouse.count_events(), warehouse.count_assessments(), warehouse.count_batches())
    results = all_results(warehouse)
    raw = {t: raw_count(warehouse, t) for t in TABLES}
    assert all(results[name].rows for name in NAMED_QUERIES)

    # identical retry: dropped at insert time by the dedup token
    load(warehouse)
    assert {t: raw_count(warehouse, t) for t in TABLES} == raw
    assert (
        warehouse.count_events(),
        warehouse.count_assessments(),
        warehouse.count_batches(),
    ) == counts
    assert all_results(warehouse) == results

    # re-delivery with new provenance (later ingest, events in another order): a new physical
    # row, replaced on read by FINAL
    later = AUDIT_TIME + timedelta(days=3)
    warehouse.insert_events([make_event(s, ingested_at=later) for s in reversed(SPECS)])
    assert raw_count(warehouse, "refusal_events") == 2 * len(EVENTS)
    for batch in BATCHES:  # re-running a batch stores the same record again
        warehouse.insert_batch(batch)
    assert (
        warehouse.count_events(),
        warehouse.count_assessments(),
        warehouse.count_batches(),
    ) == counts
    assert all_results(warehouse) == results
    assert set(warehouse.assessment_counts_per_log_id().values()) == {1}


def test_reaudit_replaces_the_current_assessment(warehouse: Warehouse) -> None:
    warehouse.insert_events(EVENTS)
    warehouse.insert_assessments(ASSESSMENTS)
    spec = next(s for s in REFUSALS if s.log_id == "e02")
    newer = make_assessment(
        spec,
        audited_at=AUDIT_TIME + timedelta(hours=1),
        category="privacy",
        is_estimated_false_positive=False,
        batch_id="b9",
        prompt_version="p2",
    )
    older = make_assessment(spec, audited_at=AUDIT_TIME - timedelta(days=1), category="stale")
    warehouse.insert_assessments([newer])
    warehouse.insert_assessments([older])  # a late re-delivery of an older audit

    counts = warehouse.assessment_counts_per_log_id()
    assert counts == {a.log_id: 1 for a in ASSESSMENTS}
    (current,) = warehouse.current_assessments(["e02"])
    assert current["category"] == "privacy"
    assert current["prompt_version"] == "p2"
    assert current["audited_at"] == newer.audited_at
    assert warehouse.count_assessments() == len(ASSESSMENTS)

    # the trend figures follow the current assessment
    fpr = run_named(warehouse.client, warehouse.database, "false_positive_rate", model="m-a")
    day0 = utc_day(event_time(spec))
    row = next(r for r in fpr.as_dicts() if r["day"] == day0)
    fps = sum(
        1 for s in REFUSALS
        if s.model == "m-a" and utc_day(event_time(s)) == day0 and s.fp and s.log_id != "e02"
    )  # fmt: skip
    assert row["estimated_false_positives"] == fps


def test_naive_datetimes_are_taken_as_utc(warehouse: Warehouse) -> None:
    spec = REFUSALS[0]
    naive = datetime(2024, 3, 5, 7, 30)
    warehouse.insert_events([make_event(spec)])
    warehouse.insert_assessments([make_assessment(spec, audited_at=naive)])
    (row,) = warehouse.current_assessments([spec.log_id])
    assert row["audited_at"] == naive.replace(tzinfo=UTC)


# ---- named queries: figures computed from the inputs ----------------------------------------


def grouped(items: list[Spec], key: Callable[[Spec], Any]) -> dict[Any, list[Spec]]:
    groups: dict[Any, list[Spec]] = defaultdict(list)
    for item in items:
        groups[key(item)].append(item)
    return dict(sorted(groups.items()))


def day_of(spec: Spec) -> date:
    return utc_day(event_time(spec))


def test_false_positive_rate(warehouse: Warehouse) -> None:
    load(warehouse)
    result = run_named(warehouse.client, warehouse.database, "false_positive_rate")
    assert result.columns == list(NAMED_QUERIES["false_positive_rate"].columns)
    expected = []
    for (day, model), group in grouped(REFUSALS, lambda s: (day_of(s), s.model)).items():
        n, k = len(group), sum(s.fp for s in group)
        low, high = wilson_interval(k, n)
        expected.append((day, model, n, k, k / n, low, high))
    assert_rows(result, expected)
    for row in result.as_dicts():
        assert row["wilson_low"] <= row["rate"] <= row["wilson_high"]
        assert row["wilson_low"] >= 0.0 and row["wilson_high"] <= 1.0


def test_filters(warehouse: Warehouse) -> None:
    load(warehouse)
    day1 = utc_day(DAY0 + timedelta(days=1))
    result = run_named(
        warehouse.client, warehouse.database, "false_positive_rate",
        since=day1, until=day1, model="m-b", product="api",
    )  # fmt: skip
    group = [
        s for s in REFUSALS
        if day_of(s) == day1 and s.model == "m-b" and s.product == "api"
    ]  # fmt: skip
    n, k = len(group), sum(s.fp for s in group)
    assert_rows(result, [(day1, "m-b", n, k, k / n, *wilson_interval(k, n))])

    prefilter = run_named(warehouse.client, warehouse.database, "prefilter", since=day1)
    assert [r[0] for r in prefilter.rows] == sorted({day_of(s) for s in SPECS if day_of(s) >= day1})

    empty = run_named(warehouse.client, warehouse.database, "category_mix", model="nobody")
    assert empty.rows == [] and empty.columns == list(NAMED_QUERIES["category_mix"].columns)

    with pytest.raises(UnsupportedFilterError, match="model"):
        run_named(warehouse.client, warehouse.database, "dead_letters", model="m-a")
    with pytest.raises(UnknownQueryError) as info:
        run_named(warehouse.client, warehouse.database, "nope")
    assert isinstance(info.value, KeyError)
    assert "false_positive_rate" in str(info.value) and "dead_letters" in str(info.value)


def test_category_mix(warehouse: Warehouse) -> None:
    load(warehouse)
    result = run_named(warehouse.client, warehouse.database, "category_mix")
    expected = []
    for day, group in grouped(REFUSALS, day_of).items():
        counts = Counter(s.category for s in group)
        for category, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            expected.append((day, category, n, n / len(group)))
    assert_rows(result, expected)
    for day in grouped(REFUSALS, day_of):
        shares = [r["share"] for r in result.as_dicts() if r["day"] == day]
        assert sum(shares) == pytest.approx(1.0)


def test_policy_gaps(warehouse: Warehouse) -> None:
    load(warehouse)

    def expected_for(batch_ids: set[str]) -> list[tuple[Any, ...]]:
        by_day: dict[date, list[str]] = defaultdict(list)
        for b in sorted(batch_ids):
            by_day[utc_day(make_batch(b).audited_at)].append(b)
        rows = []
        for day, ids in sorted(by_day.items()):
            flags = [f for b in ids for f in GAPS[b]]
            rows.append(
                (
                    day,
                    len(flags),
                    sum(1 for b in ids if GAPS[b]),
                    len(ids),
                    sorted({x for f in flags for x in f.example_log_ids})[:20],
                    sorted({f.description for f in flags})[:10],
                )
            )
        return rows

    result = run_named(warehouse.client, warehouse.database, "policy_gaps")
    assert_rows(result, expected_for({"b1", "b2", "b3"}))

    only_b = run_named(warehouse.client, warehouse.database, "policy_gaps", model="m-b")
    assert_rows(only_b, expected_for({s.batch for s in REFUSALS if s.model == "m-b"}))

    # a batch whose assessments were all superseded by a re-audit no longer counts
    b3 = [s for s in REFUSALS if s.batch == "b3"]
    warehouse.insert_assessments(
        [make_assessment(s, audited_at=AUDIT_TIME + timedelta(days=1), batch_id="b4") for s in b3]
    )
    after = run_named(warehouse.client, warehouse.database, "policy_gaps")
    assert_rows(after, expected_for({"b1", "b2"}))


def test_top_clauses(warehouse: Warehouse) -> None:
    load(warehouse)
    result = run_named(warehouse.client, warehouse.database, "top_clauses")
    cited = [s for s in REFUSALS if s.clause is not None]
    counts = Counter(s.clause for s in cited)
    expected = [
        ("default", clause, n, n / len(cited), sum(1 for s in cited if s.clause == clause and s.fp))
        for clause, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    assert_rows(result, expected)


def test_review_share(warehouse: Warehouse) -> None:
    load(warehouse)
    result = run_named(warehouse.client, warehouse.database, "review_share")
    expected = []
    for day, group in grouped(REFUSALS, day_of).items():
        n = len(group)
        flagged = sum(s.review for s in group)
        sampled = sum(s.sampled for s in group)
        expected.append((
            day, n,
            flagged, flagged / n, *wilson_interval(flagged, n),
            sampled, sampled / n, *wilson_interval(sampled, n),
        ))  # fmt: skip
    assert_rows(result, expected)
    for row in result.as_dicts():
        assert row["review_low"] <= row["review_share"] <= row["review_high"]
        assert row["sampled_low"] <= row["sampled_share"] <= row["sampled_high"]


def test_prefilter(warehouse: Warehouse) -> None:
    load(warehouse)
    result = run_named(warehouse.client, warehouse.database, "prefilter")
    expected = [
        (day, len(group), sum(s.is_refusal for s in group), sum(not s.is_refusal for s in group))
        for day, group in grouped(list(SPECS), day_of).items()
    ]
    assert_rows(result, expected)
    chat = run_named(warehouse.client, warehouse.database, "prefilter", product="chat")
    expected_chat = [
        (day, len(group), sum(s.is_refusal for s in group), sum(not s.is_refusal for s in group))
        for day, group in grouped([s for s in SPECS if s.product == "chat"], day_of).items()
    ]
    assert_rows(chat, expected_chat)


def test_refusal_disagreement_queries(warehouse: Warehouse) -> None:
    load(warehouse)
    days = run_named(warehouse.client, warehouse.database, "refusal_disagreements").as_dicts()
    verdicts = [s for s in SPECS if s.day == 1]  # day-1 events carry a classifier verdict
    by_model = grouped(verdicts, lambda s: (day_of(s), s.model))
    assert [(r["day"], r["model"]) for r in days] == list(by_model)
    for row in days:
        group = by_model[(row["day"], row["model"])]
        directions = Counter(DETECTOR_DISAGREES.get(s.log_id, "none") for s in group)
        assert row["classifier_verdicts"] == row["compared"] == len(group)
        assert row["disagreements"] == len(group) - directions["none"]
        for direction in DISAGREEMENT_DIRECTIONS:
            assert row[direction] == directions[direction]
    listed = run_named(warehouse.client, warehouse.database, "refusal_disagreement_events")
    assert {(r["log_id"], r["direction"]) for r in listed.as_dicts()} == set(
        DETECTOR_DISAGREES.items()
    )
    chat = run_named(
        warehouse.client, warehouse.database, "refusal_disagreement_events", product="chat"
    )
    assert chat.rows == []  # e07 and e08 are api events


def test_dead_letters_query(warehouse: Warehouse) -> None:
    load(warehouse)
    result = run_named(warehouse.client, warehouse.database, "dead_letters")
    groups: dict[tuple[str, str], list[DeadLetter]] = defaultdict(list)
    for d in DEAD_LETTERS:
        groups[(d.stage, d.reason_code)].append(d)
    expected = [
        (stage, code, len(items), len({d.source for d in items}))
        for (stage, code), items in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    ]
    assert_rows(result, expected)


# ---- read-only guard for ad hoc SQL -----------------------------------------------------------


@pytest.fixture(scope="module")
def loaded(chdb_dsn: str) -> Iterator[Warehouse]:
    """One loaded warehouse shared by the read-only tests (each checks nothing changed)."""
    database = f"t_readonly_{uuid.uuid4().hex[:8]}"
    client = connect(chdb_dsn, database)
    migrate(client, database)
    wh = Warehouse(client, database, retries=1)
    load(wh)
    yield wh
    client.command(f"DROP DATABASE IF EXISTS {database}")
    client.close()


def assert_unchanged(wh: Warehouse) -> None:
    assert wh.count_events() == len(EVENTS)
    assert raw_count(wh, "refusal_events") == len(EVENTS)
    tables = {r[0] for r in run_readonly(wh.client, "SHOW TABLES").rows}
    assert set(TABLES) <= tables and "t" not in tables and "x" not in tables
    # readonly=1 was per query: the shared client can still write
    assert wh.client.query("SELECT getSetting('readonly')").result_rows == [(0,)]


WRITES = [
    "INSERT INTO refusal_events (log_id) VALUES ('x')",
    "insert into refusal_events select * from refusal_events",
    "ALTER TABLE refusal_events DELETE WHERE 1",
    "DROP TABLE refusal_events",
    "CREATE TABLE t (a Int8) ENGINE = Memory",
    "TRUNCATE TABLE refusal_events",
    "OPTIMIZE TABLE refusal_events FINAL",
    "SYSTEM STOP MERGES",
    "KILL QUERY WHERE 1",
    "SET readonly = 0",
    "GRANT ALL ON *.* TO default",
    "RENAME TABLE refusal_events TO x",
    "DETACH TABLE refusal_events",
    "DELETE FROM refusal_events WHERE 1",
    # multiple statements
    "SELECT 1; DROP TABLE refusal_events",
    "SELECT 1;DROP TABLE refusal_events;",
    "SELECT 1 /* ; */ ; DROP TABLE refusal_events",
    "SELECT ';' ; DROP TABLE refusal_events",
    # comment tricks
    "/* SELECT */ DROP TABLE refusal_events",
    "-- SELECT\nDROP TABLE refusal_events",
    "# SELECT\nDROP TABLE refusal_events",
    "/* /* nested */ SELECT */ DROP TABLE refusal_events",
    "(DROP TABLE refusal_events)",
    # reads that write elsewhere
    "SELECT 1 INTO OUTFILE '/tmp/refusal_audit_outfile.txt'",
    "SELECT 1 INTO/**/OUTFILE '/tmp/refusal_audit_outfile.txt'",
    "WITH x AS (SELECT 1) INSERT INTO refusal_events (log_id) SELECT 'x'",
    # unparseable / empty
    "SELECT 'unterminated",
    "SELECT 1 /* unterminated",
    "   ",
    ";",
]


@pytest.mark.parametrize("sql", WRITES)
def test_readonly_guard_rejects_writes(loaded: Warehouse, sql: str) -> None:
    with pytest.raises(ReadOnlyViolation):
        run_readonly(loaded.client, sql)
    assert_unchanged(loaded)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT count() FROM refusal_events FINAL", [(len(EVENTS),)]),
        ("  -- a comment; with a semicolon\nselect count() from refusal_events final ;",
         [(len(EVENTS),)]),
        ("/* c */ WITH 2 AS x SELECT x * 3", [(6,)]),
        ("(SELECT 1)", [(1,)]),
        ("SELECT * FROM ((SELECT 1 AS n) UNION ALL (SELECT 2)) ORDER BY n", [(1,), (2,)]),
        ("SELECT ';DROP TABLE refusal_events -- ' AS s", [(";DROP TABLE refusal_events -- ",)]),
        ("SELECT $$; DROP TABLE x$$ AS s", [("; DROP TABLE x",)]),
        ("SELECT 'it''s' AS s # trailing comment", [("it's",)]),
    ],
)  # fmt: skip
def test_readonly_guard_allows_reads(loaded: Warehouse, sql: str, expected: list[Any]) -> None:
    assert run_readonly(loaded.client, sql).rows == expected
    assert_unchanged(loaded)


def test_readonly_other_read_statements(loaded: Warehouse) -> None:
    tables = run_readonly(loaded.client, "SHOW TABLES")
    assert {r[0] for r in tables.rows} >= set(TABLES)
    desc = run_readonly(loaded.client, "DESCRIBE TABLE assessments")
    assert desc.columns[0] == "name" and desc.rows[0][:2] == ("log_id", "String")
    assert run_readonly(loaded.client, "DESC dead_letters").rows
    assert run_readonly(loaded.client, "EXPLAIN SELECT 1").rows
    empty = run_readonly(loaded.client, "SELECT log_id, model FROM refusal_events WHERE 0")
    assert empty.rows == [] and empty.columns == ["log_id", "model"]
    with pytest.raises(WarehouseError, match="UNKNOWN_TABLE"):
        run_readonly(loaded.client, "SELECT * FROM no_such_table")


def test_check_readonly_returns_the_statement_without_comments(loaded: Warehouse) -> None:
    assert check_readonly(loaded.client, "SELECT 1 -- x\n;") == "SELECT 1"
    assert check_readonly(loaded.client, "/* a */SELECT '/* b */' /* c */") == "SELECT '/* b */'"


@pytest.fixture
def separate_client(chdb_dsn: str, loaded: Warehouse) -> Iterator[Client]:
    """A second client on the shared database: the driver's chDB backend applies an INSERT's
    settings with SET, and a refused write can leave that handle in readonly mode."""
    client = connect(chdb_dsn, loaded.database)
    yield client
    client.close()


@pytest.mark.parametrize(
    "sql",
    [
        "DROP TABLE refusal_events",
        "ALTER TABLE refusal_events DELETE WHERE 1",
        "CREATE TABLE t (a Int8) ENGINE = Memory",
        "TRUNCATE TABLE refusal_events",
        "INSERT INTO refusal_events (log_id) SELECT 'x'",
        "SELECT * FROM file('/etc/hostname', 'LineAsString')",
        "SELECT 1 SETTINGS readonly = 0",
    ],
)
def test_server_side_readonly_setting_is_honoured(
    loaded: Warehouse, separate_client: Client, sql: str
) -> None:
    """The second guard alone (parser bypassed): chDB enforces readonly=1."""
    with pytest.raises((ReadOnlyViolation, WarehouseError)) as info:
        run_guarded(separate_client, sql)
    assert "readonly" in str(info.value).lower()
    assert_unchanged(loaded)


# ---- retries ----------------------------------------------------------------------------------


class FlakyInsert:
    """Wraps ``client.insert_arrow`` (the columnar insert of the sink's tables,
    ``warehouse.columnar``): the first ``failures`` calls fail with ``error``; with
    ``write_first`` the failing calls still write (a lost acknowledgement)."""

    def __init__(
        self, real: Callable[..., Any], failures: int, error: Exception, write_first: bool = False
    ) -> None:
        self.real = real
        self.failures = failures
        self.error = error
        self.write_first = write_first
        self.calls = 0
        self.tokens: list[str] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        self.tokens.append(kwargs["settings"]["insert_deduplication_token"])
        if self.calls <= self.failures:
            if self.write_first:
                self.real(*args, **kwargs)
            raise self.error
        return self.real(*args, **kwargs)


def test_transient_failures_are_retried_and_stored_once(
    warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop_merges(warehouse)
    flaky = FlakyInsert(warehouse.client.insert_arrow, 2, OperationalError("connection reset"))
    monkeypatch.setattr(warehouse.client, "insert_arrow", flaky)
    warehouse.insert_events(EVENTS)
    assert flaky.calls == 3
    assert warehouse.count_events() == len(EVENTS)
    assert raw_count(warehouse, "refusal_events") == len(EVENTS)
    # every attempt carried the same content-derived dedup token; other content, other token
    assert len(set(flaky.tokens)) == 1
    warehouse.insert_events(EVENTS)
    warehouse.insert_events(EVENTS[:1])
    assert flaky.tokens[3] == flaky.tokens[0] != flaky.tokens[4]
    assert raw_count(warehouse, "refusal_events") == len(EVENTS) + 1  # the 1-row block
    assert warehouse.count_events() == len(EVENTS)  # ... replaced on read


def test_retry_after_lost_acknowledgement_is_deduplicated(
    warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop_merges(warehouse)
    flaky = FlakyInsert(
        warehouse.client.insert_arrow, 2, OperationalError("read timeout"), write_first=True
    )
    monkeypatch.setattr(warehouse.client, "insert_arrow", flaky)
    warehouse.insert_assessments(ASSESSMENTS)
    assert flaky.calls == 3
    # every attempt reached the server, the dedup token kept only the first
    assert raw_count(warehouse, "assessments") == len(ASSESSMENTS)


def test_exhausted_retries_raise_warehouse_error(
    warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    flaky = FlakyInsert(warehouse.client.insert_arrow, 99, OperationalError("connection refused"))
    monkeypatch.setattr(warehouse.client, "insert_arrow", flaky)
    with pytest.raises(WarehouseError, match="after 3 attempt") as info:
        warehouse.insert_events(EVENTS)
    assert isinstance(info.value.__cause__, OperationalError)
    assert flaky.calls == warehouse.insert_attempts == 3
    assert raw_count(warehouse, "refusal_events") == 0


def test_permanent_errors_are_not_retried(
    warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    flaky = FlakyInsert(warehouse.client.insert_arrow, 99, DatabaseError("Code: 53. type mismatch"))
    monkeypatch.setattr(warehouse.client, "insert_arrow", flaky)
    with pytest.raises(WarehouseError, match="type mismatch"):
        warehouse.insert_events(EVENTS)
    assert flaky.calls == 1


def test_what_counts_as_transient() -> None:
    assert is_transient(OperationalError("connection reset"))
    assert is_transient(ConnectionResetError())
    assert is_transient(DatabaseError("Code: 252. TOO_MANY_PARTS", code=252))
    merges_behind = "Code: 252. DB::Exception: Too many parts (300 with average size of 1 MiB)"
    assert is_transient(DatabaseError(merges_behind, code=252))
    # same code, but the insert would fail the same way on every retry
    partitions = "Code: 252. DB::Exception: Too many partitions for single INSERT block"
    assert not is_transient(DatabaseError(partitions, code=252))
    assert not is_transient(DatabaseError(partitions.replace("single", "a single"), code=252))
    assert not is_transient(DatabaseError("Code: 53. TYPE_MISMATCH", code=53))
    assert not is_transient(ValueError("bad row"))


def test_events_spread_over_150_months_are_stored(warehouse: Warehouse) -> None:
    # every step of 31 days lands in a later month: 150 partitions of toYYYYMM(event_time)
    specs = [
        Spec(f"m{i:03d}", 31 * i, "m-a", "chat", True, "harm.violence", False, "PSP-1.1")
        for i in range(150)
    ]
    events = [make_event(s) for s in specs]
    months = {(e.event.event_time.year, e.event.event_time.month) for e in events}
    assert len(months) == 150
    # without the insert setting, ClickHouse refuses such a block (code 252), on every retry
    with pytest.raises(DatabaseError) as refused:
        warehouse.client.insert(
            "refusal_events",
            [[e.event.log_id, e.event.event_time] for e in events],
            column_names=["log_id", "event_time"],
            database=warehouse.database,
        )
    assert refused.value.code == 252 and "Too many partitions" in str(refused.value)
    assert not is_transient(refused.value)
    warehouse.insert_events(events)
    warehouse.insert_assessments([make_assessment(s) for s in specs])
    assert warehouse.count_events() == 150
    assert warehouse.count_assessments() == 150
    for table in ("refusal_events", "assessments"):
        stored = warehouse.client.query(
            "SELECT uniqExact(toYYYYMM(event_time)) FROM {db:Identifier}.{t:Identifier} FINAL",
            parameters={"db": warehouse.database, "t": table},
        ).result_rows
        assert stored == [(150,)]


def test_retry_count_comes_from_the_constructor(
    warehouse_db: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, database = warehouse_db
    wh = Warehouse(client, database, retries=5, retry_wait=0.0)
    flaky = FlakyInsert(client.insert_arrow, 4, OperationalError("busy"))
    monkeypatch.setattr(client, "insert_arrow", flaky)
    wh.insert_dead_letters(DEAD_LETTERS)
    assert flaky.calls == 5
    single = Warehouse(client, database, retries=0, retry_wait=0.0)
    assert single.insert_attempts == 1


def test_https_dsn_speaks_tls_before_sending_credentials() -> None:
    import socket
    import threading

    from warehouse.client import WarehouseError
    from warehouse.connect import connect

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(15)
    first: list[bytes] = []

    def accept() -> None:
        conn, _ = server.accept()
        first.append(conn.recv(64))
        conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    port = server.getsockname()[1]
    with pytest.raises(WarehouseError) as info:
        connect(f"https://alice:s3cr3t@127.0.0.1:{port}", "x")
    thread.join(5)
    server.close()
    assert "s3cr3t" not in str(info.value)
    assert first and first[0][:1] == b"\x16"  # a TLS handshake record, not "POST ..."
    assert b"Authorization" not in first[0]


def test_assessment_retires_when_its_event_is_no_longer_a_refusal(warehouse: Warehouse) -> None:
    spec = REFUSALS[0]
    warehouse.insert_events([make_event(spec)])
    warehouse.insert_assessments([make_assessment(spec)])
    assert warehouse.assessment_counts_per_log_id() == {spec.log_id: 1}
    # re-delivered, and now judged a non-refusal (e.g. the pre-filter changed)
    later = make_event(spec, ingested_at=AUDIT_TIME + timedelta(days=1))
    warehouse.insert_events(
        [later.model_copy(update={"is_refusal": False, "refusal_kind": "none"})]
    )
    assert warehouse.assessment_counts_per_log_id() == {}
    fpr = run_named(warehouse.client, warehouse.database, "false_positive_rate")
    assert fpr.rows == []


def test_assessment_under_another_bundle_is_not_current(warehouse: Warehouse) -> None:
    spec = REFUSALS[0]
    event = make_event(spec)
    warehouse.insert_events([event])
    warehouse.insert_assessments([make_assessment(spec)])
    moved = event.model_copy(
        update={
            "event": event.event.model_copy(update={"policy_bundle": "other"}),
            "ingested_at": AUDIT_TIME + timedelta(days=1),
        }
    )
    warehouse.insert_events([moved])
    warehouse.insert_assessments(
        [
            make_assessment(spec).model_copy(
                update={"policy_bundle": "other", "audited_at": AUDIT_TIME + timedelta(days=1)}
            )
        ]
    )
    assert warehouse.assessment_counts_per_log_id() == {spec.log_id: 1}
    (row,) = warehouse.current_assessments([spec.log_id])
    assert row["policy_bundle"] == "other"
