"""Prompt tokens per audited event at batch sizes 1, 10 and 50, computed offline.

Renders the real audit prompt (``prompts/audit_v1.md`` with the configured ``default``
policy bundle, the example bundle unless configured otherwise) for the XSTest v2 refusals
(rows of ``xstest_v2_completions_*.csv`` whose human ``final_label`` is
``2_full_refusal`` or ``3_partial_refusal``, both models, redacted as ``audit`` would),
split in consecutive batches of each size, and counts o200k_base tokens with
``processors.tokens`` (no network). Per size it prints:

- prompt tokens per event: all prompt tokens of all batches / events;
- static per event: the share of that which is the prompt's static part (system message,
  user preamble, chat framing; ``AuditPrompt.overhead_tokens``);
- uncached per event: prompt tokens per event when the system message is served from the
  provider's prompt cache (OpenAI caches prompts of 1024+ tokens in 128-token blocks;
  cached tokens are billed at a discount, not free);
- the saving against batch size 1.

Output tokens (about one assessment object per event, independent of the batch size) and
retries are not included. Counts are o200k_base (OpenAI's GPT-4o family and later); other
tokenizers differ by some percent.

Run: ``python benchmarks/prompt_tokens.py [--shared-data DIR] [--sizes 1,10,50] [--json]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from processors.adapters import DecodeFailure, DecodeOptions, SourceRecord, decode_record
from processors.intake import IntakeSettings, prepare
from processors.redaction import Redactor
from processors.tokens import count_tokens
from prompts import load_template
from refusal_audit.audit.readers import read_records
from refusal_audit.bundles import load_bundle
from refusal_audit.config import load_settings
from schemas.events import RefusalEvent, StoredEvent

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
REFUSAL_LABELS = frozenset({"2_full_refusal", "3_partial_refusal"})
CACHE_MIN_TOKENS = 1024
CACHE_BLOCK_TOKENS = 128


def xstest_refusals(data: Path, intake: IntakeSettings) -> list[RefusalEvent]:
    """The human-labelled refusals of every XSTest v2 completions file, redacted."""
    events: list[RefusalEvent] = []
    paths = sorted((data / "xstest").glob("xstest_v2_completions_*.csv"))
    if not paths:
        raise SystemExit(f"no xstest_v2_completions_*.csv under {data / 'xstest'}")
    options = DecodeOptions(default_event_time=T0)
    for path in paths:
        for record in read_records(path, "xstest-csv", options.max_record_bytes):
            decoded = decode_record(record, "xstest-csv", options)
            if isinstance(decoded, DecodeFailure):
                print(f"skipped {path.name} {record.location}: {decoded.reason}", file=sys.stderr)
                continue
            if decoded.attributes.get("final_label") not in REFUSAL_LABELS:
                continue
            rec = SourceRecord("bench", decoded.log_id, decoded.model_dump_json().encode())
            stored = prepare(rec, "jsonl", intake, T0)
            if not isinstance(stored, StoredEvent):
                raise SystemExit(f"intake rejected {decoded.log_id}: {stored.reason}")
            events.append(stored.event)
    return events


def cached_part(system_tokens: int) -> int:
    """Tokens of a system message the provider's prompt cache can serve."""
    if system_tokens < CACHE_MIN_TOKENS:
        return 0
    return system_tokens // CACHE_BLOCK_TOKENS * CACHE_BLOCK_TOKENS


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Print the table; return the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shared-data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--sizes", default="1,10,50", help="comma-separated batch sizes")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in str(args.sizes).split(",") if s.strip()]
    if not sizes or min(sizes) < 1:
        parser.error("--sizes must be positive integers")

    settings = load_settings(None)
    bundle = load_bundle("default", settings.policy_bundles["default"])
    intake = IntakeSettings(
        decode=DecodeOptions(),
        known_bundles={"default"},
        redactor=Redactor(settings.redaction_kinds) if settings.redaction_enabled else None,
        prefilter=False,
    )
    events = xstest_refusals(args.shared_data, intake)
    prompt = load_template()
    overhead = prompt.overhead_tokens(bundle)
    system = count_tokens(prompt.system_message(bundle))
    cached = cached_part(system)

    rows: list[dict[str, Any]] = []
    for size in sizes:
        batches = [events[i : i + size] for i in range(0, len(events), size)]
        total = sum(prompt.prompt_tokens(bundle, b) for b in batches)
        rows.append(
            {
                "batch_size": size,
                "batches": len(batches),
                "prompt_tokens_per_event": total / len(events),
                "static_per_event": overhead * len(batches) / len(events),
                "uncached_per_event": (total - cached * len(batches)) / len(events),
            }
        )
    base = rows[0]["prompt_tokens_per_event"]
    for row in rows:
        row["saving_vs_first"] = 1.0 - row["prompt_tokens_per_event"] / base
    figures: dict[str, Any] = {
        "prompt_version": prompt.version,
        "bundle": f"{bundle.name} {bundle.version}",
        "events": len(events),
        "overhead_tokens": overhead,
        "system_tokens": system,
        "cacheable_tokens": cached,
        "rows": rows,
    }
    if args.json:
        print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
        return figures
    print(
        f"prompt {prompt.version}, bundle {figures['bundle']}: {len(events)} XSTest refusals; "
        f"static part {overhead} tokens (system message {system}, cacheable {cached})"
    )
    print(
        "| batch size | batches | prompt tokens / event | static / event "
        "| uncached / event (system cached) | saving vs size 1 |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(
            f"| {row['batch_size']} | {row['batches']} | {row['prompt_tokens_per_event']:,.0f} "
            f"| {row['static_per_event']:,.0f} | {row['uncached_per_event']:,.0f} "
            f"| {row['saving_vs_first']:.1%} |"
        )
    return figures


if __name__ == "__main__":
    main()
