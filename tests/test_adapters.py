"""Input adapters (processors.adapters) and file readers (refusal_audit.audit.readers)."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from processors.adapters import (
    REASON_CODES,
    DecodeFailure,
    DecodeOptions,
    FieldMapping,
    InputFormat,
    SourceRecord,
    decode_record,
    detect_format,
    xstest_model_from_source,
)
from refusal_audit.audit.readers import default_model_for, read_records
from schemas.events import ClassifierSignal, RefusalEvent

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXAMPLES = REPO / "examples"
T0 = datetime(2025, 6, 2, 9, 15, tzinfo=UTC)
MAX_BYTES = 262_144


def decode(raw: bytes | str, fmt: InputFormat = "jsonl", **options: Any) -> Any:
    data = raw.encode() if isinstance(raw, str) else raw
    return decode_record(SourceRecord("test.jsonl", "line 1", data), fmt, DecodeOptions(**options))


def native(**overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "log_id": "evt-1",
        "event_time": "2025-06-02T09:15:00Z",
        "request": "How do I kill a stuck process?",
        "response": "I can't help with that.",
        "model": "acme-chat-large-2025-06",
    }
    record.update(overrides)
    return {k: v for k, v in record.items() if v is not ...}


def failure(result: object) -> DecodeFailure:
    assert isinstance(result, DecodeFailure), result
    assert result.reason_code in REASON_CODES
    return result


# --------------------------------------------------------------------------------------------
# native jsonl


def test_native_full_record() -> None:
    record = native(
        event_time="2025-06-02T11:15:00.5+02:00",
        product="support-bot",
        policy_bundle="default",
        conversation_id="conv-1",
        classifier={"flagged": True, "score": 0.93, "labels": ["violence"]},
        attributes={"locale": "en-GB"},
    )
    event = decode(orjson.dumps(record))
    assert isinstance(event, RefusalEvent)
    assert event.event_time == datetime(2025, 6, 2, 9, 15, 0, 500_000, tzinfo=UTC)
    assert event.event_time.utcoffset() == timedelta(hours=2)
    assert event.classifier == ClassifierSignal(flagged=True, score=0.93, labels=["violence"])
    assert (event.product, event.conversation_id, event.attributes) == (
        "support-bot",
        "conv-1",
        {"locale": "en-GB"},
    )


def test_native_defaults_and_bom() -> None:
    event = decode(b"\xef\xbb\xbf" + orjson.dumps(native()))
    assert isinstance(event, RefusalEvent)
    assert (event.product, event.policy_bundle, event.attributes) == ("unknown", "default", {})


@pytest.mark.parametrize(
    ("overrides", "code", "needle"),
    [
        (
            {"event_time": "yesterday"},
            "bad_timestamp",
            "field 'event_time': 'yesterday' is not an RFC 3339 timestamp",
        ),
        ({"event_time": "2025-06-02"}, "bad_timestamp", "event_time"),
        ({"event_time": "2025-06-02T09:15:00+25:00"}, "bad_timestamp", "offset"),
        ({"event_time": "2025-13-02T09:15:00Z"}, "bad_timestamp", "month"),
        ({"event_time": "2025-06-02 09:15:00"}, "naive_timestamp", "no UTC offset"),
        ({"event_time": None}, "missing_field", "event_time"),
        ({"event_time": ...}, "missing_field", "event_time"),
        ({"event_time": "1748855700"}, "bad_timestamp", "event_time"),
        ({"log_id": "   "}, "missing_log_id", "log_id"),
        ({"log_id": None}, "missing_log_id", "log_id"),
        ({"log_id": ["a"]}, "wrong_type", "log_id"),
        ({"request": 5}, "wrong_type", "field 'request' must be a string, got number"),
        ({"response": ...}, "missing_field", "field 'response' is missing"),
        ({"response": ""}, "empty_text", "response"),
        ({"request": "x" * 101}, "oversized", "max_text_chars=100"),
        ({"model": ""}, "invalid_value", "model"),
        ({"model": 7}, "wrong_type", "model"),
        ({"product": "p" * 300}, "invalid_value", "product"),
        ({"attributes": {"n": 1}}, "wrong_type", "attributes.n"),
        ({"attributes": "x"}, "wrong_type", "attributes"),
        ({"classifier": {"score": 2}}, "invalid_value", "classifier.score"),
        ({"classifier": {"verdict": "bad"}}, "unknown_field", "classifier.verdict"),
        ({"conversation_id": 12}, "wrong_type", "conversation_id"),
        ({"schema_version": "2"}, "unsupported_version", "schema_version"),
        ({"schema_version": 1}, "unsupported_version", "schema_version"),
        ({"user": "bob", "ip": "x"}, "unknown_field", "'user', 'ip'"),
    ],
)
def test_native_failures(overrides: dict[str, Any], code: str, needle: str) -> None:
    result = failure(decode(orjson.dumps(native(**overrides)), max_text_chars=100))
    assert result.reason_code == code
    assert needle in result.reason


def test_native_failure_carries_log_id() -> None:
    assert failure(decode(orjson.dumps(native(event_time="soon")))).log_id == "evt-1"
    assert failure(decode(orjson.dumps(native(log_id=None)))).log_id is None


def test_native_raw_limits() -> None:
    raw = orjson.dumps(native())
    assert failure(decode(raw, max_record_bytes=len(raw) - 1)).reason_code == "oversized"
    assert isinstance(decode(raw, max_record_bytes=len(raw)), RefusalEvent)


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"", "not_json"),
        (b"{", "not_json"),
        (b"{'log_id': 'a'}", "not_json"),
        (b'{"a": 1} {"b": 2}', "not_json"),
        (b"null", "not_object"),
        (b"42", "not_object"),
        (b'["a"]', "not_object"),
        (b'{"log_id": "caf\xc3"}', "encoding"),
        (b"\xff\xfe{}", "encoding"),
    ],
)
def test_syntax_failures(raw: bytes, code: str) -> None:
    for fmt in ("jsonl", "mapped-jsonl", "openai"):
        mapping = FieldMapping.parse("request=q,response=a,log_id=id")
        assert failure(decode(raw, fmt, mapping=mapping)).reason_code == code


# --------------------------------------------------------------------------------------------
# the malformed fixture

# line -> expected reason_code (None: decodes). Line 9 is blank (skipped, not an error);
# line 18 repeats line 1's log_id: a duplicate is the pipeline's to report, not the decoder's.
MALFORMED_EXPECTED: dict[int, str | None] = {
    1: None,
    2: "not_json",  # not JSON at all
    3: "not_json",  # truncated JSON
    4: "not_object",  # a JSON array wrapping a record
    5: "missing_log_id",  # no log_id key
    6: None,  # valid, with conversation_id and attributes
    7: "missing_log_id",  # log_id ""
    8: "wrong_type",  # log_id 12345
    10: "bad_timestamp",  # event_time "yesterday"
    11: "naive_timestamp",  # event_time without offset
    12: "wrong_type",  # request is an array
    13: None,  # valid, with a classifier signal
    14: "oversized",  # a 40,000-character response
    15: "unknown_field",  # top-level user_email
    16: "encoding",  # a raw Latin-1 byte in the request
    17: "missing_field",  # response null
    18: None,  # duplicate of line 1
    19: "unsupported_version",  # schema_version "2"
    20: "invalid_value",  # classifier score 1.7
    21: "empty_text",  # request only whitespace
    22: "missing_field",  # no model
    23: "wrong_type",  # event_time as a Unix number
    24: "bad_timestamp",  # February 30th
    25: "not_object",  # a bare JSON string
    26: None,  # valid, +02:00 offset, CRLF line ending
}


def test_malformed_fixture_reason_codes() -> None:
    path = FIXTURES / "malformed.jsonl"
    records = list(read_records(path, "jsonl", MAX_BYTES))
    assert [r.location for r in records] == [f"line {n}" for n in MALFORMED_EXPECTED]
    results = {
        int(r.location.split()[1]): decode_record(r, "jsonl", DecodeOptions()) for r in records
    }
    got = {
        n: (res.reason_code if isinstance(res, DecodeFailure) else None)
        for n, res in results.items()
    }
    assert got == MALFORMED_EXPECTED
    assert len({c for c in MALFORMED_EXPECTED.values() if c}) >= 12
    ids = [res.log_id for res in results.values() if isinstance(res, RefusalEvent)]
    assert Counter(ids)["mf-001"] == 2
    assert results[10] == DecodeFailure(
        "bad_timestamp",
        "field 'event_time': 'yesterday' is not an RFC 3339 timestamp (e.g. 2025-06-01T12:00:00Z)",
        "mf-010",
    )
    assert "user_email" in failure(results[15]).reason
    assert "byte 0xe9" in failure(results[16]).reason
    assert "'response' is null" in failure(results[17]).reason


# --------------------------------------------------------------------------------------------
# mapped-jsonl


def test_mapped_renames_and_keeps_attributes() -> None:
    mapping = FieldMapping.parse(
        " request = prompt , response=reply.text,log_id=id,event_time=meta.ts,"
        "model=meta.model,conversation_id=thread,classifier.score=risk"
    )
    record = {
        "id": 991,
        "prompt": "Where can I shoot photos downtown?",
        "reply": {"text": "I can't help with shooting.", "tokens": 9},
        "meta": {"ts": 1748855700, "model": "m-1", "region": "eu"},
        "thread": "t-1",
        "risk": 0.2,
        "category": "homonyms",
        "is_refusal": True,
        "tags": ["b", "a"],
        "extra": None,
    }
    event = decode(
        orjson.dumps(record), "mapped-jsonl", mapping=mapping, default_product="assistant-web"
    )
    assert isinstance(event, RefusalEvent)
    assert event.log_id == "991"
    assert event.event_time == datetime(2025, 6, 2, 9, 15, tzinfo=UTC)
    assert (event.model, event.product, event.conversation_id) == ("m-1", "assistant-web", "t-1")
    assert event.response == "I can't help with shooting."
    assert event.classifier == ClassifierSignal(score=0.2)
    assert event.attributes == {
        "reply": '{"tokens":9}',
        "meta": '{"region":"eu"}',
        "category": "homonyms",
        "is_refusal": "true",
        "tags": '["b","a"]',
        "extra": "null",
    }


def test_mapped_defaults() -> None:
    mapping = FieldMapping.parse("request=q,response=a,log_id=id,model=m")
    raw = orjson.dumps({"id": "x1", "q": "Define 'overdose'.", "a": "I can't discuss that."})
    event = decode(raw, "mapped-jsonl", mapping=mapping, default_event_time=T0)
    assert isinstance(event, RefusalEvent)
    assert (event.model, event.product, event.event_time) == ("unknown", "unknown", T0)
    event = decode(
        raw, "mapped-jsonl", mapping=mapping, default_event_time=T0, default_model="file-model"
    )
    assert isinstance(event, RefusalEvent) and event.model == "file-model"
    # an exact top-level key with a dot wins over a nested path
    mapping = FieldMapping.parse("request=q.text,response=a,log_id=id")
    raw = orjson.dumps({"id": "x2", "q.text": "hi?", "a": "no.", "q": {"text": "nested"}})
    event = decode(raw, "mapped-jsonl", mapping=mapping, default_event_time=T0)
    assert isinstance(event, RefusalEvent)
    assert (event.request, event.attributes) == ("hi?", {"q": '{"text":"nested"}'})


@pytest.mark.parametrize(
    ("spec", "record", "code", "needle"),
    [
        (
            "request=q,response=a,log_id=id",
            {"q": "?", "a": "!"},
            "missing_log_id",
            "source field 'id' (mapped to log_id) is missing",
        ),
        (
            "request=q,response=a,log_id=id",
            {"id": True, "q": "?", "a": "!"},
            "wrong_type",
            "log_id",
        ),
        (
            "request=q,response=a,log_id=id",
            {"id": "1", "q": "?", "a": None},
            "missing_field",
            "'a' (mapped to response) is null",
        ),
        ("request=q,response=a,log_id=id", {"id": "1", "q": "?"}, "missing_field", "'a'"),
        (
            "request=q.x,response=a,log_id=id",
            {"id": "1", "q": "s", "a": "!"},
            "wrong_type",
            "source field 'q' must be an object",
        ),
        (
            "request=q,response=a,log_id=id,event_time=t",
            {"id": "1", "q": "?", "a": "!"},
            "missing_field",
            "'t' (mapped to event_time) is missing",
        ),
        (
            "request=q,response=a,log_id=id,event_time=t",
            {"id": "1", "q": "?", "a": "!", "t": "2025-06-02T09:15"},
            "bad_timestamp",
            "'t'",
        ),
        (
            "request=q,response=a,log_id=id,event_time=t",
            {"id": "1", "q": "?", "a": "!", "t": 1e20},
            "bad_timestamp",
            "Unix time",
        ),
        (
            "request=q,response=a,log_id=id,event_time=t",
            {"id": "1", "q": "?", "a": "!", "t": [1]},
            "wrong_type",
            "'t'",
        ),
        (
            "request=q,response=a,log_id=id,model=m",
            {"id": "1", "q": "?", "a": "!", "m": 3},
            "wrong_type",
            "'m' (mapped to model)",
        ),
        (
            "request=q,response=a,log_id=id,classifier=c",
            {"id": "1", "q": "?", "a": "!", "c": {"flagged": "yes"}},
            "wrong_type",
            "classifier.flagged",
        ),
    ],
)
def test_mapped_failures(spec: str, record: dict[str, Any], code: str, needle: str) -> None:
    result = failure(
        decode(
            orjson.dumps(record),
            "mapped-jsonl",
            mapping=FieldMapping.parse(spec),
            default_event_time=T0,
        )
    )
    assert result.reason_code == code
    assert needle in result.reason


def test_mapped_needs_mapping_and_time() -> None:
    raw = orjson.dumps({"id": "1", "q": "?", "a": "!"})
    assert failure(decode(raw, "mapped-jsonl")).reason_code == "bad_mapping"
    result = failure(
        decode(raw, "mapped-jsonl", mapping=FieldMapping.parse("request=q,response=a,log_id=id"))
    )
    assert result.reason_code == "missing_field"
    assert "--event-time" in result.reason
    assert result.log_id == "1"


# --------------------------------------------------------------------------------------------
# FieldMapping and DecodeOptions


def test_field_mapping_parse() -> None:
    mapping = FieldMapping.parse("request=prompt,response=response,log_id=id")
    assert dict(mapping.targets) == {"request": "prompt", "response": "response", "log_id": "id"}
    assert mapping == FieldMapping({"log_id": "id", "request": "prompt", "response": "response"})
    assert hash(mapping) == hash(FieldMapping.parse("log_id=id,response=response,request=prompt"))
    with pytest.raises(TypeError):
        mapping.targets["model"] = "m"  # type: ignore[index]


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("", "empty field mapping"),
        ("request", "expected TARGET=SOURCE"),
        ("request=,response=a,log_id=id", "expected TARGET=SOURCE"),
        ("request=q,,response=a,log_id=id", "expected TARGET=SOURCE"),
        ("request=q=r,response=a,log_id=id", "expected TARGET=SOURCE"),
        ("request=q,response=a,log_id=id,prompt=p", "unknown mapping target(s) 'prompt'"),
        ("request=q,response=a,log_id=id,attributes=x", "unknown mapping target"),
        ("request=q,request=r,response=a,log_id=id", "given twice"),
        ("request=q,response=a", "missing: log_id"),
        ("request=q..x,response=a,log_id=id", "bad source field"),
        ("request=q,response=a,log_id=id,classifier=c,classifier.score=s", "not both"),
    ],
)
def test_field_mapping_parse_errors(spec: str, needle: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        FieldMapping.parse(spec)
    assert needle in str(info.value)


def test_decode_options_validation() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        DecodeOptions(default_event_time=datetime(2025, 6, 2))
    with pytest.raises(ValueError, match="positive"):
        DecodeOptions(max_text_chars=0)
    with pytest.raises(ValueError, match="unknown input format"):
        decode_record(SourceRecord("s", "l", b"{}"), "yaml", DecodeOptions())  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# openai


def openai_record(**overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "request": {
            "model": "acme-chat-large",
            "messages": [
                {"role": "system", "content": "Be helpful."},
                {"role": "user", "content": "first question"},
                {"role": "assistant", "content": "first answer"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Where can I shoot"},
                        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                        {"type": "text", "text": "good photos?"},
                    ],
                },
            ],
        },
        "response": {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1748855700,
            "model": "acme-chat-large-2025-06",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {
                        "role": "assistant",
                        "content": "I can't help with that.",
                        "refusal": None,
                    },
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        },
    }
    record.update(overrides)
    return record


def test_openai_record() -> None:
    event = decode(
        orjson.dumps(
            openai_record(
                metadata={"product": "assistant-web", "tenant": "t-1", "n": 2},
                conversation_id="conv-9",
                user="u-7",
            )
        ),
        "openai",
    )
    assert isinstance(event, RefusalEvent)
    assert event.log_id == "chatcmpl-1"
    assert event.request == "Where can I shoot\ngood photos?"
    assert event.response == "I can't help with that."
    assert event.event_time == datetime(2025, 6, 2, 9, 15, tzinfo=UTC)
    assert (event.model, event.product, event.conversation_id) == (
        "acme-chat-large-2025-06",
        "assistant-web",
        "conv-9",
    )
    assert event.classifier is None
    assert event.attributes == {
        "tenant": "t-1",
        "n": "2",
        "user": "u-7",
        "openai.finish_reason": "stop",
    }


def test_openai_refusal_field_log_id_and_model_fallbacks() -> None:
    record = openai_record(log_id="oa-1")
    del record["response"]["model"]
    record["response"]["choices"][0]["message"].update(content=None, refusal="I can't do that.")
    event = decode(orjson.dumps(record), "openai", default_product="web")
    assert isinstance(event, RefusalEvent)
    assert (event.log_id, event.model, event.product) == ("oa-1", "acme-chat-large", "web")
    assert event.response == "I can't do that."
    assert event.classifier == ClassifierSignal(is_refusal=True)
    assert event.attributes["openai.refusal_field"] == "true"
    assert event.attributes["openai.response_id"] == "chatcmpl-1"


def _without_created() -> dict[str, Any]:
    record = openai_record()
    del record["response"]["created"]
    return record


def test_openai_default_event_time() -> None:
    raw = orjson.dumps(_without_created())
    event = decode(raw, "openai", default_event_time=T0)
    assert isinstance(event, RefusalEvent) and event.event_time == T0
    assert failure(decode(raw, "openai")).reason_code == "missing_field"


def _edit(path: str, value: Any) -> dict[str, Any]:
    record = openai_record()
    *parents, last = path.split("/")
    node: Any = record
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is ...:
        del node[last]
    else:
        node[int(last) if isinstance(node, list) else last] = value
    return record


@pytest.mark.parametrize(
    ("record", "code", "needle"),
    [
        (_edit("request", ...), "missing_field", "field 'request' is missing"),
        (_edit("response", "text"), "wrong_type", "field 'response' must be an object"),
        (_edit("response/id", ...), "missing_log_id", "response.id"),
        (_edit("request/messages", ...), "missing_field", "request.messages"),
        (
            _edit("request/messages", [{"role": "system", "content": "x"}]),
            "missing_field",
            "no message with role 'user'",
        ),
        (
            _edit("request/messages/3/content", [{"type": "image_url"}]),
            "empty_text",
            "request.messages[3].content",
        ),
        (
            _edit("request/messages/3/content", [{"type": "text", "text": 5}]),
            "wrong_type",
            "request.messages[3].content[0].text",
        ),
        (_edit("request/messages/3/content", 7), "wrong_type", "request.messages[3].content"),
        (_edit("request/messages/3", "hi"), "wrong_type", "request.messages[3]"),
        (_edit("response/choices", []), "missing_field", "response.choices' is empty"),
        (_edit("response/choices/0/message", ...), "missing_field", "choices[0].message"),
        (
            _edit("response/choices/0/message/content", None),
            "missing_field",
            "content' (and .refusal) is null",
        ),
        (
            _edit("response/choices/0/message", {"content": None, "refusal": 3}),
            "wrong_type",
            "message.refusal",
        ),
        (_edit("response/created", "2025-06-02"), "wrong_type", "response.created"),
        (_edit("response/created", 1e20), "bad_timestamp", "response.created"),
        (_edit("response/model", 4), "wrong_type", "response.model"),
        (_edit("metadata", ["x"]), "wrong_type", "metadata"),
    ],
)
def test_openai_failures(record: dict[str, Any], code: str, needle: str) -> None:
    result = failure(decode(orjson.dumps(record), "openai"))
    assert result.reason_code == code
    assert needle in result.reason


def test_openai_example_file() -> None:
    path = EXAMPLES / "openai_log.jsonl"
    events = [
        decode_record(r, "openai", DecodeOptions()) for r in read_records(path, "openai", MAX_BYTES)
    ]
    assert len(events) == 5
    assert all(isinstance(e, RefusalEvent) for e in events)
    assert len({e.log_id for e in events if isinstance(e, RefusalEvent)}) == 5


# --------------------------------------------------------------------------------------------
# xstest-csv


def write_csv(path: Path, rows: list[list[str]], *, tail: bytes = b"") -> Path:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    path.write_bytes(buffer.getvalue().encode() + tail)
    return path


XS_HEADER = [
    "id",
    "type",
    "prompt",
    "completion",
    "annotation_1",
    "annotation_2",
    "agreement",
    "final_label",
]


def xs_row(row_id: str, completion: str = "I can't help with that.") -> list[str]:
    return [
        row_id,
        "homonyms",
        "How do I kill a Python process?",
        completion,
        "2_full_refusal",
        "2_full_refusal",
        "TRUE",
        "2_full_refusal",
    ]


def test_xstest_csv_reader_and_decoder(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "xstest_v2_completions_mymodel.csv",
        [
            XS_HEADER,
            xs_row("v2-1", "Sorry,\nI can't.\n\nReally."),
            [],
            xs_row("v2-2"),
            [*xs_row("v2-3"), "extra"],
            xs_row("v2-4")[:5],
            xs_row("v2-5", "x" * 200),
            xs_row("v2-6", "   "),
        ],
        tail=b'v2-7,homonyms,caf\xe9?,"no",a,b,TRUE,c\n"v2-8,unterminated\n',
    )
    records = list(read_records(path, "xstest-csv", 600))
    assert [r.location for r in records] == [
        "row 1 (line 2)",
        "row 2 (line 7)",
        "row 3 (line 8)",
        "row 4 (line 9)",
        "row 5 (line 10)",
        "row 6 (line 11)",
        "row 7 (line 12)",
        "row 8 (line 13)",
    ]
    assert records[0].fields is not None and records[0].fields["id"] == "v2-1"
    assert records[2].fields is None and records[3].fields is None
    assert records[0].raw.startswith(b"id,type,prompt,completion,")
    options = DecodeOptions(default_event_time=T0, max_text_chars=100)
    results = [decode_record(r, "xstest-csv", options) for r in records]
    first = results[0]
    assert isinstance(first, RefusalEvent)
    assert (first.log_id, first.model, first.product, first.event_time) == (
        "xstest-mymodel-v2-1",
        "mymodel",
        "xstest",
        T0,
    )
    assert first.response == "Sorry,\nI can't.\n\nReally."
    assert first.attributes == {
        "id": "v2-1",
        "type": "homonyms",
        "annotation_1": "2_full_refusal",
        "annotation_2": "2_full_refusal",
        "agreement": "TRUE",
        "final_label": "2_full_refusal",
    }
    codes = [r.reason_code if isinstance(r, DecodeFailure) else None for r in results]
    assert codes == [
        None,
        None,
        "malformed_row",
        "malformed_row",
        "oversized",
        "empty_text",
        "encoding",
        "malformed_row",
    ]
    assert "9 values but the header has 8 columns" in failure(results[2]).reason
    assert failure(results[4]).log_id == "xstest-mymodel-v2-5"
    # raw alone (a replayed dead letter, or a Kafka message) decodes the same way
    for record, result in zip(records, results, strict=True):
        replay = decode_record(
            SourceRecord(record.source, record.location, record.raw), "xstest-csv", options
        )
        assert replay == result


def test_xstest_needs_event_time_and_columns(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "run.csv", [XS_HEADER, xs_row("v2-1")])
    record = next(read_records(path, "xstest-csv", MAX_BYTES))
    result = failure(decode_record(record, "xstest-csv", DecodeOptions()))
    assert (result.reason_code, result.log_id) == ("missing_field", "xstest-run-v2-1")
    assert "--event-time" in result.reason
    event = decode_record(
        record,
        "xstest-csv",
        DecodeOptions(default_event_time=T0, default_model="gpt-x", default_product="eval"),
    )
    assert isinstance(event, RefusalEvent)
    assert (event.log_id, event.model, event.product) == ("xstest-run-v2-1", "gpt-x", "eval")
    path = write_csv(tmp_path / "other.csv", [["id", "prompt"], ["1", "hi"]])
    record = next(read_records(path, "xstest-csv", MAX_BYTES))
    result = failure(decode_record(record, "xstest-csv", DecodeOptions(default_event_time=T0)))
    assert result.reason_code == "missing_field" and "'completion'" in result.reason
    path = write_csv(tmp_path / "dup.csv", [["id", "id"], ["1", "2"]])
    with pytest.raises(ValueError, match="repeated column names"):
        list(read_records(path, "xstest-csv", MAX_BYTES))


def test_default_model_for() -> None:
    assert default_model_for(Path("d/xstest_v2_completions_gpt4.csv"), "xstest-csv") == "gpt4"
    assert default_model_for(Path("d/xstest_completions_llama.csv"), "xstest-csv") == "llama"
    assert default_model_for(Path("d/run-7.csv"), "xstest-csv") == "run-7"
    assert default_model_for(Path("logs/acme-large.jsonl"), "jsonl") == "acme-large"
    assert xstest_model_from_source("xstest_v2_completions_llama2orig.csv") == "llama2orig"


# --------------------------------------------------------------------------------------------
# real data (../shared/data)


@pytest.mark.integration
def test_real_xstest_files(shared_data: Path) -> None:
    options = DecodeOptions(default_event_time=T0)
    events: list[RefusalEvent] = []
    for name in ("gpt4", "llama2orig"):
        path = shared_data / "xstest" / f"xstest_v2_completions_{name}.csv"
        model = default_model_for(path, "xstest-csv")
        assert model == name
        for record in read_records(path, "xstest-csv", MAX_BYTES):
            event = decode_record(record, "xstest-csv", options)
            assert isinstance(event, RefusalEvent), (record.location, event)
            assert event.model == name and event.log_id.startswith(f"xstest-{name}-v2-")
            events.append(event)
    assert len(events) == 900
    assert len({e.log_id for e in events}) == 900
    for event in events:
        assert {
            "type",
            "annotation_1",
            "annotation_2",
            "agreement",
            "final_label",
        } <= event.attributes.keys()
    labels = Counter(e.attributes["final_label"] for e in events)
    assert set(labels) == {"1_full_compliance", "2_full_refusal", "3_partial_refusal"}
    assert labels["2_full_refusal"] + labels["3_partial_refusal"] == 569  # per the README


@pytest.mark.integration
def test_real_coconot_file(shared_data: Path) -> None:
    path = shared_data / "coconot" / "coconot_refusals.jsonl"
    options = DecodeOptions(
        default_event_time=T0,
        mapping=FieldMapping.parse("request=prompt,response=response,log_id=id"),
    )
    results = [
        decode_record(r, "mapped-jsonl", options)
        for r in read_records(path, "mapped-jsonl", MAX_BYTES)
    ]
    assert len(results) == 800
    events = [r for r in results if isinstance(r, RefusalEvent)]
    failures = [r for r in results if isinstance(r, DecodeFailure)]
    # One source record has "response": null; it is dead-lettered, not invented into "".
    assert len(events) == 799
    assert [(f.reason_code, f.log_id) for f in failures] == [("missing_field", "5sy1qsz")]
    assert len({e.log_id for e in events}) == 799
    for event in events:
        assert set(event.attributes) == {"category", "subcategory", "is_refusal"}
        assert event.attributes["is_refusal"] in ("true", "false")
    categories = Counter(e.attributes["category"] for e in events)
    assert len(categories) == 5


# --------------------------------------------------------------------------------------------
# detect_format


def test_detect_format(shared_data: Path) -> None:
    assert detect_format(b"id,type,prompt,completion,final_label\r\n", "x.CSV") == "xstest-csv"
    assert detect_format(orjson.dumps(native()), "log.jsonl") == "jsonl"
    assert detect_format(b"\xef\xbb\xbf" + orjson.dumps(native()), "log.jsonl") == "jsonl"
    assert detect_format(orjson.dumps(openai_record()), "log.jsonl") == "openai"
    assert (
        detect_format(
            orjson.dumps({"log_id": "1", "request": {"messages": []}, "response": {}}), "log"
        )
        == "openai"
    )
    for path in (shared_data / "xstest").glob("xstest_v2_completions_*.csv"):
        with path.open("rb") as fh:
            assert detect_format(fh.readline(), path.name) == "xstest-csv"
    with (EXAMPLES / "openai_log.jsonl").open("rb") as fh:
        assert detect_format(fh.readline(), "openai_log.jsonl") == "openai"
    with (EXAMPLES / "refusal_log.jsonl").open("rb") as fh:
        assert detect_format(fh.readline(), "refusal_log.jsonl") == "jsonl"
    coconot = shared_data / "coconot" / "coconot_refusals.jsonl"
    with coconot.open("rb") as fh, pytest.raises(ValueError) as info:
        detect_format(fh.readline(), coconot.name)
    assert "--map request=prompt,response=response,log_id=id" in str(info.value)


@pytest.mark.parametrize(
    ("line", "name", "needle"),
    [
        (b"id,prompt,label", "prompts.csv", "no 'prompt' and 'completion'"),
        (b"\xff,\xfe", "bad.csv", "cannot read the CSV header"),
        (b"not json", "x.jsonl", "not JSON"),
        (b"[1, 2]", "x.jsonl", "JSON array"),
        (b'{"text": "hello"}', "x.jsonl", "cannot tell the format"),
        (b"", "x.jsonl", "not JSON"),
    ],
)
def test_detect_format_errors(line: bytes, name: str, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        detect_format(line, name)
    assert needle in str(info.value)
    assert "--format" in str(info.value)


# --------------------------------------------------------------------------------------------
# JSONL reader


def test_jsonl_reader_limits_and_bytes(tmp_path: Path) -> None:
    good = orjson.dumps(native())
    max_bytes = len(good) + 10
    long_line = orjson.dumps(native(log_id="long", response="y" * 5000))
    path = tmp_path / "in.jsonl"
    path.write_bytes(
        b"\n".join(
            [
                good,
                b"   ",
                long_line,
                b"\xff\xfe garbage",
                good + b"\r",
                b"z" * (max_bytes + 1),
                b"z" * max_bytes,
            ]
        )
        + b"\n"
        + good
    )
    records = list(read_records(path, "jsonl", max_bytes))
    assert [r.location for r in records] == [f"line {n}" for n in (1, 3, 4, 5, 6, 7, 8)]
    assert [len(r.raw) for r in records] == [
        len(good),
        max_bytes + 1,
        10,
        len(good),
        max_bytes + 1,
        max_bytes,
        len(good),
    ]
    assert records[2].raw == b"\xff\xfe garbage"
    options = DecodeOptions(max_record_bytes=max_bytes)
    codes = [getattr(decode_record(r, "jsonl", options), "reason_code", None) for r in records]
    assert codes == [None, "oversized", "encoding", None, "oversized", "not_json", None]


# --------------------------------------------------------------------------------------------
# the synthetic example log


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_synthetic_log", EXAMPLES / "generate_synthetic_log.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_synthetic_log_decodes_and_is_reproducible(tmp_path: Path) -> None:
    path = EXAMPLES / "refusal_log.jsonl"
    events = [
        decode_record(r, "jsonl", DecodeOptions()) for r in read_records(path, "jsonl", MAX_BYTES)
    ]
    assert all(isinstance(e, RefusalEvent) for e in events), [
        e for e in events if isinstance(e, DecodeFailure)
    ][:3]
    decoded = [e for e in events if isinstance(e, RefusalEvent)]
    assert 350 <= len(decoded) <= 450
    assert len({e.log_id for e in decoded}) == len(decoded)
    assert len({e.model for e in decoded}) == 3
    assert {e.product for e in decoded} == {"assistant-web", "support-bot", "code-helper"}
    days = {e.event_time.astimezone(UTC).date() for e in decoded}
    assert len(days) == 7
    assert any(e.conversation_id for e in decoded)
    assert any(e.classifier and e.classifier.flagged for e in decoded)
    text = "\n".join(e.request for e in decoded)
    for pii in ("@example.", "555-0", "4111 1111 1111 1111", "203.0.113.42"):
        assert pii in text
    assert (
        sum(text.count(street) for street in ("Example Avenue", "Fictional Lane", "Sample Street"))
        >= 5
    )
    generator = load_generator()
    out = tmp_path / "again.jsonl"
    generator.write(out, generator.generate())
    assert out.read_bytes() == path.read_bytes()


# --------------------------------------------------------------------------------------------
# determinism and robustness


def test_decoding_is_deterministic() -> None:
    records = list(read_records(FIXTURES / "malformed.jsonl", "jsonl", MAX_BYTES))
    records += list(read_records(EXAMPLES / "refusal_log.jsonl", "jsonl", MAX_BYTES))[:50]
    first = [decode_record(r, "jsonl", DecodeOptions()) for r in records]
    second = [decode_record(r, "jsonl", DecodeOptions()) for r in reversed(records)]
    assert first == list(reversed(second))


def _mutations(raw: bytes, rng: random.Random, count: int) -> list[bytes]:
    out = [raw[:i] for i in range(0, len(raw), max(1, len(raw) // 40))]
    for _ in range(count):
        data = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(data))
            data[pos] = rng.choice(b'{}[]",:0 \\\xff\xc3nulltrue9eE-.')
        out.append(bytes(data))
    return out


def test_decode_never_raises_on_garbage(tmp_path: Path) -> None:
    rng = random.Random(7)
    mapping = FieldMapping.parse("request=q,response=a,log_id=id,event_time=t,model=m.name")
    options = DecodeOptions(default_event_time=T0, mapping=mapping)
    samples: list[tuple[InputFormat, bytes]] = [
        ("jsonl", orjson.dumps(native(classifier={"score": 0.5}, attributes={"a": "b"}))),
        ("mapped-jsonl", orjson.dumps({"id": "1", "q": "?", "a": "!", "t": 5, "m": {"name": "x"}})),
        ("openai", orjson.dumps(openai_record(metadata={"product": "p"}))),
        ("xstest-csv", b'id,type,prompt,completion\nv2-1,t,"a,b","c\n""d"""\n'),
    ]
    for fmt, raw in samples:
        assert isinstance(
            decode_record(SourceRecord("s.csv", "l", raw), fmt, options), RefusalEvent
        )
        for data in _mutations(raw, rng, 300):
            result = decode_record(SourceRecord("s.csv", "l", data), fmt, options)
            assert isinstance(result, RefusalEvent | DecodeFailure)
            if isinstance(result, DecodeFailure):
                assert result.reason_code in REASON_CODES and result.reason


