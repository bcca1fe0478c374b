"""StreamSink: dead-letter headers and the topic copy kept under the producer's size limit."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from schemas.deadletter import DeadLetter
from streams.sink import MAX_TOPIC_RAW_BYTES, StreamSink, dead_letter_headers, kafka_location
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


def letter(raw: bytes) -> DeadLetter:
    return DeadLetter(
        dead_letter_id="d1",
        stage="decode",
        reason_code="oversized",
        reason="too big",
        source="in",
        location=kafka_location(2, 41),
        raw=raw,
        log_id="l1",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_dead_letter_headers_name_the_source_record() -> None:
    headers = dict(dead_letter_headers(letter(b"x")))
    assert headers["x-source-topic"] == "in"
    assert (headers["x-source-partition"], headers["x-source-offset"]) == ("2", "41")
    assert headers["x-reason-code"] == "oversized" and headers["x-log-id"] == "l1"


def test_a_large_dead_letter_is_cut_for_the_topic_but_kept_whole_in_the_table() -> None:
    rec = Recorder()
    sink = StreamSink(rec, rec, Topics.from_prefix("p."))  # type: ignore[arg-type]
    big = letter(b"a" * (MAX_TOPIC_RAW_BYTES + 5000))
    sink.insert_dead_letters([big])
    (topic, value, key, headers) = rec.sent[0]
    assert topic == "p.dead-letters" and key == b"l1"
    assert len(value) == MAX_TOPIC_RAW_BYTES
    assert dict(headers)["x-raw-truncated"] == str(len(big.raw))
    assert rec.stored == [big]
