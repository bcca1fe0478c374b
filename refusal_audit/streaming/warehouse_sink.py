"""The warehouse sink: the transactional workers' result topics into ClickHouse (issue 14).

``refusal-audit sink`` reads the topics the workers commit (``stored-events``,
``assessments``, ``audit-batches``, ``dead-letters``) with ``read_committed`` in its own
consumer group, in large blocks (``streams.blocks``: bounded by rows, bytes and time), and
inserts each block's rows table by table, events first (the current-assessments view joins
them), each table's rows in one columnar insert (``Warehouse.insert_built``: one Arrow
table; each message is validated by its contract's pydantic model and kept as its row, not
its model) carrying a deduplication token built from its topic and the block's
partition/offset ranges. The block's offsets are committed only after every insert
succeeded: at least once into tables whose ``ReplacingMergeTree`` keys and ``FINAL`` reads
make a redelivered block change no query result.

One sink owns an embedded chDB store (it serves it to the other commands over the owner
channel, like the worker); against a ClickHouse server several sinks may run in the group.
The drift and policy-gap detectors run in the sink, between blocks, every
``alerts_interval_seconds`` (:meth:`WarehouseSink.maybe_detect`): next to the warehouse they
read, not in the workers.

The duplicate-log-id rule ("the first stored copy wins") is applied to every block against
the warehouse (``refusal_audit.streaming.sink_rules``): a copy of a stored log id with other content
is
not stored, nor are its assessments; it becomes a ``duplicate_log_id`` dead letter that
describes the copy's input record (topic, location, length and SHA-256 of the value, from the
stored-events message's ``x-input-*`` headers).

A message the sink cannot decode (it was not written by a worker of this version) is not
dropped: it becomes a dead letter (stage ``store``, reason ``sink_decode``) in the
``dead_letters`` table, with its topic, partition and offset.

A block that cannot be stored (``WarehouseError``: ClickHouse down or failing, a lookup or any
insert of the block) is stored again, whole, after a backoff (exponential from
``retry_wait`` seconds, capped at ``retry_wait_max``; each retry logged); its offsets are
committed only once every insert succeeded, and the inserts' deduplication tokens make the
inserts that had succeeded before the failure harmless. Transient failures (the server
unreachable, timeouts, "too busy": ``warehouse.retryable.is_transient`` of the error's cause) are
retried without end: an outage of any length is waited out, the lag grows and nothing is
lost. Any other failure (a bad row, a missing table, a full disk) is retried too, since an
operator may fix its cause, but for ``give_up_after`` seconds at most (default 15 minutes;
None: without end); then the error propagates (``refusal-audit sink`` exits 70, the block
uncommitted). A stop request ends a backoff at once, the block uncommitted.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential

from refusal_audit.audit.pipeline import REFRESH_EVERY_S, REFRESH_SETTLE_S, REFRESH_SHARE
from refusal_audit.config import Settings
from refusal_audit.streaming.sink_rules import (
    EPOCH,
    Fingerprinted,
    InputOrigin,
    Located,
    judge_block,
    ms,
)
from schemas.audit import BatchRecord, StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent
from streams.blocks import Block, BlockLimits, BlockReader, written_at
from streams.clients import Message
from streams.dead_letters import (
    CONTENT_FINGERPRINT_HEADER,
    INPUT_LENGTH_HEADER,
    INPUT_LOCATION_HEADER,
    INPUT_SHA256_HEADER,
    INPUT_SOURCE_HEADER,
    dead_letter_from_message,
    kafka_location,
)
from streams.membership import group_instance_id, leave_group
from streams.topics import Topics, admin_client, await_broker, existing_topics, require_topics
from warehouse.client import WarehouseError
from warehouse.retryable import is_transient
from warehouse.rows import assessment_row, batch_row, event_row
from warehouse.store import Warehouse

log = logging.getLogger("refusal_audit.sink")


@dataclass
class SinkStats:
    """Blocks and rows stored, per table, the undecodable messages kept, the copies of
    stored log ids with other content refused (``duplicates``) and their assessments not
    stored (``dropped_assessments``), the failed attempts to store a block retried
    (``retries``), and detector passes run (ok / failed)."""

    blocks: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    undecodable: int = 0
    duplicates: int = 0
    dropped_assessments: int = 0
    retries: int = 0
    detector_passes: int = 0
    detector_failures: int = 0

    def add(self, table: str, n: int) -> None:
        """Count ``n`` rows of ``table``."""
        self.rows[table] = self.rows.get(table, 0) + n


def _headers(msg: Message) -> dict[str, str | None]:
    """The message's headers by name, the first value of each (UTF-8, undecodable bytes
    replaced; None for a header without a value), read in one pass."""
    out: dict[str, str | None] = {}
    headers = msg.headers() or []
    for key, value in headers.items() if isinstance(headers, dict) else headers:
        if key not in out:
            out[key] = value.decode("utf-8", "replace") if isinstance(value, bytes) else None
    return out


def _header(msg: Message, name: str) -> str | None:
    """The first value of the message's header ``name`` as :func:`_headers` reads it (None
    when it is missing or has no value), without reading the others."""
    headers = msg.headers() or []
    for key, value in headers.items() if isinstance(headers, dict) else headers:
        if key == name:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else None
    return None


_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


def _origin(headers: dict[str, str | None]) -> InputOrigin | None:
    """The input record's origin named by a stored-events message's ``x-input-*`` headers
    (``headers``: :func:`_headers`); None when one is missing or malformed (a message of an
    older worker: its dead letter then describes the message,
    ``refusal_audit.streaming.sink_rules``)."""
    source, location = headers.get(INPUT_SOURCE_HEADER), headers.get(INPUT_LOCATION_HEADER)
    length, sha256 = headers.get(INPUT_LENGTH_HEADER), headers.get(INPUT_SHA256_HEADER)
    if not source or not location or length is None or not length.isdigit():
        return None
    if sha256 is None or not _SHA256_HEX.match(sha256):
        return None
    return InputOrigin(source, location, int(length), sha256)


def _undecodable(msg: Message, why: str) -> DeadLetter:
    value = msg.value() or b""
    written = written_at(msg)  # a redelivered message gives the same row
    created = datetime.now(UTC) if written is None else EPOCH + timedelta(milliseconds=written)
    location = kafka_location(msg.partition() or 0, msg.offset() or 0)
    ident = hashlib.blake2b(f"{msg.topic()}|{location}".encode() + value, digest_size=16)
    return DeadLetter(
        dead_letter_id=ident.hexdigest(), stage="store", reason_code="sink_decode",
        reason=why[:1000], source=msg.topic() or "", location=location, raw=value[:65_536],
        raw_length=len(value), raw_sha256=hashlib.sha256(value).hexdigest(),
        raw_truncated=len(value) > 65_536, created_at=created,
    )  # fmt: skip


def _fields(exc: ValidationError) -> str:
    return ", ".join(
        sorted({".".join(str(p) for p in e["loc"]) or "(value)" for e in exc.errors()})
    )


def _block_token(block: Block) -> str:
    """A deduplication token naming the whole block (every topic's ranges): for the dead
    letters, which come from every topic."""
    parts = "|".join(block.dedup_token(topic) for topic in sorted(block.records))
    return hashlib.sha256(parts.encode()).hexdigest()


def _transient(exc: BaseException) -> bool:
    """Whether a ``WarehouseError`` comes from a transient cause (``is_transient``)."""
    cause = exc.__cause__
    return cause is not None and is_transient(cause)


@dataclass
class _Rows:
    """A block decoded: event copies and assessments (each with its table row,
    ``warehouse.rows``: the decoded models are not kept), the batches' rows, the
    dead-letter topic's letters and the letters of undecodable messages."""

    copies: list[Located[list[Any]]] = field(default_factory=list)
    assessments: list[Fingerprinted[list[Any]]] = field(default_factory=list)
    batches: list[list[Any]] = field(default_factory=list)
    letters: list[DeadLetter] = field(default_factory=list)
    undecodable: list[DeadLetter] = field(default_factory=list)


M = TypeVar("M", bound=BaseModel)


#: Default of ``WarehouseSink.give_up_after``: 15 minutes.
GIVE_UP_AFTER = 900.0


class WarehouseSink:
    """Blocks of result topics into the warehouse (module docstring). A block that cannot be
    stored is stored again after ``retry_wait`` seconds, doubling up to ``retry_wait_max``;
    ``give_up_after`` bounds the retries of non-transient failures (None: no bound)."""

    def __init__(
        self,
        store: Warehouse,
        reader: BlockReader,
        topics: Topics,
        detectors: Callable[[datetime], object] | None = None,
        detector_interval: float = 60.0,
        *,
        retry_wait: float = 1.0,
        retry_wait_max: float = 60.0,
        give_up_after: float | None = GIVE_UP_AFTER,
    ) -> None:
        self.store = store
        self.reader = reader
        self.topics = topics
        self.detectors = detectors
        self.detector_interval = detector_interval
        self.retry_wait = retry_wait
        self.retry_wait_max = retry_wait_max
        self.give_up_after = give_up_after
        self._last_pass = float("-inf")
        self.stats = SinkStats()
        self.leave: tuple[str, str, str] | None = None  # bootstrap, group, static instance id

    def maybe_detect(self, clock: Callable[[], float] = time.monotonic) -> None:
        """Run a detector pass (drift and policy-gap alerts, ``refusal_audit.alerts.publisher``)
        when
        ``detector_interval`` seconds have passed since the last one, between blocks: the
        detectors read what the sink stored. A failed pass is logged and counted, never
        fatal (the next pass recomputes everything; no offset depends on it)."""
        if self.detectors is None or clock() - self._last_pass < self.detector_interval:
            return
        self._last_pass = clock()
        try:
            self.detectors(datetime.now(UTC))
        except Exception as exc:  # the next pass recomputes everything
            self.stats.detector_failures += 1
            log.error("detector pass failed: %s", exc, exc_info=exc)
            return
        self.stats.detector_passes += 1

    @classmethod
    def start(cls, cfg: Settings, store: Warehouse, limits: BlockLimits) -> WarehouseSink:
        """Check the topics and join the sink's consumer group ``<kafka_consumer_group>-sink``;
        a broker that does not answer yet is waited for up to ``worker_recovery_seconds``.
        Raises ``TopicError`` (a topic missing, or the broker away that long)."""
        topics = Topics.from_prefix(cfg.kafka_topic_prefix)
        names = [topics.stored_events, topics.assessments, topics.audit_batches,
                 topics.dead_letters]  # fmt: skip
        admin = admin_client(cfg.kafka())
        # a broker that does not answer yet (still starting) is waited for, as by the worker
        require_topics(await_broker(lambda: existing_topics(admin), cfg.worker_recovery_seconds),
                       names)  # fmt: skip
        group = f"{cfg.kafka_consumer_group}-sink"
        # a static member (KIP-345) when configured: a restarted sink takes its partitions
        # back without waiting for its predecessor's session to time out
        instance = group_instance_id(cfg.kafka_static_membership, cfg.kafka_group_instance_id,
                                     cfg.data_dir)  # fmt: skip
        extra: dict[str, Any] = {"session.timeout.ms": int(cfg.kafka_session_timeout_seconds
                                                           * 1000)}  # fmt: skip
        if instance is not None:
            extra["group.instance.id"] = instance
        reader = BlockReader(cfg.kafka(), group, names, limits, **extra)
        sink = cls(store, reader, topics)
        sink.leave = (cfg.kafka_bootstrap_servers, group, instance) if instance else None
        return sink

    @staticmethod
    def _decode(
        block: Block, topic: str, model: type[M], dead: list[DeadLetter]
    ) -> Iterator[tuple[Message, M]]:
        """Each message of ``topic`` with its value validated as ``model`` (pydantic's own
        validator, the contract's rules); a message that does not validate becomes a
        ``sink_decode`` dead letter in ``dead`` naming the failing fields. One model at a
        time: the caller keeps its row, not the model (a block's worth of models kept alive
        made the garbage collector the sink's largest cost, issue 27). The model's validator
        is called directly: what ``model.model_validate_json`` runs, without its wrapper's
        keyword handling per message (8.8 -> 7.9 us per stored-events message, measured
        2026-12-05 on the loaded 2-core machine)."""
        validate = model.__pydantic_validator__.validate_json
        for msg in block.records.get(topic, []):
            try:
                item: M = validate(msg.value() or b"")
            except ValidationError as exc:
                dead.append(_undecodable(msg, f"not a {model.__name__}: {_fields(exc)}"))
                continue
            yield msg, item

    @contextmanager
    def _decoded(self, block: Block) -> Iterator[_Rows]:
        """The block's rows (:meth:`_rows`) while it is stored, kept out of the cyclic
        garbage collector's passes.

        Decoding allocates about ten containers per row (the row, its dicts and lists, its
        ``Located``) that all live until the block is inserted and hold no cycle: garbage to
        none of the collector's passes, which their allocation triggers hundreds of times
        per block (the full ones walk every object of the process). So the collector is
        paused while they are made, and they are frozen (``gc.freeze``: moved out of its
        generations, still freed by reference counting) until the block is stored, then
        handed back (``gc.unfreeze``; what a cycle made meanwhile by another thread waits
        for the next full pass). Measured on ``benchmarks/sink_growth.py``'s blocks
        (2026-12-05, shared 2-core machine): decoding alone 31-32 -> 10.3-10.6 us of CPU per
        row with the collector off; the effect on ``store_block``: see docs/streaming.md."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            rows = self._rows(block)
            gc.freeze()
        finally:
            if enabled:
                gc.enable()
        try:
            yield rows
        finally:
            gc.unfreeze()

    def _rows(self, block: Block) -> _Rows:
        """Decode ``block`` into the tables' rows (what cannot be decoded becomes a
        ``sink_decode`` dead letter)."""
        t, rows = self.topics, _Rows()
        for msg, event in self._decode(block, t.stored_events, StoredEvent, rows.undecodable):
            written = written_at(msg)
            rows.copies.append(Located(msg.partition() or 0, msg.offset() or 0, msg.value() or b"",
                                       ms(event.ingested_at) if written is None else written,
                                       event.event.log_id, event.content_fingerprint,
                                       event_row(event), _origin(_headers(msg))))  # fmt: skip
        for msg, item in self._decode(block, t.assessments, StoredAssessment, rows.undecodable):
            fingerprint = _header(msg, CONTENT_FINGERPRINT_HEADER)
            rows.assessments.append(Fingerprinted(fingerprint, item.log_id, assessment_row(item)))
        for _, batch in self._decode(block, t.audit_batches, BatchRecord, rows.undecodable):
            rows.batches.append(batch_row(batch))
        for msg in block.records.get(t.dead_letters, []):
            try:
                rows.letters.append(dead_letter_from_message(msg.value(), msg.headers()))
            except (ValueError, ValidationError) as exc:
                rows.undecodable.append(_undecodable(msg, f"not a dead-letter message: {exc}"))
        return rows

    def store_block(self, block: Block) -> None:
        """Judge (``refusal_audit.streaming.sink_rules``) and insert one block's rows, table by
        table
        (events first), once. Raises ``WarehouseError`` (nothing is committed then)."""
        with self._decoded(block) as rows:
            self._store(block, rows)

    def _store(self, block: Block, rows: _Rows) -> None:
        t = self.topics
        judged = judge_block(self.store, t.stored_events, rows.copies, rows.assessments)
        # each table's rows in one columnar insert (``Warehouse.insert_built``)
        self.store.insert_built("refusal_events", judged.events,
                                token=block.dedup_token(t.stored_events))  # fmt: skip
        self.store.insert_built("assessments", judged.assessments,
                                token=block.dedup_token(t.assessments))  # fmt: skip
        self.store.insert_built("audit_batches", rows.batches,
                                token=block.dedup_token(t.audit_batches))  # fmt: skip
        letters = [*rows.letters, *judged.letters, *rows.undecodable]
        self.store.insert_dead_letters(letters, token=_block_token(block))
        if judged.events or judged.assessments:  # bounded; dirty days are read live meanwhile
            self.store.refresh_daily(
                every_s=REFRESH_EVERY_S, share=REFRESH_SHARE, settle_s=REFRESH_SETTLE_S
            )
        for table, n in (("refusal_events", len(judged.events)),
                         ("assessments", len(judged.assessments)),
                         ("audit_batches", len(rows.batches)),
                         ("dead_letters", len(rows.letters) + len(judged.letters))):  # fmt: skip
            self.stats.add(table, n)
        self.stats.undecodable += len(rows.undecodable)
        self.stats.duplicates += len(judged.letters)
        self.stats.dropped_assessments += judged.dropped
        for letter in rows.undecodable:
            log.error("undecodable message kept as a dead letter: %s %s: %s",
                      letter.source, letter.location, letter.reason)  # fmt: skip
        if judged.letters:
            log.warning("%d cop(y/ies) of stored log ids with other content kept as "
                        "duplicate_log_id dead letters, %d of their assessments not stored",
                        len(judged.letters), judged.dropped)  # fmt: skip

    def store_retrying(self, block: Block, stop: threading.Event) -> bool:
        """Store ``block``, retrying with backoff (module docstring) until it is stored (True)
        or ``stop`` is set (False: the block is not stored whole). Raises ``WarehouseError``
        once a non-transient failure has lasted ``give_up_after`` seconds."""

        def given_up(state: RetryCallState) -> bool:
            if stop.is_set():
                return True
            failure = state.outcome.exception() if state.outcome is not None else None
            if self.give_up_after is None or failure is None or _transient(failure):
                return False
            return (state.seconds_since_start or 0.0) >= self.give_up_after

        def pause(seconds: float) -> None:
            stop.wait(seconds)

        def logged(state: RetryCallState) -> None:
            self.stats.retries += 1
            failure = state.outcome.exception() if state.outcome is not None else None
            wait = state.next_action.sleep if state.next_action is not None else 0.0
            limit = self.give_up_after
            bound = (
                "transient, no give-up"
                if failure is not None and _transient(failure)
                else "no give-up"
                if limit is None
                else f"gives up after {limit:g} s"
            )
            log.warning("block of %d records not stored (attempt %d, %s), retrying in %.3g s: "
                        "%s", block.rows, state.attempt_number, bound, wait, failure)  # fmt: skip

        retrying = Retrying(
            retry=retry_if_exception_type(WarehouseError),
            wait=wait_exponential(multiplier=self.retry_wait, max=self.retry_wait_max),
            stop=given_up,
            sleep=pause,
            before_sleep=logged,
            reraise=True,
        )
        with self._decoded(block) as rows:
            try:
                retrying(self._store, block, rows)
            except WarehouseError:
                if stop.is_set():
                    return False
                raise
        return True

    def run(
        self,
        stop: threading.Event,
        after_store: Callable[[Block], None] | None = None,
        max_blocks: int | None = None,
    ) -> SinkStats:
        """Store and commit blocks until ``stop`` is set (or ``max_blocks``). A block that
        cannot be stored is retried (:meth:`store_retrying`); its offsets are committed only
        once it is stored. ``after_store`` runs between the inserts and the commit (tests
        inject crashes there). Raises ``WarehouseError`` (retries given up) and
        ``KafkaException``."""
        while not stop.is_set():
            if max_blocks is not None and self.stats.blocks >= max_blocks:
                break
            block = self.reader.next_block(stop)
            if block is None:
                self.maybe_detect()
                continue
            started = time.monotonic()
            if not self.store_retrying(block, stop):
                log.warning("stopping: a block of %d records is not stored and not committed "
                            "(it is read again)", block.rows)  # fmt: skip
                break
            if after_store is not None:
                after_store(block)
            self._commit(block)
            self.stats.blocks += 1
            self.maybe_detect()
            took = round(time.monotonic() - started, 3)
            log.info("block stored", extra={"rows": block.rows, "seconds": took})
        return self.stats

    def _commit(self, block: Block) -> None:
        """Commit the stored block's offsets. A failed commit that is not fatal (the group
        coordinator moved during a broker restart, a rebalance) is logged and passed over:
        the block is stored, the next block's commit covers its offsets, and a block read
        again after a crash is deduplicated. Raises ``KafkaException`` when fatal (fenced)."""
        self.reader.commit_stored(block, log)

    def close(self) -> None:
        """Leave the group (the store is the caller's); a static member leaves explicitly,
        so its partitions go to the other sinks at once."""
        self.reader.close()
        if self.leave is not None and self.reader.generation > 0:
            bootstrap, group, instance = self.leave
            asyncio.run(leave_group(bootstrap, group, instance))
