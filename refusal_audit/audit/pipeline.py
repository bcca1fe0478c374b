"""The audit pipeline shared by batch mode and the streaming worker.

read (caller) -> ``processors.intake.prepare`` (decode, check, redact, pre-filter) -> the
duplicate-log-id rule (below) -> ``processors.batching.Batcher`` ->
``processors.auditing.audit_batch`` (engine, validation, review sampling) -> sink (the
warehouse). Results are buffered and written one insert per table (every ``flush_every``
rows and at the end of ``run``) in the order events, dead letters, batch rows, assessments
(last: they mark events audited); a caller acknowledges input only after ``run`` returns,
which gives at-least-once. Every failure becomes a dead letter. Blocking sink calls run in
a worker thread (``asyncio.to_thread``) so they never block the loop ``run`` is awaited on.
Intake and the engine's audit run on that loop itself: batch mode runs it with
``asyncio.run``; the streaming worker runs it on a dedicated loop in its own thread
(``refusal_audit.streaming.worker_loop.PipelineLoop``), never on faust's loop, because that CPU
work would stall the worker's web views, timers and consumer heartbeats. Runs of one
pipeline may overlap on its loop (the transactional worker audits its next window while the
current one is committed): each run keeps its own state, and ``max_in_flight`` bounds the
audit batches in flight over all of them.

Duplicate log ids: a log id names one event and the first stored copy wins, whatever the
windows, runs or redeliveries. Records are prepared in chunks of ``lookup_chunk`` and the
chunk's log ids are looked up in the sink (``stored_identities``: the content fingerprint of
each one's first stored copy). A later copy whose content differs (another fingerprint) is
dead-lettered ``duplicate_log_id`` and never replaces or retires what is stored; a copy with
the same content is a redelivery: skipped when the run already holds it
(``identical_copies``), processed again (the same rows) when it was stored before. Stored
events re-audited from dead letters (``InputSource.reaudit``) keep their stored identity.
An event that was a refusal and is judged a non-refusal when processed again (the
pre-filter or its settings changed) retires its assessment: the run lists it in
``retired`` rather than doing it silently.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from itertools import islice
from typing import Protocol, runtime_checkable

from pydantic import ValidationError

from processors.adapters import DecodeOptions, InputFormat, SourceRecord
from processors.auditing import audit_batch, failed_batch_dead_letter, unresolved_dead_letters
from processors.batching import AuditBatch, Batcher
from processors.drift_detection import WindowCounts
from processors.engines.base import AuditEngine, EngineError
from processors.intake import IntakeSettings, make_dead_letter, prepare_many
from processors.refusal_cascade import HEAD_CUE
from processors.trends import trend_lines
from processors.validation import AuditValidationError, recompute_summary
from schemas.audit import AuditSummary, BatchRecord, PolicyGapFlag, StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent, StoredIdentity, audit_config_key
from schemas.policy import PolicyBundle
from schemas.result_tables import ResultTables

Sink = ResultTables
"""Where the pipeline stores its output (``schemas.result_tables.ResultTables``;
``warehouse.store.Warehouse`` in production)."""


@runtime_checkable
class LocatingSink(Protocol):
    """A sink that keeps where each stored event came from (the transactional worker's
    ``TopicOutputs``: its warehouse sink describes a later copy refused there by its input
    record). The pipeline then calls ``insert_located_events`` instead of
    ``insert_events``, with each event's source record (same length and order)."""

    def insert_located_events(
        self, events: Sequence[StoredEvent], records: Sequence[SourceRecord]
    ) -> None: ...


#: Seconds between two recomputes of dirty days by one sink (``warehouse.daily``): a day
#: still dirty is computed live by every query, so this bounds the writers' extra work,
#: not the queries' correctness.
REFRESH_EVERY_S = 10.0

