"""Dead letters keep what they claim: whole up to ``dead_letter_max_raw_bytes``, beyond it the
first bytes plus the whole value's length and SHA-256 and where it was; tombstones have a
reason of their own; the topic copy's headers are ours first, in the order docs/streaming.md
gives."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from processors.adapters import DecodeOptions, SourceRecord
from processors.intake import IntakeSettings, make_dead_letter, prepare
from refusal_audit.audit.readers import read_records
from schemas.deadletter import DeadLetter
from streams.dead_letters import OriginalRecord, dead_letter_message, kafka_location
from warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 11, 30, tzinfo=UTC)
MIB = 1_048_576


def intake(max_raw: int = MIB) -> IntakeSettings:
    return IntakeSettings(
        decode=DecodeOptions(),
        known_bundles=frozenset({"default"}),
        redactor=None,
        dead_letter_max_raw_bytes=max_raw,
    )


def oversized_record(size: int) -> SourceRecord:
    body = b'{"log_id": "big-1", "request": "' + b"x" * size
    return SourceRecord("in", kafka_location(1, 77), body[:size])


def test_a_record_over_the_limit_keeps_its_length_hash_and_place() -> None:
    record = oversized_record(5_000_127)
    letter = prepare(record, "jsonl", intake(), NOW)
    assert isinstance(letter, DeadLetter) and letter.reason_code == "oversized"
    assert len(letter.raw) == MIB and letter.raw == record.raw[:MIB]
    assert letter.raw_truncated
    assert letter.raw_length == 5_000_127
    assert letter.raw_sha256 == hashlib.sha256(record.raw).hexdigest()
    assert (letter.source, letter.location) == ("in", "partition 1 offset 77")


def test_a_record_within_a_raised_limit_is_kept_whole() -> None:
    record = oversized_record(5_000_127)
    letter = prepare(record, "jsonl", intake(max_raw=8 * MIB), NOW)
    assert isinstance(letter, DeadLetter)
    assert letter.raw == record.raw and not letter.raw_truncated
    assert letter.raw_length == len(record.raw)


def test_the_topic_copy_gives_the_whole_length_not_what_was_kept() -> None:
    letter = make_dead_letter(oversized_record(5_000_127), "decode", "oversized", "big", NOW)
    value, _, headers = dead_letter_message(letter)
    named = dict(headers)
    assert value is not None and len(value) < MIB
    assert named["x-raw-truncated"] == "5000127"
    assert named["x-raw-sha256"] == letter.raw_sha256


def test_a_whole_small_letter_has_no_truncation_headers() -> None:
    letter = make_dead_letter(SourceRecord("in", "line 1", b"nope"), "decode", "not_json", "x", NOW)
    value, _, headers = dead_letter_message(letter)
    assert value == b"nope"
    assert not {"x-raw-truncated", "x-raw-sha256"} & {n for n, _ in headers}
    assert letter.raw_length == 4 and not letter.raw_truncated


def test_a_file_line_over_the_limit_is_hashed_whole_while_read(tmp_path: Path) -> None:
    line = b'{"log_id": "f-1", "request": "' + b"y" * 3_000_000 + b'"}'
    path = tmp_path / "big.jsonl"
    path.write_bytes(b'{"log_id": "ok"}\n' + line + b"\r\n" + b'{"log_id": "after"}\n')
    records = list(read_records(path, "jsonl", 262_144, keep_bytes=MIB))
    assert [r.location for r in records] == ["line 1", "line 2", "line 3"]
    big = records[1]
    assert len(big.raw) == MIB + 1  # held up to the cap, never the whole line
    assert big.full_length == len(line)
    assert big.full_sha256 == hashlib.sha256(line).hexdigest()
    letter = prepare(big, "jsonl", intake(), NOW)
    assert isinstance(letter, DeadLetter) and letter.reason_code == "oversized"
    assert letter.raw_length == len(line) and letter.raw_truncated and len(letter.raw) == MIB


def test_a_csv_row_over_the_limit_is_hashed_whole_with_its_header(tmp_path: Path) -> None:
    header = b"id,prompt,completion\n"
    row = b'1,"' + b"z" * 40_000 + b'",done\n'
    path = tmp_path / "x.csv"
    path.write_bytes(header + row)
    (record,) = read_records(path, "xstest-csv", 2048, keep_bytes=4096)
    assert len(record.raw) == 4097
    assert record.full_length == len(header + row)
    assert record.full_sha256 == hashlib.sha256(header + row).hexdigest()


def test_a_tombstone_has_its_own_reason_code() -> None:
    tomb = prepare(SourceRecord("in", "partition 0 offset 3", b"", tombstone=True), "jsonl",
                   intake(), NOW)  # fmt: skip
    empty = prepare(SourceRecord("in", "partition 0 offset 4", b""), "jsonl", intake(), NOW)
    assert isinstance(tomb, DeadLetter) and isinstance(empty, DeadLetter)
    assert tomb.reason_code == "tombstone" and "null value" in tomb.reason
    assert empty.reason_code == "not_json"


def all_header_sets() -> list[list[str]]:
    """Header names of dead-letter copies in every situation the sink handles."""
    big = make_dead_letter(oversized_record(2 * MIB), "decode", "oversized", "big", NOW, "l-1")
    tomb = make_dead_letter(
        SourceRecord("in", kafka_location(0, 1), b"", tombstone=True), "decode", "tombstone",
        "null", NOW,
    )  # fmt: skip
    many_headers = tuple((f"h{i}", b"v" * 1000) for i in range(80))
    original = OriginalRecord(b"k" * 70_000, many_headers, False)
    return [
        [n for n, _ in dead_letter_message(big, original)[2]],
        [n for n, _ in dead_letter_message(tomb, OriginalRecord(b"k", (("h", b"v"),), True))[2]],
    ]


def test_our_headers_come_first_then_the_original_ones() -> None:
    for names in all_header_sets():
        originals = [i for i, n in enumerate(names) if n.startswith("x-original-header-")]
        ours = [i for i, n in enumerate(names) if not n.startswith("x-original-header-")]
        assert originals and max(ours) < min(originals), names
    big, tomb = all_header_sets()
    assert big[:10] == [
        "x-dead-letter-id", "x-stage", "x-reason-code", "x-reason", "x-source",
        "x-source-location", "x-source-topic", "x-source-partition", "x-source-offset",
        "x-log-id",
    ]  # fmt: skip
    assert "x-tombstone" in tomb and tomb.index("x-tombstone") < tomb.index("x-original-header-h")


def test_the_docs_list_every_header_the_sink_sends() -> None:
    docs = (REPO / "README.md").read_text(encoding="utf-8")
    docs += "".join(p.read_text(encoding="utf-8") for p in (REPO / "docs").glob("*.md"))
    documented = set(re.findall(r"`(x-[a-z0-9-]+)", docs))
    sent = {n for names in all_header_sets() for n in names if not n.startswith("x-original-h")}
    assert sent <= documented, sorted(sent - documented)


@pytest.mark.integration
def test_the_table_stores_the_whole_value_description(warehouse: Warehouse) -> None:
    letter = make_dead_letter(oversized_record(3 * MIB), "decode", "oversized", "big", NOW)
    warehouse.insert_dead_letters([letter])
    (row,) = warehouse.client.query(
        "SELECT length(raw), raw_length, raw_sha256, raw_truncated, location "
        "FROM {db:Identifier}.dead_letters FINAL",
        parameters={"db": warehouse.database},
    ).result_rows
    assert row == (MIB, 3 * MIB, letter.raw_sha256, True, "partition 1 offset 77")


@pytest.mark.parametrize("extra", [-1, 0, 1, 65_535, 65_536, 65_537, 200_000])
@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b""])
def test_length_and_hash_of_a_cut_line_ignore_its_ending_wherever_reads_split_it(
    tmp_path: Path, extra: int, ending: bytes
) -> None:
    cap = 4096 + 1  # max(max_record_bytes, keep_bytes) + 1
    line = b"x" * (cap + extra)
    path = tmp_path / "l.jsonl"
    path.write_bytes(line + ending + (b"next\n" if ending else b""))  # b"": end of file
    first = next(read_records(path, "jsonl", 1024, keep_bytes=4096))
    whole_length = first.full_length if first.full_length is not None else len(first.raw)
    assert whole_length == len(line)
    if first.full_sha256 is not None:
        assert first.full_sha256 == hashlib.sha256(line).hexdigest()


def test_a_carriage_return_inside_a_cut_line_is_content(tmp_path: Path) -> None:
    line = b"a" * 5000 + b"\r" + b"b" * 70_000 + b"\r"
    path = tmp_path / "cr.jsonl"
    path.write_bytes(line + b"\r\n")
    (record,) = read_records(path, "jsonl", 1024, keep_bytes=2048)
    assert record.full_length == len(line)
    assert record.full_sha256 == hashlib.sha256(line).hexdigest()
