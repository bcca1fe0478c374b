"""Guessing a file's input format from its first line and its name (``detect_format``)."""

from __future__ import annotations

import csv
from typing import Final

import orjson

from processors.adapters.checks import BOM, json_type
from processors.adapters.records import InputFormat

_MAP_HINTS: Final[dict[str, tuple[str, ...]]] = {
    "request": ("prompt", "request", "question", "input", "query", "user_message"),
    "response": ("response", "completion", "output", "answer", "reply"),
    "log_id": ("log_id", "id", "uuid", "request_id", "event_id"),
}


def _mapping_hint(keys: list[str]) -> str:
    guess: list[str] = []
    for target, candidates in _MAP_HINTS.items():
        hit = next((c for c in candidates if c in keys), None)
        if hit is None:
            return ""
        guess.append(f"{target}={hit}")
    return f" (perhaps --format mapped-jsonl --map {','.join(guess)})"


def detect_format(first_line: bytes, filename: str) -> InputFormat:
    """Guess the input format from a file's first non-blank line and its name.

    ``*.csv`` whose header has ``prompt`` and ``completion`` -> ``xstest-csv``; a JSON object
    with ``request.messages`` or ``response.choices`` -> ``openai``; a JSON object with
    ``log_id``, ``request`` and ``response`` -> ``jsonl``. ``mapped-jsonl`` is never guessed.
    Raises ``ValueError`` telling the user to pass ``--format`` / ``--map`` otherwise.
    """
    advice = "pass --format (jsonl, mapped-jsonl, openai, xstest-csv) and, for mapped-jsonl, --map"
    line = first_line[len(BOM) :] if first_line.startswith(BOM) else first_line
    if filename.lower().endswith(".csv"):
        try:
            header = next(csv.reader([line.decode("utf-8")]), [])
        except (UnicodeDecodeError, csv.Error) as exc:
            raise ValueError(f"{filename}: cannot read the CSV header ({exc}); {advice}") from None
        columns = {c.strip() for c in header}
        if {"prompt", "completion"} <= columns:
            return "xstest-csv"
        raise ValueError(
            f"{filename}: CSV header {header} has no 'prompt' and 'completion' columns; {advice}"
        )
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{filename}: first record is not JSON ({exc}); {advice}") from None
    if not isinstance(value, dict):
        raise ValueError(
            f"{filename}: first record is a JSON {json_type(value)}, not an object; {advice}"
        )
    request, response = value.get("request"), value.get("response")
    if (isinstance(request, dict) and "messages" in request) or (
        isinstance(response, dict) and "choices" in response
    ):
        return "openai"
    if {"log_id", "request", "response"} <= value.keys():
        return "jsonl"
    keys = list(value)
    raise ValueError(
        f"{filename}: cannot tell the format from fields {keys}; {advice}{_mapping_hint(keys)}"
    )
