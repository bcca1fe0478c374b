"""ResultWriter: dead-letter headers, the topic copy kept under the producer's size limit, and
the original key, headers and null value carried over (the real-broker round trip is in
``tests/test_edges_streaming.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from processors.adapters import DecodeOptions, SourceRecord
from processors.intake import IntakeSettings, prepare
from schemas.deadletter import DeadLetter
from streams.dead_letters import (
    MAX_ORIGINAL_HEADERS_BYTES,
    MAX_ORIGINAL_KEY_BYTES,
    MAX_TOPIC_MESSAGE_BYTES,
    MAX_TOPIC_RAW_BYTES,
    OriginalRecord,
    dead_letter_headers,
    dead_letter_message,
    kafka_location,
    original_record,
)
from streams.result_writer import ResultWriter
from streams.topics import Topics


class Recorder:
    """Stands in for both the warehouse and the topic writer: records what it is given."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None, Any]] = []
        self.stored: list[DeadLetter] = []

    def send(self, topic: str, value: bytes, key: bytes | None = None, headers: Any = None) -> None:
        self.sent.append((topic, value, key, headers))

    def insert_dead_letters(self, items: Sequence[DeadLetter]) -> None:
        self.stored.extend(items)


def letter(raw: bytes, log_id: str | None = "l1", stage: Any = "decode") -> DeadLetter:
    return DeadLetter(
        dead_letter_id="d1",
        stage=stage,
        reason_code="oversized",
        reason="too big",
        source="in",
        location=kafka_location(2, 41),
        raw=raw,
        log_id=log_id,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_dead_letter_headers_name_the_source_record() -> None:
    headers = dict(dead_letter_headers(letter(b"x")))
    assert headers["x-source-topic"] == "in"
    assert (headers["x-source-partition"], headers["x-source-offset"]) == ("2", "41")
    assert headers["x-reason-code"] == "oversized" and headers["x-log-id"] == "l1"


def test_a_large_dead_letter_is_cut_for_the_topic_but_kept_whole_in_the_table() -> None:
    rec = Recorder()
    sink = ResultWriter(rec, rec, Topics.from_prefix("p."))  # type: ignore[arg-type]
    big = letter(b"a" * (MAX_TOPIC_RAW_BYTES + 5000))
    sink.insert_dead_letters([big])
    (topic, value, key, headers) = rec.sent[0]
    assert topic == "p.dead-letters" and key == b"l1"
    assert len(value) == MAX_TOPIC_RAW_BYTES
    assert dict(headers)["x-raw-truncated"] == str(len(big.raw))
    assert rec.stored == [big]


def test_without_originals_the_key_is_the_log_id_and_no_original_headers() -> None:
    value, key, headers = dead_letter_message(letter(b"raw"))
    assert (value, key) == (b"raw", b"l1")
    assert not any(name.startswith("x-original-") for name, _ in headers)


def test_originals_give_the_key_prefixed_headers_in_order_and_keep_ours_unique() -> None:
    original = original_record(
        b"k", [("x-reason-code", b"spoof"), ("a", b"1"), ("a", None), ("s", "str")], b"raw"
    )
    value, key, headers = dead_letter_message(letter(b"raw"), original)
    assert (value, key) == (b"raw", b"k")
    assert headers[-4:] == [
        ("x-original-header-x-reason-code", b"spoof"),
        ("x-original-header-a", b"1"),
        ("x-original-header-a", None),
        ("x-original-header-s", b"str"),
    ]
    assert [name for name, _ in headers].count("x-reason-code") == 1
    assert dict(headers)["x-reason-code"] == "oversized"


def test_an_original_without_key_stays_without_key_even_with_a_log_id() -> None:
    _, key, _ = dead_letter_message(letter(b"raw"), OriginalRecord())
    assert key is None


def test_faust_mapping_headers_are_accepted() -> None:
    assert original_record(None, {"a": b"1"}, None) == OriginalRecord(None, (("a", b"1"),), True)


def test_a_tombstone_stays_null_with_a_header() -> None:
    value, key, headers = dead_letter_message(
        letter(b"", log_id=None), OriginalRecord(b"k", (), True)
    )
    assert value is None and key == b"k"
    assert dict(headers)["x-tombstone"] == "true" and "x-log-id" not in dict(headers)
    # an empty value that was not a tombstone stays empty
    value, _, headers = dead_letter_message(letter(b"", log_id=None), OriginalRecord(b"k"))
    assert value == b"" and "x-tombstone" not in dict(headers)


def test_decode_failures_get_the_log_id_the_decoder_reads() -> None:
    """Through intake, as the worker produces them: a decode failure whose record names a
    log id carries it in ``x-log-id`` and as the key; one that names none has neither."""
    intake = IntakeSettings(
        decode=DecodeOptions(), known_bundles=frozenset({"default"}), redactor=None
    )
    now = datetime(2026, 11, 29, tzinfo=UTC)

    def dead(raw: bytes) -> DeadLetter:
        out = prepare(SourceRecord("t", "partition 0 offset 1", raw), "jsonl", intake, now)
        assert isinstance(out, DeadLetter)
        return out

    bad_time = b'{"log_id": " bt-1 ", "event_time": "yesterday", "request": "q", "response": "r"}'
    headers = dict(dead_letter_headers(dead(bad_time)))
    assert headers["x-log-id"] == "bt-1"
    _, key, _ = dead_letter_message(dead(bad_time))
    assert key == b"bt-1"
    for raw in (b"not json", b'{"log_id": "  "}', b'{"log_id": 7}', b"[1]", b""):
        assert "x-log-id" not in dict(dead_letter_headers(dead(raw))), raw


def test_large_original_headers_and_key_are_bounded_and_the_message_fits() -> None:
    headers = [(f"h{i}", b"v" * 10_000) for i in range(10)]
    original = OriginalRecord(b"k" * (MAX_ORIGINAL_KEY_BYTES + 10), tuple(headers))
    big = letter(b"a" * (MAX_TOPIC_RAW_BYTES + 5000))
    value, key, out = dead_letter_message(big, original)
    assert key is not None and len(key) == MAX_ORIGINAL_KEY_BYTES
    names = dict(out)
    assert names["x-original-key-truncated"] == str(MAX_ORIGINAL_KEY_BYTES + 10)
    kept = [n for n, _ in out if n.startswith("x-original-header-")]
    assert 0 < len(kept) < 10 and names["x-original-headers-dropped"] == str(10 - len(kept))
    assert sum(len(v or b"") for n, v in out if n.startswith("x-original-header-")) <= (
        MAX_ORIGINAL_HEADERS_BYTES
    )
    assert value is not None and names["x-raw-truncated"] == str(len(big.raw))
    total = len(value) + len(key) + sum(len(n) + len(v or b"") for n, v in out)
    assert total < MAX_TOPIC_MESSAGE_BYTES


def test_the_sink_uses_the_originals_of_the_window() -> None:
    rec = Recorder()
    sink = ResultWriter(rec, rec, Topics.from_prefix("p."))  # type: ignore[arg-type]
    sink.use_originals({("in", kafka_location(2, 41)): OriginalRecord(b"orig", (("h", b"v"),))})
    sink.insert_dead_letters([letter(b"x")])
    (_, _, key, headers) = rec.sent[0]
    assert key == b"orig" and ("x-original-header-h", b"v") in headers
    sink.use_originals({})
    sink.insert_dead_letters([letter(b"x")])
    assert rec.sent[1][2] == b"l1"


def test_a_dead_letter_message_with_broken_headers_is_refused_with_a_value_error() -> None:
    import pytest

    from streams.dead_letters import dead_letter_from_message

    value, _key, headers = dead_letter_message(letter(b"a" * (MAX_TOPIC_RAW_BYTES + 10)), None)
    assert dead_letter_from_message(value, headers).raw_truncated
    for broken in (
        [(k, v) for k, v in headers if k != "x-raw-sha256"],  # cut, but no checksum
        [(k, v) for k, v in headers if k != "x-stage"],
        [(k, b"\xff" if k == "x-reason" else v) for k, v in headers],  # not UTF-8
        [(k, b"many" if k == "x-raw-truncated" else v) for k, v in headers],
    ):
        with pytest.raises(ValueError):
            dead_letter_from_message(value, broken)
