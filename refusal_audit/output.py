"""Render tabular results as a rich table, JSON lines or CSV."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from datetime import date, datetime
from enum import StrEnum
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table


class OutputFormat(StrEnum):
    """How query results are printed."""

    table = "table"
    json = "json"
    csv = "csv"


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)  # IP addresses, UUIDs, Decimals and other driver types


def render(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    fmt: OutputFormat,
    console: Console,
    title: str | None = None,
) -> None:
    """Print ``rows`` (each a sequence aligned with ``columns``) to ``console`` in ``fmt``.

    JSON prints one object per row (JSON Lines); CSV prints a header then the rows.
    """
    if fmt is OutputFormat.json:
        for row in rows:
            line = orjson.dumps({c: _plain(v) for c, v in zip(columns, row, strict=True)})
            console.file.write(line.decode() + "\n")
        return
    if fmt is OutputFormat.csv:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_cell(v) for v in row])
        console.file.write(buffer.getvalue())
        return
    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")  # wrap, never cut a value short
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    console.print(table)


def _cell(value: Any) -> str:
    plain = _plain(value)
    if isinstance(plain, float):
        return f"{plain:.4f}"
    if isinstance(plain, list | dict):
        return orjson.dumps(plain).decode()
    return "" if plain is None else str(plain)
