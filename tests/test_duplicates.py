"""The duplicate-log-id rule: the first stored copy of a log id wins, in one run or across
runs (worker windows) alike; a copy with other content is dead-lettered and never replaces or
retires what is stored; an identical copy is a harmless redelivery."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_pipeline import settings

from processors.adapters import DecodeOptions, SourceRecord
from refusal_audit.audit.batch import build_pipeline
from refusal_audit.audit.pipeline import InputSource, RunReport
from warehouse import Warehouse
from warehouse.queries import NAMED_QUERIES, run_named

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
REFUSAL = "I can't help with that request."
COMPLIANT = "Sure: run `kill -9` on the parent process, then check with ps."


def record(
    n: int, log_id: str, response: str, request: str = "How do I kill a process?"
) -> SourceRecord:
    event = {
        "log_id": log_id,
        "event_time": "2026-11-20T09:00:00Z",
        "request": request,
        "response": response,
        "model": "m",
        "product": "p",
    }
    return SourceRecord("in", f"partition 0 offset {n}", orjson.dumps(event))


def run(wh: Warehouse, records: Sequence[SourceRecord], **overrides: Any) -> RunReport:
    pipeline = build_pipeline(settings(**overrides), wh)
    return asyncio.run(pipeline.run([InputSource(list(records), "jsonl", DecodeOptions())]))


def state(wh: Warehouse) -> dict[str, Any]:
    """What a reader sees: the named queries over events and assessments (those over batch
    rows reflect the batching, see the README), current events, assessments, dead letters."""
    queries = {}
    for name in NAMED_QUERIES:
        if "audit_batches" in NAMED_QUERIES[name].sql:
            continue
        result = run_named(wh.client, wh.database, name)
        keep = [i for i, c in enumerate(result.columns) if c != "mean_latency_ms"]
        queries[name] = [tuple(row[i] for i in keep) for row in result.rows]
    events = wh.client.query(
        "SELECT log_id, response, is_refusal FROM {db:Identifier}.refusal_events FINAL "
        "ORDER BY log_id",
        parameters={"db": wh.database},
    ).result_rows
    current = wh.client.query(
        "SELECT log_id, category FROM {db:Identifier}.current_assessments ORDER BY log_id",
        parameters={"db": wh.database},
    ).result_rows
    dead = wh.client.query(
        "SELECT dead_letter_id, reason_code, log_id FROM {db:Identifier}.dead_letters FINAL "
        "ORDER BY dead_letter_id",
        parameters={"db": wh.database},
    ).result_rows
    return {"queries": queries, "events": events, "current": current, "dead": dead}


STREAM = [
    record(0, "a", REFUSAL),
    record(1, "x", REFUSAL, "Tell me a joke about cats"),
    record(2, "a", COMPLIANT),  # log id "a" reused for another event
    record(3, "y", COMPLIANT),
    record(4, "a", REFUSAL),  # the first copy again: a redelivery
]


def test_a_later_copy_with_other_content_is_dead_lettered_in_one_run(warehouse: Warehouse) -> None:
    report = run(warehouse, STREAM)
    assert report.duplicates == 1 and report.identical_copies == 1
    assert report.failed == 1 and report.retired == []
    seen = state(warehouse)
    assert ("a", REFUSAL, True) in seen["events"]
    assert "a" in {row[0] for row in seen["current"]}
    assert [(code, log_id) for _, code, log_id in seen["dead"]] == [("duplicate_log_id", "a")]
    (failure,) = report.failures
    assert failure.location == "partition 0 offset 2" and "first copy counts" in failure.reason


@pytest.mark.parametrize("cut", [1, 2, 3, 4])
def test_the_outcome_does_not_depend_on_window_boundaries(
    warehouse: Warehouse, chdb_dsn: str, cut: int
) -> None:
    """The same stream as one run, and cut into two runs (windows) anywhere: the same
    events, assessments, dead letters and query results."""
    from warehouse import connect, migrate

    run(warehouse, STREAM)
    whole = state(warehouse)
    database = f"{warehouse.database}_w{cut}"
    client = connect(chdb_dsn, database)
    migrate(client, database)
    try:
        split = Warehouse(client, database, retries=1, retry_wait=0.0)
        first, second = run(split, STREAM[:cut]), run(split, STREAM[cut:])
        assert state(split) == whole
        assert first.duplicates + second.duplicates == 1
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{database}`")
        client.close()


def test_a_refusal_is_never_retired_by_a_non_refusal_under_its_id(warehouse: Warehouse) -> None:
    run(warehouse, STREAM[:2])
    before = state(warehouse)
    later = run(warehouse, [record(9, "a", COMPLIANT)])  # a later window
    assert later.duplicates == 1 and later.events == 0 and later.retired == []
    after = state(warehouse)
    assert after["current"] == before["current"] and after["events"] == before["events"]
    assert after["queries"]["false_positive_rate"] == before["queries"]["false_positive_rate"]
    assert [(code, log_id) for _, code, log_id in after["dead"]] == [("duplicate_log_id", "a")]


def test_redelivering_the_same_records_changes_nothing(warehouse: Warehouse) -> None:
    run(warehouse, STREAM)
    before = state(warehouse)
    again = run(warehouse, STREAM)
    assert state(warehouse) == before
    assert again.duplicates == 1  # the same conflicting record, the same dead letter id


def test_a_pre_filter_change_that_retires_an_assessment_is_reported(warehouse: Warehouse) -> None:
    compliant = [record(0, "c", COMPLIANT)]
    first = run(warehouse, compliant, prefilter_enabled=False)  # everything is a refusal
    assert first.refusals == 1 and "c" in {r[0] for r in state(warehouse)["current"]}
    second = run(warehouse, compliant)  # the pre-filter now sees a compliant answer
    assert second.retired == ["c"] and second.duplicates == 0
    assert "c" not in {r[0] for r in state(warehouse)["current"]}


def batch_rows(wh: Warehouse) -> int:
    rows = wh.client.query(
        "SELECT count() FROM {db:Identifier}.audit_batches FINAL", parameters={"db": wh.database}
    ).result_rows
    return int(rows[0][0])


def test_a_redelivered_audited_event_is_not_audited_again(warehouse: Warehouse) -> None:
    """An identical copy of an event stored and audited with this configuration adds
    nothing, not even a batch row (the batch-based queries stay as they were)."""
    run(warehouse, STREAM[:2])
    before, batches = state(warehouse), batch_rows(warehouse)
    again = run(warehouse, [STREAM[1]])
    assert again.identical_copies == 1 and again.batches == 0 and again.events == 0
    assert state(warehouse) == before and batch_rows(warehouse) == batches


class LosesAssessments:
    """The warehouse, failing like a crash between storing events and their assessments."""

    def __init__(self, inner: Warehouse) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def insert_assessments(self, items: Any) -> None:
        raise RuntimeError("crash before the assessments were stored")


def test_a_redelivered_event_stored_without_its_assessment_is_audited(
    warehouse: Warehouse,
) -> None:
    pipeline = build_pipeline(settings(), LosesAssessments(warehouse))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        asyncio.run(pipeline.run([InputSource(STREAM[:2], "jsonl", DecodeOptions())]))
    assert state(warehouse)["events"] and not state(warehouse)["current"]
    redelivered = run(warehouse, STREAM[:2])
    assert redelivered.refusals == 2 and redelivered.identical_copies == 0
    assert {row[0] for row in state(warehouse)["current"]} == {"a", "x"}


def test_a_conflicting_copy_does_not_hide_a_later_identical_one(warehouse: Warehouse) -> None:
    """Stored without its assessment (a crash), then redelivered behind a conflicting copy:
    the identical copy is still audited."""
    pipeline = build_pipeline(settings(), LosesAssessments(warehouse))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        asyncio.run(pipeline.run([InputSource([STREAM[0]], "jsonl", DecodeOptions())]))
    again = run(warehouse, [STREAM[2], STREAM[0]])  # the conflicting copy comes first
    assert again.duplicates == 1 and again.refusals == 1
    assert [row[0] for row in state(warehouse)["current"]] == ["a"]


def test_the_same_instant_with_another_offset_is_the_same_event(warehouse: Warehouse) -> None:
    utc = orjson.loads(STREAM[1].raw)
    shifted = {**utc, "event_time": "2026-11-20T10:00:00+01:00"}
    run(warehouse, [STREAM[1]])
    again = run(warehouse, [SourceRecord("in", "partition 1 offset 0", orjson.dumps(shifted))])
    assert again.duplicates == 0 and again.identical_copies == 1


def test_a_re_audit_of_an_event_in_two_dead_letters_is_one_event(warehouse: Warehouse) -> None:
    """Re-audited events are the stored ones (their text redacted): several copies of one
    are one event, not duplicates, and they keep the stored fingerprint."""
    run(warehouse, [STREAM[1]])
    (stored_fp,) = warehouse.stored_identities([("default", "x")]).values()
    redacted = {**orjson.loads(STREAM[1].raw), "request": "Tell me a joke about cats [EMAIL]"}
    copies = [SourceRecord("reaudit", f"dead letter d{i}", orjson.dumps(redacted)) for i in (1, 2)]
    pipeline = build_pipeline(settings(), warehouse)
    report = asyncio.run(
        pipeline.run([InputSource(copies, "jsonl", DecodeOptions(), reaudit=True)])
    )
    assert report.duplicates == 0 and report.refusals == 1 and report.identical_copies == 1
    assert warehouse.stored_identities([("default", "x")])["x"] == stored_fp


def test_an_event_stored_before_fingerprints_is_pinned_by_its_next_copy(
    warehouse: Warehouse,
) -> None:
    """A row without a fingerprint (stored by an older release) is replaced by the next
    copy, as before; from then on that copy is the event, merged or not."""
    from processors.intake import IntakeSettings, prepare
    from schemas.events import StoredEvent

    old = prepare(
        record(0, "old", REFUSAL),
        "jsonl",
        IntakeSettings(decode=DecodeOptions(), known_bundles={"default"}, redactor=None),
        datetime_now(),
    )
    assert isinstance(old, StoredEvent)
    warehouse.insert_events([old.model_copy(update={"content_fingerprint": ""})])
    second = run(warehouse, [record(1, "old", REFUSAL, "Another request")])
    assert second.events == 1 and second.duplicates == 0
    third = run(warehouse, [record(2, "old", COMPLIANT)])
    assert third.duplicates == 1
    warehouse.client.command(f"OPTIMIZE TABLE `{warehouse.database}`.refusal_events FINAL")
    fourth = run(warehouse, [record(3, "old", COMPLIANT, "Yet another")])
    assert fourth.duplicates == 1
    rows = state(warehouse)["events"]
    assert ("old", REFUSAL, True) in rows


def datetime_now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


class LosesBatches(LosesAssessments):
    """The warehouse, failing like a crash right after the events and dead letters."""

    def insert_assessments(self, items: Any) -> None:
        self.inner.insert_assessments(items)

    def insert_batches(self, batches: Any) -> None:
        raise RuntimeError("crash before the batch rows were stored")


def test_a_crash_before_the_batch_rows_leaves_the_events_to_be_audited_again(
    warehouse: Warehouse,
) -> None:
    """Assessments are written last: an event whose audit was not wholly stored is not
    taken for audited, so its redelivery writes the batch rows too."""
    pipeline = build_pipeline(settings(), LosesBatches(warehouse))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        asyncio.run(pipeline.run([InputSource(STREAM[:2], "jsonl", DecodeOptions())]))
    assert not state(warehouse)["current"] and batch_rows(warehouse) == 0
    again = run(warehouse, STREAM[:2])
    assert again.refusals == 2 and again.batches == batch_rows(warehouse) > 0


def test_another_local_threshold_is_another_audit_configuration(warehouse: Warehouse) -> None:
    run(warehouse, STREAM[:2])
    again = run(warehouse, STREAM[:2], local_false_positive_threshold=0.9)
    assert again.identical_copies == 0 and again.refusals == 2
    versions = warehouse.select(
        "SELECT DISTINCT engine_version FROM {db:Identifier}.current_assessments"
    )
    assert versions == [{"engine_version": "local-2/fp-threshold=0.9"}]


def test_copies_differing_below_the_stored_millisecond_are_identical(
    warehouse: Warehouse,
) -> None:
    base = orjson.loads(STREAM[1].raw)
    first = {**base, "event_time": "2026-11-20T09:00:00.123Z"}
    finer = {**base, "event_time": "2026-11-20T09:00:00.1234Z"}
    run(warehouse, [SourceRecord("in", "partition 0 offset 0", orjson.dumps(first))])
    again = run(warehouse, [SourceRecord("in", "partition 0 offset 1", orjson.dumps(finer))])
    assert again.duplicates == 0 and again.identical_copies == 1


def test_lookups_of_many_log_ids_go_in_chunks_and_lose_nothing(
    warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The duplicate rule's lookups query at most ``LOOKUP_CHUNK`` ids at a time (one large
    ``IN`` list fell off a cliff on chDB: benchmarks/sink_lookup.py) and return every stored
    id whichever chunk it falls in."""
    import warehouse.store as store

    monkeypatch.setattr(store, "LOOKUP_CHUNK", 2)
    records = [record(i, f"chunk-{i}", REFUSAL, f"request {i}") for i in range(5)]
    assert run(warehouse, records).refusals == 5
    wanted = [f"chunk-{i}" for i in range(5)] + ["never-1", "never-2"]
    queries: list[int] = []
    select = warehouse._select

    def counting(sql: str, parameters: dict[str, Any]) -> Any:
        queries.append(len(next(iter(parameters.values()))))
        return select(sql, parameters)

    monkeypatch.setattr(warehouse, "_select", counting)
    assert set(warehouse.first_fingerprints(wanted)) == set(wanted[:5])
    assert queries == [2, 2, 2, 1]  # 7 ids, chunks of 2
    identities = warehouse.stored_identities([("default", i) for i in wanted])
    assert set(identities) == set(wanted[:5])
    assert all(i.audited_by for i in identities.values())  # the assessments were found too


