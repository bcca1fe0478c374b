"""Batch mode: audit log files end to end without Kafka (``refusal-audit audit``)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, cast, get_args

import orjson
from rich.progress import Progress

from processors.adapters import (
    DecodeOptions,
    FieldMapping,
    InputFormat,
    detect_format,
)
from processors.intake import IntakeSettings
from refusal_audit.audit.engine_setup import (
    close_engine,
    configured_redactor,
    make_engine,
    tag_prefilter,
)
from refusal_audit.audit.pipeline import AuditPipeline, InputSource, RunReport, Sink
from refusal_audit.audit.readers import default_model_for, read_records
from refusal_audit.bundles import load_bundles
from refusal_audit.config import ConfigError, Settings

if TYPE_CHECKING:  # pyarrow and the ClickHouse driver with it: the topics worker never stores
    from warehouse.store import Warehouse

FORMATS: tuple[str, ...] = get_args(InputFormat)


RESPONSE_ONLY = "response-only"
"""The pre-filter tag of an engine behind ``prefilter_request_aware = false`` (the cue rules
read the response alone): ``<engine version>/prefilter=response-only``."""


@dataclass(frozen=True)
class BatchOptions:
    """Per-run input options from the command line.

    ``input_format`` None means detect per file; ``event_time`` None means each file's
    modification time for records without a timestamp.
    """

    input_format: InputFormat | None
    mapping: FieldMapping | None
    event_time: datetime | None
    model: str | None
    product: str | None

    @classmethod
    def build(
        cls,
        input_format: str | None,
        mapping: str | None,
        event_time: datetime | None,
        model: str | None,
        product: str | None,
    ) -> BatchOptions:
        """Validate raw option values. Raises ``ValueError`` with a usage message."""
        if input_format is not None and input_format not in FORMATS:
            raise ValueError(f"unknown format {input_format!r}; choose one of {', '.join(FORMATS)}")
        parsed = FieldMapping.parse(mapping) if mapping else None
        if parsed is not None:
            if input_format not in (None, "mapped-jsonl"):
                raise ValueError("--map only applies to --format mapped-jsonl")
            input_format = "mapped-jsonl"
        if event_time is not None and event_time.tzinfo is None:
            event_time = event_time.replace(tzinfo=UTC)
        return cls(cast(InputFormat | None, input_format), parsed, event_time, model, product)


def first_line(path: Path, limit: int = 65_536) -> bytes:
    """The first non-blank line of ``path`` (at most ``limit`` bytes), for format detection."""
    with path.open("rb") as handle:
        for line in handle:
            if line.strip():
                return line[:limit]
    return b""


def detect_file_format(path: Path, max_record_bytes: int) -> InputFormat:
    """The input format of ``path`` from its name and first non-blank line.

    A first line that is a JSON object of an unknown layout, or an unusable CSV header, is a
    usage error (``ConfigError``: pass ``--format``/``--map``). A first line that is not JSON
    at all (garbage, binary, an empty file) is read as JSON Lines, so every bad line becomes
    a dead letter with its reason and the run goes on.
    """
    line = first_line(path, max_record_bytes)
    try:
        return detect_format(line, path.name)
    except ValueError as exc:
        try:
            parsed = orjson.loads(line)
        except orjson.JSONDecodeError:
            parsed = None
        if path.suffix.lower() == ".csv" or isinstance(parsed, dict):
            raise ConfigError(f"{path}: {exc}") from exc
        return "jsonl"


def file_source(path: Path, options: BatchOptions, cfg: Settings) -> InputSource:
    """Build the input source for one file.

    Raises ``ConfigError`` when the format cannot be told or a CSV header is unusable, before
    any record is processed.
    """
    fmt = options.input_format or detect_file_format(path, cfg.max_record_bytes)
    if fmt == "xstest-csv":
        try:  # the header is checked now, not halfway through a multi-file run
            next(
                iter(read_records(path, fmt, cfg.max_record_bytes, cfg.dead_letter_max_raw_bytes)),
                None,
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
    decode = DecodeOptions(
        max_record_bytes=cfg.max_record_bytes,
        max_text_chars=cfg.max_text_chars,
        default_event_time=options.event_time
        or datetime.fromtimestamp(path.stat().st_mtime, tz=UTC),
        default_model=options.model or default_model_for(path, fmt),
        default_product=options.product,
        mapping=options.mapping,
    )
    return InputSource(
        read_records(path, fmt, cfg.max_record_bytes, cfg.dead_letter_max_raw_bytes), fmt, decode
    )


LINE_FORMATS = ("jsonl", "mapped-jsonl", "openai")
"""Input formats with one record per non-blank line (``refusal_audit.audit.readers``)."""


def record_total(paths: Sequence[Path], sources: Sequence[InputSource]) -> int | None:
    """How many records ``sources`` (read from ``paths``) hold, for a progress bar: the
    non-blank lines when every source is a one-record-per-line format (``LINE_FORMATS``),
    else None (a CSV record may span lines). Raises ``OSError`` when a file cannot be read."""
    if any(source.fmt not in LINE_FORMATS for source in sources):
        return None
    total = 0
    for path in paths:
        with path.open("rb") as lines:
            total += sum(1 for line in lines if line.strip())
    return total


BATCH_FLUSH_EVERY = 10_000
"""Rows ``refusal-audit audit`` holds before it writes them (``AuditPipeline.flush_every``;
the pipeline's default, 500, stays for other callers). Each chDB insert has a fixed cost of
about 5-20 ms and makes a part that chDB's background threads later merge, whatever the rows
in it: on 20,000 events of the example log, flushing every 500 rows cost about 180 µs of CPU
per event in the warehouse calls and chDB's threads (inserts, lookups, merges), every 5,000 to
20,000 rows 60-70 (issue 27; ``docs/evaluation.md``, "Cost per event"). 10,000 pending rows of
this size hold a few tens of MB."""

BATCH_LOOKUP_CHUNK = 5_000
"""Records ``refusal-audit audit`` prepares, and looks up in the warehouse (the duplicate
rule's ``stored_identities``), at once (``AuditPipeline.lookup_chunk``, default 1,000): each
lookup query costs a few ms whatever its size, below ``warehouse.store.LOOKUP_CHUNK``."""


def build_pipeline(cfg: Settings, sink: Sink, engine_name: str | None = None) -> AuditPipeline:
    """The pipeline configured from ``cfg``.

    With an LLM engine the batch token budget is also capped so that every batch's prompt
    fits the model's context window; the local engine has no context window, so its batches
    are bounded by ``batch_max_events`` alone and no tokens are counted (nor the tokenizer
    loaded). With ``prefilter_model = "trained"`` the shipped model
    is loaded here (start-up) and its version is appended to the engine's
    (``tag_prefilter``), as are the cascade's and, with ``prefilter_request_aware`` off,
    :data:`RESPONSE_ONLY` (the default detection reads the request; a store audited both ways
    keeps them apart). Raises ``ConfigError`` for bad bundles/engine or a missing/corrupt
    model artifact.
    """
    bundles = load_bundles(cfg.policy_bundles, cfg.data_dir)
    redactor = configured_redactor(cfg)
    refusal_model = None
    if cfg.prefilter_enabled and cfg.prefilter_model == "trained":
        from refusal_audit.audit.prefilter_model import load_shipped_model

        refusal_model = load_shipped_model(cfg.prefilter_model_path)  # ConfigError: bad file
    from refusal_audit.audit.prefilter_cascade import build_cascade

    cascade = build_cascade(cfg)  # None when the band is empty; ConfigError: head or encoder
    intake = IntakeSettings(
        decode=DecodeOptions(),
        known_bundles=frozenset(bundles),
        redactor=redactor,
        prefilter=cfg.prefilter_enabled,
        dead_letter_max_raw_bytes=cfg.dead_letter_max_raw_bytes,
        refusal_model=refusal_model,
        request_aware=cfg.prefilter_request_aware,
        cascade=cascade,
    )
    engine = make_engine(cfg, engine_name)
    if refusal_model is not None:
        tag_prefilter(engine, refusal_model.version)
    if cascade is not None:
        tag_prefilter(engine, cascade.version)
    if cfg.prefilter_enabled and not cfg.prefilter_request_aware:
        tag_prefilter(engine, RESPONSE_ONLY)
    budget: int | None = None  # the local engine: no context window, nothing to count
    in_flight = 1
    context_cap = getattr(engine, "event_token_budget", None)
    if context_cap is not None:  # an LLM engine: the batch must also fit its context window
        budget = min(
            [cfg.batch_token_budget,
             *(context_cap(b, cfg.batch_max_events) for b in bundles.values())]
        )  # fmt: skip
        if budget < 1:
            raise ConfigError("the policy bundle's prompt alone exceeds the model's context window")
        # the engine's calls in flight, across batches (capped at a llama.cpp server's slots)
        in_flight = getattr(engine, "max_concurrency", cfg.openai_max_concurrency)
    return AuditPipeline(
        bundles=bundles,
        engine=engine,
        sink=sink,
        intake=intake,
        max_events=cfg.batch_max_events,
        token_budget=budget,
        review_rate=cfg.review_sample_rate,
        review_seed=cfg.review_seed,
        review_band=cfg.review_uncertainty_band,
        max_in_flight=in_flight,
    )


RUN_GC_THRESHOLD = (20_000, 20, 20)
"""The cyclic collector's thresholds (``gc.set_threshold``: allocations before a young
collection, young collections before a middle one, middle before a full one) while
``run_batch`` audits; Python's default is (700, 10, 10). A run allocates several container
objects per event (models, rows, lists) that live until their flush, so the default's young
collections ran every 25-30 events and its full ones walked the pending rows and the report's
assessments again and again: about 15 µs of CPU per event on 20,000 events of the example
log, about 4-6 with these (issue 27). Cyclic garbage waits longer for its collection; the
rows of one flush already bound what a run holds."""


@contextmanager
def run_collector() -> Iterator[None]:
    """The collector's settings for one ``run_batch``, restored after: what exists when it
    starts (modules, bundles, the engine's indexes) outlives the run, so it is frozen out of
    the collector's sight (``gc.freeze``: full collections do not walk it again and again,
    ~5% of the CPU per event), and collections are rarer (:data:`RUN_GC_THRESHOLD`). Unfrozen
    after (tests run many runs in one process: nothing is kept for good)."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*RUN_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def run_batch(
    cfg: Settings,
    files: Sequence[Path],
    options: BatchOptions,
    *,
    engine_name: str | None = None,
    sink: Sink | None = None,
    progress_factory: Callable[[], Progress] | None = None,
) -> RunReport:
    """Audit ``files`` into ``sink`` (default: the configured warehouse); return the report.

    With the warehouse as sink, batch summaries' trend lines compare with the drift
    baseline of the current window (``refusal_audit.alerts.drift.bundle_baselines``).
    Raises ``ConfigError`` for configuration problems (bundles, engine, undetectable format).
    """
    from warehouse.store import Warehouse

    sources = [file_source(path, options, cfg) for path in files]
    target = sink if sink is not None else Warehouse.open(cfg)
    pipeline = build_pipeline(cfg, target, engine_name)
    # fewer, larger inserts and lookups (see BATCH_FLUSH_EVERY): what is stored is the same
    pipeline.flush_every = max(pipeline.flush_every, BATCH_FLUSH_EVERY)
    pipeline.lookup_chunk = max(pipeline.lookup_chunk, BATCH_LOOKUP_CHUNK)
    if isinstance(target, Warehouse):  # trend lines compare batches with the drift baseline
        # imported here: the drift tests pull scipy, which the streaming workers never need
        from refusal_audit.alerts.drift import DriftConfig, bundle_baselines

        config = DriftConfig.from_settings(cfg)
        now = datetime.now(UTC)
        pipeline.baselines = bundle_baselines(target.client, target.database, config, now=now)

    async def main(on_record: Callable[[], None] | None) -> RunReport:
        try:
            return await pipeline.run(sources, on_record)
        finally:
            await close_engine(pipeline.engine)

    with run_collector():
        if progress_factory is None:
            report = asyncio.run(main(None))
        else:
            with progress_factory() as progress:
                task = progress.add_task("auditing", total=record_total(files, sources))
                report = asyncio.run(main(lambda: progress.advance(task)))
    if isinstance(target, Warehouse) and report.already_audited:
        add_stored_results(report, target)
        report.trends = pipeline.run_trends(report.all_assessments())
    return report


def add_stored_results(report: RunReport, store: Warehouse) -> None:
    """Fill ``report.stored_assessments`` with the current assessments of the refusals the
    run skipped as already audited (``report.already_audited``), and
    ``report.stored_gap_flags`` with their batches' gap flags, each cut to those refusals
    (a flag left without one is dropped): a re-run of the same input then reports what the
    first run did. Raises ``WarehouseError``."""
    stored = store.assessments_of(report.already_audited)
    ids = {a.log_id for a in stored}
    report.stored_assessments = stored
    report.stored_gap_flags = [
        flag.model_copy(update={"example_log_ids": kept})
        for flag in store.gap_flags_of([a.batch_id for a in stored])
        if (kept := [i for i in flag.example_log_ids if i in ids])
    ]
