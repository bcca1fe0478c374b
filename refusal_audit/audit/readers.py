"""The file I/O edge of batch mode: turn an input file into ``SourceRecord``s.

Readers never judge content: every non-blank line (JSONL) or row (CSV) is yielded, however
broken, and ``processors.adapters.decode_record`` says what is wrong with it.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from processors.adapters import InputFormat, SourceRecord, xstest_model_from_source

_CSV_FIELD_LIMIT = 2**31 - 1
_DISCARD_CHUNK = 1 << 16


def read_records(
    path: Path, fmt: InputFormat, max_record_bytes: int, keep_bytes: int = 0
) -> Iterator[SourceRecord]:
    """Yield the records of ``path`` lazily, in file order.

    A record is held whole up to ``cap = max(max_record_bytes, keep_bytes) + 1`` bytes
    (``keep_bytes``: what a dead letter keeps, ``dead_letter_max_raw_bytes``); a longer one
    is yielded cut to ``cap`` bytes with ``full_length`` and ``full_sha256`` describing the
    whole record (the rest is hashed, never held in memory), and decode reports it
    ``oversized`` (it exceeds ``max_record_bytes``).

    JSONL formats (``jsonl``, ``mapped-jsonl``, ``openai``): one record per line, location
    ``"line N"`` (1-based, blank lines skipped but counted); ``raw`` is the line without its
    line ending, as bytes (invalid UTF-8 is passed through for decode to report).

    ``xstest-csv``: one record per CSV row (fields may span lines), location
    ``"row R (line N)"`` with N the row's first line; ``raw`` is the header line plus the row's
    original lines (cut to ``cap``), ``fields`` the row as
    column -> value, or ``None`` for a row with the wrong number of values or a CSV syntax
    error (decode then re-parses ``raw`` and reports ``malformed_row``). Blank rows are skipped.
    Note: raises the process-wide ``csv.field_size_limit`` so large fields reach decode.

    Raises ``OSError`` when the file cannot be opened and ``ValueError`` for an unusable CSV
    header (unparsable or with repeated column names).
    """
    source = str(path)
    cap = max(max_record_bytes, keep_bytes) + 1
    if fmt == "xstest-csv":
        yield from _read_csv(path, source, cap)
    else:
        with path.open("rb") as fh:
            yield from _read_lines(fh, source, cap)


def default_model_for(path: Path, fmt: InputFormat) -> str:
    """A model name derived from the file name, for records that name none.

    ``xstest-csv``: ``xstest_v2_completions_gpt4.csv`` -> ``"gpt4"`` (any other name -> the
    stem); other formats: the file stem (``logs/acme-large.jsonl`` -> ``"acme-large"``).
    """
    if fmt == "xstest-csv":
        return xstest_model_from_source(str(path))
    return path.stem


def _read_lines(fh: BinaryIO, source: str, cap: int) -> Iterator[SourceRecord]:
    line_no = 0
    while True:
        chunk = fh.readline(cap + 1)
        if not chunk:
            return
        line_no += 1
        if not chunk.endswith(b"\n") and len(chunk) > cap:
            length, digest = _hash_rest_of_line(chunk, fh)
            raw = chunk[:cap]
            if length == len(raw):  # it fitted after all: the chunk's last byte was the \r
                yield SourceRecord(source=source, location=f"line {line_no}", raw=raw)
                continue
            yield SourceRecord(
                source=source,
                location=f"line {line_no}",
                raw=raw,
                full_length=length,
                full_sha256=digest,
            )
            continue
        raw = chunk[:-2] if chunk.endswith(b"\r\n") else chunk.rstrip(b"\n")
        if not raw.strip():
            continue
        yield SourceRecord(source=source, location=f"line {line_no}", raw=raw)


def _hash_rest_of_line(first: bytes, fh: BinaryIO) -> tuple[int, str]:
    """Length and SHA-256 hex of a line whose first ``first`` bytes were read, reading (and
    keeping none of) the rest, without its ``\n`` or ``\r\n`` ending.

    A ``\r`` at the end of a piece is held back until the next piece shows whether it
    begins the line ending.
    """
    whole, length, held_cr = hashlib.sha256(), 0, False

    def count(data: bytes) -> None:
        nonlocal length
        whole.update(data)
        length += len(data)

    piece = first
    while True:
        if not piece:  # end of file: a held \r was content
            if held_cr:
                count(b"\r")
            return length, whole.hexdigest()
        ends = piece.endswith(b"\n")
        body = piece[:-1] if ends else piece
        if held_cr and not (ends and not body):  # the held \r was not part of \r\n
            count(b"\r")
        held_cr = False
        if ends:
            count(body[:-1] if body.endswith(b"\r") else body)
            return length, whole.hexdigest()
        if body.endswith(b"\r"):
            held_cr, body = True, body[:-1]
        count(body)
        piece = fh.readline(_DISCARD_CHUNK)


class _LineTap:
    """Feeds lines to ``csv.reader`` while keeping the current record's original text.

    The record is kept up to ``cap_bytes`` (with ``prefix``, the header line, in front);
    its whole length and SHA-256 (prefix included) are counted however long it is.
    """

    def __init__(self, lines: Iterator[str], cap_bytes: int) -> None:
        self._lines = lines
        self._cap = cap_bytes
        self.lines_read = 0
        self.record_lines = 0
        self.prefix = b""
        self._parts: list[bytes] = []
        self._size = 0
        self._hash = hashlib.sha256()
        self.whole_length = 0

    def __iter__(self) -> _LineTap:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.lines_read += 1
        self.record_lines += 1
        data = line.encode("utf-8", "surrogateescape")
        self._hash.update(data)
        self._size += len(data)
        if len(self.prefix) + self._size - len(data) <= self._cap:
            self._parts.append(data)
        return line

    def take(self) -> tuple[bytes, int, str]:
        """The current record with the prefix: ``(bytes capped, whole length, whole
        SHA-256 hex)``; starts the next record."""
        data = (self.prefix + b"".join(self._parts))[: self._cap]
        taken = (data, len(self.prefix) + self._size, self._hash.hexdigest())
        self._parts, self._size, self.record_lines = [], 0, 0
        self._hash = hashlib.sha256(self.prefix)
        return taken

    def set_prefix(self, prefix: bytes) -> None:
        """Put ``prefix`` (the header line) in front of every following record."""
        self.prefix = prefix
        self._hash = hashlib.sha256(prefix)


def _read_csv(path: Path, source: str, cap: int) -> Iterator[SourceRecord]:
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)
    with path.open("r", encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
        tap = _LineTap(iter(fh), cap)
        reader = csv.reader(tap)
        header: list[str] | None = None
        row_no = 0
        while True:
            try:
                row = next(reader)
                error: str | None = None
            except StopIteration:
                return
            except csv.Error as exc:
                if header is None:
                    raise ValueError(f"{source}: cannot read the CSV header: {exc}") from None
                row, error = [], str(exc)
            first_line = tap.lines_read - tap.record_lines + 1
            raw, length, sha256 = tap.take()
            if header is None:
                if not row:
                    continue
                if len(set(row)) != len(row):
                    raise ValueError(f"{source}: repeated column names in CSV header {row}")
                header = row
                tap.set_prefix(raw)
                continue
            if not row and error is None:
                continue  # blank line
            row_no += 1
            fields = dict(zip(header, row, strict=True)) if len(row) == len(header) else None
            if error is not None:
                fields = None
            cut = length > len(raw)
            yield SourceRecord(
                source=source,
                location=f"row {row_no} (line {first_line})",
                raw=raw,
                fields=fields,
                full_length=length if cut else None,
                full_sha256=sha256 if cut else None,
            )