#: The largest share of a writer's wall time spent recomputing dirty days
#: (``warehouse.Warehouse.refresh_daily``): a day being written grows, and so does its
#: recompute; after one that took ``d`` seconds the next waits at least ``d / share``.
#: 0.1 is our choice (a writer keeps >= 90% of its rate whatever the day's size), measured by
#: ``benchmarks/sink_growth.py`` (docs/streaming.md).
REFRESH_SHARE = 0.1

#: Seconds a day must go unwritten before a writer recomputes it: a day being written is
#: computed live by the readers (as it is between two recomputes anyway) instead of being
#: recomputed whole at every call while it grows. ``refusal-audit refresh-daily`` does not
#: wait. Our choice: several blocks' time, well under a day.
REFRESH_SETTLE_S = 300.0


@runtime_checkable
class RefreshingSink(Protocol):
    """A sink that keeps daily aggregates (``warehouse.Warehouse``): after each flush the
    pipeline calls ``refresh_daily`` (bounded per call, at most every ``every_s`` seconds
    and at most ``share`` of the writer's time, days unwritten for ``settle_s``;
    ``warehouse.daily``)."""

    def refresh_daily(
        self, max_days: int = ..., every_s: float = ..., share: float = ..., settle_s: float = ...
    ) -> list[date]: ...


@dataclass(frozen=True)
class Failure:
    """A record or batch that failed, for the run report: where, and why."""

    source: str
    location: str
    reason_code: str
    reason: str


@dataclass
class RunReport:
    """Counts and results of one pipeline run.

    ``records`` read; ``events`` decoded and unique; of those ``refusals`` (audited) and
    ``non_refusals`` (stored, not audited); ``duplicates`` (copies of a log_id whose
    content differs from its first copy, dead-lettered ``duplicate_log_id``);
    ``identical_copies`` (copies of an event already in this run, skipped as redeliveries);
    ``rejected`` (records dead-lettered at decode or validation); ``failures`` (records
    dead-lettered at decode or validation or as duplicates, and batches whose audit
    failed); ``failed_events`` = events in failed batches; ``retired`` the log ids of
    events stored as refusals that this run judged non-refusals (their assessments stop
    counting); ``trends`` the run's trend lines (``processors.trends``, per policy bundle).

    ``already_audited``: the ``(policy_bundle, log_id)`` of the refusals skipped because
    their stored copy is identical and already audited with this configuration (a re-run
    of the same input); the caller that holds the warehouse fills ``stored_assessments``
    (their current assessments) and ``stored_gap_flags`` (their batches' gap flags), so the
    run's summary and result list them like the ones audited now (``refusal_audit.audit.batch``).

    ``engine_steps`` counts the audited events by the step of an LLM engine's recovery
    ladder that resolved them (``first``, ``split``, ``retry``, ``reaudit``; ``unresolved``
    for the events it could not audit) and ``engine_calls`` the model calls made (both stay
    empty with the local engine; batches that failed as a whole are not in them).

    ``disagreements`` counts the run's events (``events``) whose platform classifier verdict
    and our own refusal detection differ, by direction (``StoredEvent.refusal_disagreement``:
    ``classifier_refusal_detector_not``, ``detector_refusal_classifier_not``; agreement is
    not counted). Each such event is stored with both verdicts (``warehouse.queries``
    lists them).

    ``encoder_decided`` counts the run's events whose refusal decision the refusal cascade's
    encoder head made (cue ``encoder_head``: the pre-filter's score fell in
    ``prefilter_cascade_band``); 0 with the cascade off. ``cascade`` says whether it was on
    (so a summary can say "0 of N" rather than nothing).
    """

    records: int = 0
    events: int = 0
    refusals: int = 0
    non_refusals: int = 0
    duplicates: int = 0
    identical_copies: int = 0
    rejected: int = 0
    batches: int = 0
    failed_batches: int = 0
    failed_events: int = 0
    # repr=False: asyncio formats a finished task's result with reprlib when the event loop
    # closes, and a full repr of every assessment cost ~30 µs per event (issue 11, item 7)
    failures: list[Failure] = field(default_factory=list, repr=False)
    assessments: list[StoredAssessment] = field(default_factory=list, repr=False)
    batch_records: list[BatchRecord] = field(default_factory=list, repr=False)
    retired: list[str] = field(default_factory=list, repr=False)
    trends: list[str] = field(default_factory=list, repr=False)
    already_audited: list[tuple[str, str]] = field(default_factory=list, repr=False)
    stored_assessments: list[StoredAssessment] = field(default_factory=list, repr=False)
    stored_gap_flags: list[PolicyGapFlag] = field(default_factory=list, repr=False)
    engine_steps: Counter[str] = field(default_factory=Counter, repr=False)
    engine_calls: int = 0
    disagreements: Counter[str] = field(default_factory=Counter, repr=False)
    encoder_decided: int = 0
    cascade: bool = False

    def all_assessments(self) -> list[StoredAssessment]:
        """The assessments of the run's refusals: audited now, then those already stored."""
        return [*self.assessments, *self.stored_assessments]

    @property
    def failed(self) -> int:
        """Records not stored or not audited because of an error: bad records, copies of a
        log id with other content, and events of failed batches."""
        return self.rejected + self.duplicates + self.failed_events

    def failure_counts(self) -> Counter[str]:
        """Number of failures per reason code."""
        return Counter(f.reason_code for f in self.failures)

    def summary(self) -> AuditSummary:
        """The audit summary over every assessment of the run (audited now and already
        stored: ``all_assessments``), recomputed from them."""
        flags = [f for b in self.batch_records for f in b.summary.policy_gap_flags]
        flags += self.stored_gap_flags
        return recompute_summary(self.all_assessments(), flags, self.trends)


