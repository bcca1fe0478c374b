"""The file I/O edge of batch mode: turn an input file into ``SourceRecord``s.

Readers never judge content: every non-blank line (JSONL) or row (CSV) is yielded, however
broken, and ``processors.adapters.decode_record`` says what is wrong with it.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from processors.adapters import InputFormat, SourceRecord, xstest_model_from_source

_CSV_FIELD_LIMIT = 2**31 - 1
_DISCARD_CHUNK = 1 << 16


def read_records(path: Path, fmt: InputFormat, max_record_bytes: int) -> Iterator[SourceRecord]:
    """Yield the records of ``path`` lazily, in file order.

    JSONL formats (``jsonl``, ``mapped-jsonl``, ``openai``): one record per line, location
    ``"line N"`` (1-based, blank lines skipped but counted); ``raw`` is the line without its
    line ending, as bytes (invalid UTF-8 is passed through for decode to report); a line over
    ``max_record_bytes`` is yielded with ``raw`` cut to ``max_record_bytes + 1`` bytes (the
    rest is never held in memory), so decode reports ``oversized``.

    ``xstest-csv``: one record per CSV row (fields may span lines), location
    ``"row R (line N)"`` with N the row's first line; ``raw`` is the header line plus the row's
    original lines (cut to ``max_record_bytes + 1`` bytes), ``fields`` the row as
    column -> value, or ``None`` for a row with the wrong number of values or a CSV syntax
    error (decode then re-parses ``raw`` and reports ``malformed_row``). Blank rows are skipped.
    Note: raises the process-wide ``csv.field_size_limit`` so large fields reach decode.

    Raises ``OSError`` when the file cannot be opened and ``ValueError`` for an unusable CSV
    header (unparsable or with repeated column names).
    """
    source = str(path)
    if fmt == "xstest-csv":
        yield from _read_csv(path, source, max_record_bytes)
    else:
        with path.open("rb") as fh:
            yield from _read_lines(fh, source, max_record_bytes)


def default_model_for(path: Path, fmt: InputFormat) -> str:
    """A model name derived from the file name, for records that name none.

    ``xstest-csv``: ``xstest_v2_completions_gpt4.csv`` -> ``"gpt4"`` (any other name -> the
    stem); other formats: the file stem (``logs/acme-large.jsonl`` -> ``"acme-large"``).
    """
    if fmt == "xstest-csv":
        return xstest_model_from_source(str(path))
    return path.stem


def _read_lines(fh: BinaryIO, source: str, max_record_bytes: int) -> Iterator[SourceRecord]:
    limit = max_record_bytes + 1
    line_no = 0
    while True:
        chunk = fh.readline(limit + 1)
        if not chunk:
            return
        line_no += 1
        if not chunk.endswith(b"\n") and len(chunk) > limit:
            raw = chunk[:limit]
            while True:  # discard the rest of the overlong line
                rest = fh.readline(_DISCARD_CHUNK)
                if not rest or rest.endswith(b"\n"):
                    break
        else:
            raw = chunk[:-2] if chunk.endswith(b"\r\n") else chunk.rstrip(b"\n")
        if not raw.strip():
            continue
        yield SourceRecord(source=source, location=f"line {line_no}", raw=raw)


class _LineTap:
    """Feeds lines to ``csv.reader`` while keeping the current record's original text."""

    def __init__(self, lines: Iterator[str], cap_bytes: int) -> None:
        self._lines = lines
        self._cap = cap_bytes
        self.lines_read = 0
        self.record_lines = 0
        self._parts: list[bytes] = []
        self._size = 0

    def __iter__(self) -> _LineTap:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.lines_read += 1
        self.record_lines += 1
        if self._size <= self._cap:
            data = line.encode("utf-8", "surrogateescape")
            self._parts.append(data)
            self._size += len(data)
        return line

    def take(self) -> bytes:
        """The current record's bytes (capped); starts the next record."""
        data = b"".join(self._parts)
        self._parts, self._size, self.record_lines = [], 0, 0
        return data[: self._cap]


def _read_csv(path: Path, source: str, max_record_bytes: int) -> Iterator[SourceRecord]:
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)
    with path.open("r", encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
        tap = _LineTap(iter(fh), max_record_bytes + 1)
        reader = csv.reader(tap)
        header: list[str] | None = None
        header_raw = b""
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
            raw = tap.take()
            if header is None:
                if not row:
                    continue
                if len(set(row)) != len(row):
                    raise ValueError(f"{source}: repeated column names in CSV header {row}")
                header, header_raw = row, raw
                continue
            if not row and error is None:
                continue  # blank line
            row_no += 1
            fields = dict(zip(header, row, strict=True)) if len(row) == len(header) else None
            if error is not None:
                fields = None
            yield SourceRecord(
                source=source,
                location=f"row {row_no} (line {first_line})",
                raw=(header_raw + raw)[: max_record_bytes + 1],
                fields=fields,
            )
