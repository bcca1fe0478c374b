"""Intake: decode, bundle check, redaction and pre-filter of one record, pure."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import orjson

from processors.adapters import DecodeOptions, SourceRecord
from processors.intake import IntakeSettings, dead_letter_id, prepare
from processors.redaction import Redactor
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def record(**fields: object) -> SourceRecord:
    base: dict[str, object] = {
        "log_id": "l1",
        "event_time": "2026-11-01T10:00:00Z",
        "request": "Email me at jane.doe@example.com about the refund",
        "response": "I'm sorry, but I can't help with that request.",
        "model": "m",
    }
    return SourceRecord("file.jsonl", "line 3", orjson.dumps({**base, **fields}))


def settings(**kw: object) -> IntakeSettings:
    values: dict[str, object] = {
        "decode": DecodeOptions(),
        "known_bundles": {"default"},
        "redactor": Redactor(),
        "prefilter": True,
    }
    values.update(kw)
    return IntakeSettings(**values)  # type: ignore[arg-type]


def test_redacts_and_prefilters() -> None:
    out = prepare(record(), "jsonl", settings(), NOW)
    assert isinstance(out, StoredEvent)
    assert "jane.doe@example.com" not in out.event.request
    assert "<EMAIL>" in out.event.request
    assert out.redactions == {"email": 1}
    assert out.is_refusal and out.refusal_kind in ("full", "partial")
    assert out.refusal_cues
    assert out.source == "file.jsonl" and out.ingested_at == NOW


def test_non_refusal_is_kept_and_marked() -> None:
    answer = "Sure! Step 1: open the settings page. Step 2: choose Refunds and submit the form."
    out = prepare(record(response=answer), "jsonl", settings(), NOW)
    assert isinstance(out, StoredEvent)
    assert not out.is_refusal and out.refusal_kind == "none"


def test_prefilter_and_redaction_can_be_disabled() -> None:
    answer = "Sure! Here is how."
    out = prepare(record(response=answer), "jsonl", settings(prefilter=False, redactor=None), NOW)
    assert isinstance(out, StoredEvent)
    assert out.is_refusal
    assert "jane.doe@example.com" in out.event.request and out.redactions == {}


def test_unknown_bundle_is_dead_lettered() -> None:
    rec = record(policy_bundle="other")
    out = prepare(rec, "jsonl", settings(), NOW)
    assert isinstance(out, DeadLetter)
    assert (out.stage, out.reason_code, out.log_id) == ("validate", "unknown_policy_bundle", "l1")
    assert "'other'" in out.reason
    # the dead letter keeps the record's bytes, with its PII redacted
    assert b"jane.doe@example.com" not in out.raw and b"<EMAIL>" in out.raw
    assert orjson.loads(out.raw)["policy_bundle"] == "other"
    assert out.dead_letter_id == dead_letter_id("file.jsonl", "line 3", rec.raw)


def test_decode_failure_is_dead_lettered_with_location() -> None:
    rec = SourceRecord("file.jsonl", "line 9", b"{not json")
    out = prepare(rec, "jsonl", settings(), NOW)
    assert isinstance(out, DeadLetter)
    assert (out.stage, out.reason_code, out.location) == ("decode", "not_json", "line 9")


def test_dead_letter_id_depends_on_all_parts() -> None:
    ids = {dead_letter_id("a", "b", b"c"), dead_letter_id("a", "bc", b""),
           dead_letter_id("ab", "", b"c"), dead_letter_id("a", "b", b"d")}
    assert len(ids) == 4


def test_dead_letter_raw_keeps_invalid_bytes_but_not_pii() -> None:
    raw = b'{"log_id": "x", "request": "call 555-867-5309 \xff\xfe", "oops": 1}'
    out = prepare(SourceRecord("f", "line 1", raw), "jsonl", settings(), NOW)
    assert isinstance(out, DeadLetter)
    assert b"\xff\xfe" in out.raw and b"867-5309" not in out.raw
    unredacted = prepare(SourceRecord("f", "line 1", raw), "jsonl", settings(redactor=None), NOW)
    assert isinstance(unredacted, DeadLetter) and unredacted.raw == raw
    assert unredacted.dead_letter_id == out.dead_letter_id


def test_decode_failure_keeps_the_log_id_it_could_read() -> None:
    out = prepare(record(event_time="yesterday"), "jsonl", settings(), NOW)
    assert isinstance(out, DeadLetter)
    assert out.stage == "decode" and out.reason_code == "bad_timestamp"
    assert out.log_id == "l1"


def test_an_event_time_outside_the_warehouse_day_range_is_a_dead_letter() -> None:
    """ClickHouse's Date (every trend query's day) spans 1970-01-01 to 2149-06-05: an event
    time outside it would be counted on a wrapped-around day, so it is refused instead."""
    for moment in ("1969-12-31T23:59:59Z", "1970-01-01T00:30:00+01:00", "2200-01-01T00:00:00Z"):
        out = prepare(record(event_time=moment), "jsonl", settings(), NOW)
        assert isinstance(out, DeadLetter), moment
        assert out.reason_code == "bad_timestamp" and "1970-01-01 .. 2149-06-05" in out.reason
    for moment in ("1970-01-01T00:00:00Z", "2149-06-05T23:59:59Z"):
        assert isinstance(prepare(record(event_time=moment), "jsonl", settings(), NOW), StoredEvent)


def test_an_escaped_nul_is_dead_lettered_like_a_raw_one() -> None:
    """A raw NUL byte in JSON is refused (not valid JSON); its escape ``\\u0000`` and a NUL in
    a CSV cell are refused the same way, the record kept whole in the dead letter (issue 23)."""
    good = record().raw
    raw_nul = good.replace(b"Email me", b"Email\x00me")
    escaped = good.replace(b"Email me", b"Email\\u0000me")
    in_attribute = record(attributes={"client": "web\u0000"}).raw
    in_key = record(attributes={"cli\u0000ent": "web"}).raw
    outcomes = [
        prepare(SourceRecord("file.jsonl", "line 3", raw), "jsonl", settings(), NOW)
        for raw in (raw_nul, escaped, in_attribute, in_key)
    ]
    assert all(isinstance(o, DeadLetter) for o in outcomes), outcomes
    assert outcomes[0].reason_code == "not_json"  # type: ignore[union-attr]
    reasons = [(o.reason_code, o.reason) for o in outcomes[1:]]  # type: ignore[union-attr]
    assert [code for code, _ in reasons] == ["invalid_value"] * 3
    assert "'request'" in reasons[0][1] and "\\u0000" in reasons[0][1]
    assert "attributes.client" in reasons[1][1] and "attributes" in reasons[2][1]
    kept = outcomes[1]
    assert isinstance(kept, DeadLetter) and b"\\u0000" in kept.raw  # the bytes (redacted)
    assert kept.raw_sha256 == hashlib.sha256(escaped).hexdigest()
    header = b"id,type,prompt,completion,annotation_1,annotation_2,agreement,final_label\n"
    row = b"1,t,How do I kill\x00 a python process,No.,a,b,c,d\n"
    cell = SourceRecord("xstest_v2_completions_gpt4.csv", "row 1", header + row)
    with_time = settings(decode=DecodeOptions(default_event_time=NOW))
    csv_out = prepare(cell, "xstest-csv", with_time, NOW)
    assert isinstance(csv_out, DeadLetter) and csv_out.reason_code == "invalid_value"