def test_stored_identities_reads_the_audits_of_stored_ids_only(
    warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The assessments are looked up only for log ids found stored: a lookup of fresh ids
    alone is one query, and a mixed lookup answers as before (stored refusals with their
    audit configuration, a stored non-refusal with none, fresh ids absent)."""
    records = [record(0, "ref-1", REFUSAL), record(1, "ok-1", COMPLIANT)]
    assert run(warehouse, records).refusals == 1
    queries: list[list[Any]] = []
    select = warehouse._select

    def counting(sql: str, parameters: dict[str, Any]) -> Any:
        queries.append(list(next(iter(parameters.values()))))
        return select(sql, parameters)

    monkeypatch.setattr(warehouse, "_select", counting)
    assert warehouse.stored_identities([("default", "fresh-1"), ("default", "fresh-2")]) == {}
    assert queries == [["fresh-1", "fresh-2"]]
    queries.clear()
    keys = [("default", "fresh-1"), ("default", "ref-1"), ("default", "ok-1"), ("other", "ref-1")]
    identities = warehouse.stored_identities(keys)
    assert set(identities) == {"ref-1", "ok-1"}
    assert identities["ref-1"].is_refusal and identities["ref-1"].audited_by.startswith("default|")
    assert not identities["ok-1"].is_refusal and identities["ok-1"].audited_by == ""
    assert queries[1] == [("default", "ref-1"), ("default", "ok-1"), ("other", "ref-1")]