def test_every_json_value_type_in_every_field() -> None:
    values: list[Any] = [None, True, 0, -1.5, "", "x", [], ["x"], {}, {"a": 1}]
    for field in (
        "log_id",
        "event_time",
        "request",
        "response",
        "model",
        "product",
        "policy_bundle",
        "conversation_id",
        "classifier",
        "attributes",
        "schema_version",
    ):
        for value in values:
            result = decode(json.dumps(native(**{field: value})))
            assert isinstance(result, RefusalEvent | DecodeFailure)


def test_offsets_kept_and_utc_normalisation_not_applied() -> None:
    tz = timezone(timedelta(hours=-5, minutes=-30))
    event = decode(orjson.dumps(native(event_time="2025-06-02T03:45:00-05:30")))
    assert isinstance(event, RefusalEvent)
    assert event.event_time == datetime(2025, 6, 2, 3, 45, tzinfo=tz)
    assert event.event_time.utcoffset() == timedelta(hours=-5, minutes=-30)


@pytest.mark.parametrize(
    "stamp",
    [
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59Z",
        "1900-01-01T00:00:00+05:00",
        "1969-12-31T23:59:59Z",  # stored fine as DateTime64, but toDate() would wrap it
        "2150-01-01T00:00:00Z",
        "\uff12\uff10\uff12\uff15-01-01T00:00:00Z",
    ],
)
def test_event_times_outside_the_warehouse_range_are_bad_timestamps(stamp: str) -> None:
    record = SourceRecord(
        "f",
        "line 1",
        orjson.dumps(
            {"log_id": "a", "event_time": stamp, "request": "q", "response": "r", "model": "m"}
        ),
    )
    result = decode_record(record, "jsonl", DecodeOptions())
    assert isinstance(result, DecodeFailure) and result.reason_code == "bad_timestamp"


def test_an_event_time_without_a_utc_equivalent_is_a_bad_timestamp() -> None:
    record = SourceRecord(
        "f",
        "line 1",
        orjson.dumps(
            {
                "log_id": "a",
                "event_time": "0001-01-01T00:30:00+01:00",
                "request": "q",
                "response": "r",
                "model": "m",
            }
        ),
    )
    result = decode_record(record, "jsonl", DecodeOptions())
    assert isinstance(result, DecodeFailure) and result.reason_code == "bad_timestamp"
