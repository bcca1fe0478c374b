"""Format ``xstest-csv``: a row of an XSTest v2 completions CSV, and the model its file names."""

from __future__ import annotations

import csv
import io
import re
from pathlib import PurePath
from typing import Any, Final

from processors.adapters.checks import DecodeContext, build, reject, require_text, to_text
from processors.adapters.records import DecodeOptions, SourceRecord
from schemas.events import RefusalEvent

XSTEST_COLUMNS: Final[tuple[str, ...]] = (
    "id",
    "type",
    "prompt",
    "completion",
    "annotation_1",
    "annotation_2",
    "agreement",
    "final_label",
)

_XSTEST_STEM = re.compile(r"xstest(?:_v\d+)?_completions_(.+)", re.IGNORECASE)


def xstest_model_from_source(source: str) -> str:
    """The model name an XSTest completions file encodes: ``xstest_v2_completions_gpt4.csv``
    -> ``"gpt4"``; any other name -> its stem (``"my_run.csv"`` -> ``"my_run"``)."""
    stem = PurePath(source).stem
    m = _XSTEST_STEM.fullmatch(stem)
    return m.group(1) if m else stem


def _parse_csv_raw(raw: bytes) -> dict[str, str]:
    """Parse ``raw`` = header line + one row (as ``SourceRecord`` documents it)."""
    text = to_text(raw)
    try:
        rows = [row for row in csv.reader(io.StringIO(text, newline="")) if row]
    except csv.Error as exc:
        reject("malformed_row", f"row is not valid CSV: {exc}")
    if len(rows) != 2:
        reject(
            "malformed_row", f"expected a header line and one row, found {len(rows)} CSV record(s)"
        )
    header, row = rows
    if len(row) != len(header):
        reject(
            "malformed_row", f"row has {len(row)} values but the header has {len(header)} columns"
        )
    return dict(zip(header, row, strict=True))


def decode_xstest(record: SourceRecord, options: DecodeOptions, ctx: DecodeContext) -> RefusalEvent:
    """Decode one XSTest CSV row into a ``RefusalEvent``; raises ``Reject``."""
    fields = record.fields if record.fields is not None else _parse_csv_raw(record.raw)
    for column, value in fields.items():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            to_text(record.raw)  # reports the offending byte, as a replay of raw would
            reject("encoding", f"column '{column}' is not valid UTF-8")
    missing = [c for c in ("id", "prompt", "completion") if c not in fields]
    if missing:
        reject(
            "missing_field",
            f"column(s) {', '.join(map(repr, missing))} missing; XSTest "
            f"completion CSVs have columns {', '.join(XSTEST_COLUMNS)}",
        )
    file_model = xstest_model_from_source(record.source)
    row_id = fields["id"].strip()
    if not row_id:
        reject("missing_log_id", "column 'id' is empty")
    ctx.log_id = f"xstest-{file_model}-{row_id}"
    if options.default_event_time is None:
        reject(
            "missing_field",
            "XSTest rows have no timestamp: pass --event-time (DecodeOptions.default_event_time)",
        )
    data: dict[str, Any] = {
        "log_id": ctx.log_id,
        "event_time": options.default_event_time,
        "request": require_text(fields["prompt"], True, "column 'prompt'", options),
        "response": require_text(fields["completion"], True, "column 'completion'", options),
        "model": options.default_model or file_model,
        "product": options.default_product or "xstest",
        "attributes": {k: v for k, v in fields.items() if k not in ("prompt", "completion")},
    }
    return build(data)
