"""``refusal-audit reaudit``: audit again the events of dead-lettered audits once the cause
(an engine outage, a bad model output) is fixed.

Dead letters of stage ``audit`` hold the redacted events as JSON: a failed batch as
``{"policy_bundle", "events": [...]}``, an unresolved event as ``{"event": {...}, ...}``.
They go through the shared pipeline again; the new assessments replace nothing but are
added as the newest (current) ones, and the dead letters stay as history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from datetime import date
from typing import Any

import orjson

from processors.adapters import DecodeOptions, SourceRecord
from refusal_audit.audit.batch import build_pipeline
from refusal_audit.audit.engine_setup import close_engine
from refusal_audit.audit.pipeline import InputSource, RunReport
from refusal_audit.config import Settings
from warehouse.dead_letters import audit_dead_letters
from warehouse.store import Warehouse


def event_records(letters: Sequence[dict[str, Any]]) -> Iterator[SourceRecord]:
    """Each event held by ``letters`` as a native-JSON source record."""
    for letter in letters:
        raw = letter["raw"]
        doc = orjson.loads(raw if isinstance(raw, bytes) else str(raw).encode())
        events = doc.get("events") or ([doc["event"]] if "event" in doc else [])
        for event in events:
            yield SourceRecord(
                "reaudit", f"dead letter {letter['dead_letter_id']}", orjson.dumps(event)
            )


def run_reaudit(
    cfg: Settings,
    store: Warehouse,
    since: date | None,
    until: date | None,
    ids: Sequence[str],
    engine_name: str | None = None,
) -> tuple[int, RunReport]:
    """Re-audit the selected dead letters' events; return (dead letters, the run's report)."""
    letters = audit_dead_letters(store, since, until, ids)
    pipeline = build_pipeline(cfg, store, engine_name)
    decode = DecodeOptions(max_record_bytes=cfg.max_record_bytes, max_text_chars=cfg.max_text_chars)
    source = InputSource(list(event_records(letters)), "jsonl", decode, reaudit=True)

    async def main() -> RunReport:
        try:
            return await pipeline.run([source])
        finally:
            await close_engine(pipeline.engine)

    return len(letters), asyncio.run(main())