Prepared = tuple[SourceRecord, StoredEvent | DeadLetter]


def chunks(items: Iterable[SourceRecord], size: int) -> Iterator[list[SourceRecord]]:
    """``items`` in lists of ``size`` (the last may be shorter), read lazily."""
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def utc_now() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class InputSource:
    """One input to audit: its records, their format and the decode options for them.

    ``reaudit`` marks events that are already stored (re-audited from dead letters): they
    are not checked against their stored copies and keep their stored identity.
    """

    records: Iterable[SourceRecord]
    fmt: InputFormat
    options: DecodeOptions
    reaudit: bool = False


@dataclass
class _Run:
    """The state of one ``run``: its sink, report, batcher, the rows waiting to be written
    and the audits in flight. Concurrent runs of one pipeline (a worker's windows) each
    have their own."""

    sink: Sink
    batcher: Batcher
    report: RunReport = field(default_factory=RunReport)
    events: list[StoredEvent] = field(default_factory=list)
    origins: list[SourceRecord] = field(default_factory=list)  # each event's source record
    dead: list[DeadLetter] = field(default_factory=list)
    assessments: list[StoredAssessment] = field(default_factory=list)
    batches: list[BatchRecord] = field(default_factory=list)
    audits: set[asyncio.Task[None]] = field(default_factory=set)

    def pending(self) -> int:
        return len(self.events) + len(self.dead) + len(self.assessments)


