"""Real refusals from ../shared/data, read by path (never copied), for the tests and the
benchmarks that run the LLM paths against a real model."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def xstest_refusals(
    n: int, contrast: bool | None = None, source: str = "gpt4", shared: Path = SHARED
) -> list[dict[str, str]]:
    """The first ``n`` refusals (``final_label`` full or partial refusal) of XSTest's
    ``source`` completions (``gpt4`` or ``llama2orig``), as CSV rows; with ``contrast``
    True only those of unsafe (``contrast_``) prompts, False only those of safe ones."""
    path = shared / "xstest" / f"xstest_v2_completions_{source}.csv"
    with path.open(encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["final_label"] != "1_full_compliance"]
    if contrast is not None:
        rows = [r for r in rows if r["type"].startswith("contrast_") == contrast]
    return rows[:n]


def coconot_refusals(shared: Path = SHARED) -> Iterator[dict[str, Any]]:
    """CoCoNot's refusal records that have a response, in file order."""
    with (shared / "coconot" / "coconot_refusals.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            if record.get("response"):
                yield record
