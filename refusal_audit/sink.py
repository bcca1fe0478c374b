"""The warehouse sink: the transactional workers' result topics into ClickHouse (issue 14).

``refusal-audit sink`` reads the topics the workers commit (``stored-events``,
``assessments``, ``audit-batches``, ``dead-letters``) with ``read_committed`` in its own
consumer group, in large blocks (``streams.blocks``: bounded by rows, bytes and time), and
inserts each block's rows table by table, events first (the current-assessments view joins
them), each insert carrying a deduplication token built from its topic and the block's
partition/offset ranges. The block's offsets are committed only after every insert
succeeded: at least once into tables whose ``ReplacingMergeTree`` keys and ``FINAL`` reads
make a redelivered block change no query result.

One sink owns an embedded chDB store (it serves it to the other commands over the owner
channel, like the worker); against a ClickHouse server several sinks may run in the group.
The drift and policy-gap detectors run in the sink, between blocks, every
``alerts_interval_seconds`` (:meth:`WarehouseSink.maybe_detect`): next to the warehouse they
read, not in the workers.

A message the sink cannot decode (it was not written by a worker of this version) is not
dropped: it becomes a dead letter (stage ``store``, reason ``sink_decode``) in the
``dead_letters`` table, with its topic, partition and offset.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Message
from pydantic import BaseModel, ValidationError

from refusal_audit.config import Settings
from schemas.audit import BatchRecord, StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent
from streams.blocks import Block, BlockLimits, BlockReader
from streams.sink import dead_letter_from_message, kafka_location
from streams.topics import Topics, admin_client, require_topic
from warehouse.store import Warehouse

log = logging.getLogger("refusal_audit.sink")


@dataclass
class SinkStats:
    """Blocks and rows stored, per table, the undecodable messages kept, and detector
    passes run (ok / failed)."""

    blocks: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    undecodable: int = 0
    detector_passes: int = 0
    detector_failures: int = 0

    def add(self, table: str, n: int) -> None:
        """Count ``n`` rows of ``table``."""
        self.rows[table] = self.rows.get(table, 0) + n


def _undecodable(msg: Message, why: str) -> DeadLetter:
    value = msg.value() or b""
    location = kafka_location(msg.partition() or 0, msg.offset() or 0)
    ident = hashlib.blake2b(f"{msg.topic()}|{location}".encode() + value, digest_size=16)
    return DeadLetter(
        dead_letter_id=ident.hexdigest(), stage="store", reason_code="sink_decode",
        reason=why[:1000], source=msg.topic() or "", location=location, raw=value[:65_536],
        raw_length=len(value), raw_sha256=hashlib.sha256(value).hexdigest(),
        raw_truncated=len(value) > 65_536, created_at=datetime.now(UTC),
    )  # fmt: skip


def _fields(exc: ValidationError) -> str:
    return ", ".join(
        sorted({".".join(str(p) for p in e["loc"]) or "(value)" for e in exc.errors()})
    )


class WarehouseSink:
    """Blocks of result topics into the warehouse (module docstring)."""

    def __init__(
        self,
        store: Warehouse,
        reader: BlockReader,
        topics: Topics,
        detectors: Callable[[datetime], object] | None = None,
        detector_interval: float = 60.0,
    ) -> None:
        self.store = store
        self.reader = reader
        self.topics = topics
        self.detectors = detectors
        self.detector_interval = detector_interval
        self._last_pass = float("-inf")
        self.stats = SinkStats()

    def maybe_detect(self, clock: Callable[[], float] = time.monotonic) -> None:
        """Run a detector pass (drift and policy-gap alerts, ``refusal_audit.alerting``) when
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
        """Check the topics and join the sink's consumer group ``<kafka_consumer_group>-sink``.
        Raises ``TopicError``."""
        topics = Topics.from_prefix(cfg.kafka_topic_prefix)
        names = [topics.stored_events, topics.assessments, topics.audit_batches,
                 topics.dead_letters]  # fmt: skip
        admin = admin_client(cfg.kafka_bootstrap_servers)
        for name in names:
            require_topic(admin, name)
        reader = BlockReader(
            cfg.kafka_bootstrap_servers, f"{cfg.kafka_consumer_group}-sink", names, limits
        )
        return cls(store, reader, topics)

    def _decode(
        self, block: Block, topic: str, model: type[BaseModel], dead: list[DeadLetter]
    ) -> list[Any]:
        out = []
        for msg in block.records.get(topic, []):
            try:
                out.append(model.model_validate_json(msg.value() or b""))
            except ValidationError as exc:
                dead.append(_undecodable(msg, f"not a {model.__name__}: {_fields(exc)}"))
        return out

    def store_block(self, block: Block) -> None:
        """Insert one block's rows, table by table (events first). Raises
        ``WarehouseError`` (nothing is committed then; the block is read again)."""
        t = self.topics
        dead: list[DeadLetter] = []
        events = self._decode(block, t.stored_events, StoredEvent, dead)
        assessments = self._decode(block, t.assessments, StoredAssessment, dead)
        batches = self._decode(block, t.audit_batches, BatchRecord, dead)
        letters: list[DeadLetter] = []
        for msg in block.records.get(t.dead_letters, []):
            try:
                letters.append(dead_letter_from_message(msg.value(), msg.headers()))
            except (ValueError, ValidationError) as exc:
                dead.append(_undecodable(msg, f"not a dead-letter message: {exc}"))
        self.store.insert_events(events, token=block.dedup_token(t.stored_events))
        self.store.insert_assessments(assessments, token=block.dedup_token(t.assessments))
        self.store.insert_batches(batches, token=block.dedup_token(t.audit_batches))
        self.store.insert_dead_letters([*letters, *dead], token=block.dedup_token(t.dead_letters))
        for table, rows in (("refusal_events", events), ("assessments", assessments),
                            ("audit_batches", batches), ("dead_letters", letters)):  # fmt: skip
            self.stats.add(table, len(rows))
        self.stats.undecodable += len(dead)
        for letter in dead:
            log.error("undecodable message kept as a dead letter: %s %s: %s",
                      letter.source, letter.location, letter.reason)  # fmt: skip

    def run(
        self,
        stop: threading.Event,
        after_store: Callable[[Block], None] | None = None,
        max_blocks: int | None = None,
    ) -> SinkStats:
        """Store and commit blocks until ``stop`` is set (or ``max_blocks``). ``after_store``
        runs between the inserts and the commit (tests inject crashes there). Raises
        ``WarehouseError`` (after the store's retries) and ``KafkaException``."""
        while not stop.is_set():
            if max_blocks is not None and self.stats.blocks >= max_blocks:
                break
            block = self.reader.next_block(stop)
            if block is None:
                self.maybe_detect()
                continue
            started = time.monotonic()
            self.store_block(block)
            if after_store is not None:
                after_store(block)
            self.reader.commit(block)
            self.stats.blocks += 1
            self.maybe_detect()
            took = round(time.monotonic() - started, 3)
            log.info("block stored", extra={"rows": block.rows, "seconds": took})
        return self.stats

    def close(self) -> None:
        """Leave the group (the store is the caller's)."""
        self.reader.close()