class AuditPipeline:
    """Runs sources through intake, batching, audit and storage; see the module docstring.

    ``bundles`` maps policy-bundle names to parsed bundles; ``flush_every`` bounds the number
    of decoded events held before they are written (memory bound). ``review_rate``,
    ``review_seed`` and ``review_band`` (uncertainty band, 0 = off) drive the review
    sampling of ``processors.auditing.audit_batch``. ``max_events`` and ``token_budget``
    bound each audit batch (``processors.batching.Batcher``; a None budget counts no tokens,
    for an engine without a context window). ``baselines`` maps bundle
    names to the drift baseline counts the batch summaries' trend lines compare with
    (replaced as a whole by the caller, e.g. after each detector run; empty = no baseline).

    ``max_in_flight`` (>= 1) audit batches run concurrently, over all runs of the pipeline
    on one event loop: an LLM engine keeps that many calls in flight (set it to the
    engine's ``max_concurrency``), across a worker's windows when their runs overlap. The
    local engine's audit is CPU work on the loop, where 1 is as fast. Raises
    ``ValueError`` for ``max_in_flight`` < 1.
    """

    def __init__(
        self,
        *,
        bundles: Mapping[str, PolicyBundle],
        engine: AuditEngine,
        sink: Sink,
        intake: IntakeSettings,
        max_events: int,
        token_budget: int | None,
        review_rate: float,
        review_seed: int,
        review_band: float = 0.0,
        clock: Callable[[], datetime] = utc_now,
        flush_every: int = 500,
        lookup_chunk: int = 1000,
        max_in_flight: int = 1,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self.bundles = dict(bundles)
        self.engine = engine
        self.sink = sink
        self.intake = intake
        self.review_rate = review_rate
        self.review_seed = review_seed
        self.review_band = review_band
        self.clock = clock
        self.flush_every = flush_every
        self.lookup_chunk = lookup_chunk
        self.max_in_flight = max_in_flight
        self.baselines: Mapping[str, WindowCounts] = {}
        self._batcher = Batcher(max_events, token_budget)  # the limits every run's batcher has
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    def _in_flight_slots(self) -> asyncio.Semaphore:
        """The semaphore bounding audits in flight on the running loop (one per loop)."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self.max_in_flight))
        return self._slots[1]

    async def run(
        self,
        sources: Iterable[InputSource],
        on_record: Callable[[], None] | None = None,
        sink: Sink | None = None,
    ) -> RunReport:
        """Audit every record of ``sources``; return the run's report.

        ``sink`` overrides the pipeline's sink for this run (a worker's window collects its
        outputs apart from the windows audited beside it). Bad records and failed batches
        become dead letters; sink errors and unexpected audit errors propagate (nothing is
        acknowledged past them; the audits still in flight are cancelled).
        """
        run = _Run(sink or self.sink, Batcher(self._batcher.max_events, self._batcher.token_budget))
        run.report.cascade = self.intake.cascade is not None
        taken: dict[str, str] = {}  # log id -> fingerprint of the copy this run took
        try:
            for source in sources:
                intake = replace(self.intake, decode=source.options)
                for chunk in chunks(source.records, self.lookup_chunk):
                    records = list(chunk)
                    nows = [self.clock() for _ in records]
                    prepared = list(
                        zip(records, prepare_many(records, source.fmt, intake, nows), strict=True)
                    )
                    stored = await self._stored(run.sink, prepared, taken)
                    for record, outcome in prepared:
                        run.report.records += 1
                        closed = self._take(record, outcome, intake, taken, stored, source, run)
                        for batch in closed:
                            await self._start_audit(batch, run)
                        if run.pending() >= self.flush_every:
                            await self._flush(run)
                        if on_record is not None:
                            on_record()
            for batch in run.batcher.flush():
                await self._start_audit(batch, run)
            while run.audits:
                ending = list(run.audits)
                await asyncio.gather(*ending)
                run.audits.difference_update(ending)
            await self._flush(run)
        finally:
            if run.audits:  # an error or a cancellation: stop the audits still in flight
                for task in run.audits:
                    task.cancel()
                await asyncio.gather(*run.audits, return_exceptions=True)
        run.report.trends = self.run_trends(run.report.assessments)
        return run.report

    def run_trends(self, assessments: Sequence[StoredAssessment]) -> list[str]:
        """Trend lines of the whole run against each bundle's baseline (bundle-prefixed when
        the run spans several bundles)."""
        by_bundle: dict[str, list[StoredAssessment]] = {}
        for a in assessments:
            by_bundle.setdefault(a.policy_bundle, []).append(a)
        lines: list[str] = []
        for bundle, items in sorted(by_bundle.items()):
            prefix = f"{bundle}: " if len(by_bundle) > 1 else ""
            lines += [prefix + t for t in trend_lines(items, self.baselines.get(bundle))]
        return lines

    async def _stored(
        self,
        sink: Sink,
        prepared: Sequence[tuple[SourceRecord, StoredEvent | DeadLetter]],
        taken: Mapping[str, str],
    ) -> Mapping[str, StoredIdentity]:
        """The stored identities of the chunk's log ids this run has not taken yet."""
        keys = [
            (o.event.policy_bundle, o.event.log_id)
            for _, o in prepared
            if isinstance(o, StoredEvent) and o.event.log_id not in taken
        ]
        if not keys:
            return {}
        return await asyncio.to_thread(sink.stored_identities, keys)

    def _audited_already(self, outcome: StoredEvent, known: StoredIdentity) -> bool:
        """Whether a stored event needs nothing more: this copy is identical to it, the
        pre-filter decides the same, and a refusal's newest assessment comes from this
        pipeline's audit configuration (bundle and engine versions, prompt version)."""
        if known.content_fingerprint != outcome.content_fingerprint:
            return False
        if known.is_refusal != outcome.is_refusal:
            return False
        if not outcome.is_refusal:
            return True
        bundle = self.bundles[outcome.event.policy_bundle]
        engine = self.engine
        return known.audited_by == audit_config_key(
            bundle.name, bundle.version, engine.name, engine.model, engine.version,
            engine.prompt_version,
        )  # fmt: skip

    def _take(
        self,
        record: SourceRecord,
        outcome: StoredEvent | DeadLetter,
        intake: IntakeSettings,
        taken: dict[str, str],
        stored: Mapping[str, StoredIdentity],
        source: InputSource,
        run: _Run,
    ) -> list[AuditBatch]:
        """Apply the duplicate-log-id rule to one prepared record; return the audit batches
        it closes. ``taken`` maps the log ids this run took to the fingerprint taken."""
        report = run.report
        if isinstance(outcome, DeadLetter):
            report.rejected += 1
            self._dead(outcome, run)
            return []
        log_id, fingerprint = outcome.event.log_id, outcome.content_fingerprint
        first, where = taken.get(log_id), "seen earlier in this input"
        if first is not None:
            if first == fingerprint or source.reaudit:  # re-audited copies are one event
                report.identical_copies += 1
                return []
        else:
            known = stored.get(log_id)
            if known is not None and source.reaudit:  # re-audit keeps the stored identity
                fingerprint = known.content_fingerprint
                outcome = outcome.model_copy(update={"content_fingerprint": fingerprint})
            elif known is not None and known.content_fingerprint not in ("", fingerprint):
                first, where = known.content_fingerprint, "already stored"
            elif known is not None and self._audited_already(outcome, known):
                taken[log_id] = fingerprint  # a redelivery of what is stored and audited
                report.identical_copies += 1
                if outcome.is_refusal:
                    report.already_audited.append((outcome.event.policy_bundle, log_id))
                return []
            if first is None and known is not None and known.is_refusal and not outcome.is_refusal:
                report.retired.append(log_id)
        if first is not None:
            report.duplicates += 1
            reason = (
                f"log_id {log_id!r} was {where} with different content; the first copy "
                "counts (send a corrected event under a new log_id)"
            )
            self._dead(
                make_dead_letter(
                    record, "validate", "duplicate_log_id", reason, self.clock(), log_id,
                    intake.redactor, intake.dead_letter_max_raw_bytes,
                ),
                run,
            )  # fmt: skip
            return []
        taken[log_id] = fingerprint
        report.events += 1
        if outcome.refusal_disagreement != "none":
            report.disagreements[outcome.refusal_disagreement] += 1
        if HEAD_CUE in outcome.refusal_cues:
            report.encoder_decided += 1
        run.events.append(outcome)
        run.origins.append(record)
        if not outcome.is_refusal:
            report.non_refusals += 1
            return []
        report.refusals += 1
        return run.batcher.add(outcome.event)

    def _dead(self, letter: DeadLetter, run: _Run) -> None:
        run.dead.append(letter)
        run.report.failures.append(
            Failure(letter.source, letter.location, letter.reason_code, letter.reason)
        )

    async def _flush(self, run: _Run) -> None:
        """Write what is pending, one insert per table, in an order that keeps
        at-least-once: events, dead letters, batch rows, then the assessments last. An
        assessment is what marks an event audited (a redelivered copy of it is then
        skipped), so it is written only when everything else of its audit is stored: an
        audit still in flight adds its rows to the next flush, after its events (taken
        before the audit started) were written by this one."""
        events, dead, assessments, batches = run.events, run.dead, run.assessments, run.batches
        origins, run.origins = run.origins, []
        run.events, run.dead, run.assessments, run.batches = [], [], [], []
        sink = run.sink
        if events and isinstance(sink, LocatingSink):
            await asyncio.to_thread(sink.insert_located_events, events, origins)
        elif events:
            await asyncio.to_thread(sink.insert_events, events)
        if dead:
            await asyncio.to_thread(sink.insert_dead_letters, dead)
        if batches:
            await asyncio.to_thread(sink.insert_batches, batches)
        if assessments:
            await asyncio.to_thread(sink.insert_assessments, assessments)
        if (events or assessments) and isinstance(sink, RefreshingSink):
            await asyncio.to_thread(
                sink.refresh_daily,
                every_s=REFRESH_EVERY_S, share=REFRESH_SHARE, settle_s=REFRESH_SETTLE_S,
            )

    async def _start_audit(self, batch: AuditBatch, run: _Run) -> None:
        """Start auditing ``batch`` once one of the ``max_in_flight`` slots is free (waiting
        for it bounds the memory a run holds); re-raise the first unexpected error of an
        audit that already ended."""
        for task in [t for t in run.audits if t.done()]:
            run.audits.discard(task)
            task.result()  # raises what the audit raised
        slots = self._in_flight_slots()
        await slots.acquire()
        try:
            task = asyncio.create_task(self._audit(batch, run))
        except BaseException:
            slots.release()
            raise
        task.add_done_callback(lambda _t: slots.release())
        run.audits.add(task)
        task.add_done_callback(run.audits.discard)

    async def _audit(self, batch: AuditBatch, run: _Run) -> None:
        report = run.report
        report.batches += 1
        bundle = self.bundles[batch.policy_bundle]
        now = self.clock()
        try:
            audited = await audit_batch(
                batch,
                bundle,
                self.engine,
                review_rate=self.review_rate,
                review_seed=self.review_seed,
                review_band=self.review_band,
                now=now,
                baseline=self.baselines.get(batch.policy_bundle),
            )
        except (EngineError, AuditValidationError, ValidationError) as exc:
            code = "invalid_result" if not isinstance(exc, EngineError) else "engine_error"
            letter = failed_batch_dead_letter(batch, "batch", code, str(exc), now)
            run.dead.append(letter)
            report.failed_batches += 1
            report.failed_events += len(batch.events)
            report.failures.append(Failure(letter.source, letter.location, code, str(exc)))
            return
        for letter in unresolved_dead_letters(batch, audited, self.engine, "batch", now):
            run.dead.append(letter)
            report.failed_events += 1
            report.failures.append(
                Failure(letter.source, letter.location, letter.reason_code, letter.reason)
            )
        if audited.calls:
            report.engine_calls += audited.calls
            report.engine_steps.update(audited.steps.values())
            if audited.unresolved:
                report.engine_steps["unresolved"] += len(audited.unresolved)
        run.assessments.extend(audited.assessments)
        run.batches.append(audited.record)
        report.assessments.extend(audited.assessments)
        report.batch_records.append(audited.record)
