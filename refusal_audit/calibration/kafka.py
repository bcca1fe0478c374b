"""Refusal-style calibration on Kafka: ``calibrate consume`` and ``ab consume``
(docs/calibration.md).

Topics (``streams.topics``, names ``<kafka_topic_prefix><suffix>``):

- ``calibrate.requests`` (in): one ``schemas.calibration.CalibrationRequest`` JSON object per
  message, the application's post-refusal hook (any key, or none);
- ``calibrate.runs`` (out): every ``CalibrationRun`` as JSON, keyed by its
  ``calibration_run_id``;
- ``ab.events`` (in): the product's A/B events (``schemas/json/ab_event.schema.json``);
- ``dead-letters`` (out): a message that cannot be processed, with its reason
  (``schemas.deadletter``, headers as for the worker: ``streams.sink.dead_letter_message``);
  every dead letter is also stored in the warehouse's ``dead_letters`` table.

:class:`CalibrateConsumer` (consumer group ``<kafka_topic_prefix>calibrate``) decodes each
request, fills a request that names only a ``log_id`` from the warehouse (the audit's stored,
redacted request; an unknown log id is calibrated from the refusal alone), redacts it like
``refusal_audit.calibration.runs.read_requests``, calibrates it with the configured engine and suite
(:class:`Calibrator`: ``processors.calibration.run.calibrate`` and
``refusal_audit.calibration.runs.run_with_suite``, the file mode's functions), stores the run
(``warehouse.calibration.insert_runs``, source ``kafka:<topic> partition P offset O``) and
publishes it on ``calibrate.runs``. :class:`ABConsumer` (group ``<kafka_topic_prefix>ab``)
validates each event (``processors.calibration.ab.parse_event``) and stores a batch's valid
events in one insert (``insert_ab_events``).

Delivery: at least once. A batch (at most ``batch_size`` messages, or what arrived within
``batch_wait`` seconds) is processed, its rows are stored (each warehouse call retried with
tenacity, on top of the store's own retries of transient errors), its outputs and dead
letters are confirmed by the broker (idempotent producer, ``acks=all``), and only then are
its offsets committed. Redelivery changes nothing a query sees: a run's id is derived from the
message's topic, partition, offset and value (:func:`run_id_for`), and a redelivered request
whose run is already stored is not calibrated again (the stored run is published again, so
an approval given meanwhile keeps pointing at the text that was approved); ``ab_event_log`` keeps
one row per (experiment, event id).

Failures: a message that cannot be processed is dead-lettered with a reason code
(:data:`DEAD_LETTER_CODES`) and committed; the consumer goes on. A warehouse that fails after
the retries, or outputs the broker does not confirm, raise :class:`ConsumeError` without
committing anything of the batch (the command exits 70; a supervisor restarts it, and the
batch is redelivered). ``stop`` (SIGTERM/SIGINT in the command) ends the loop after the
message in hand: what was processed is committed, the rest is redelivered.

Embedded store: a consumer that owns a chDB store serves it to the other commands on a
loopback HTTP server of its own (``refusal_audit.streaming.owner.OwnerServer``, the owner channel of
``refusal_audit.streaming.owner``), and follows another owner (the worker, the review server) when
one runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from pydantic import ValidationError
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from processors.adapters import SourceRecord
from processors.calibration.ab import EventError, parse_event
from processors.calibration.base import CalibrationInputError
from processors.calibration.run import calibrate
from processors.engines.local import LocalEngine
from processors.intake import make_dead_letter
from processors.redaction import Redactor
from refusal_audit.bundles import load_bundles
from refusal_audit.calibration.runs import (
    build_suite,
    build_variant_engine,
    not_json,
    run_with_suite,
)
from refusal_audit.config import Settings
from schemas.calibration import ABEvent, CalibrationRequest, CalibrationRun, Spectrum
from schemas.deadletter import DeadLetter, DeadLetterStage
from streams.producer import KAFKA_LOGGER, DeliveryError, TopicWriter, make_producer
from streams.sink import OriginalRecord, dead_letter_message, kafka_location, original_record
from streams.topics import Topics, admin_client, require_topic
from warehouse.calibration import (
    insert_ab_events,
    insert_runs,
    refusals_to_calibrate,
    runs_by_id,
)
from warehouse.client import WarehouseError
from warehouse.store import Warehouse

log = logging.getLogger("refusal_audit.calibrate")

EXIT_CRASH = 70
"""Exit status when a batch could not be stored or its outputs were not confirmed."""

MAX_REQUEST_BYTES = 512 * 1024
"""A calibration request message longer than this is dead-lettered (``oversized``): two
texts of at most 20,000 characters and a spectrum fit in a fraction of it."""
MAX_EVENT_BYTES = 64 * 1024
"""An A/B event message longer than this is dead-lettered (``oversized``)."""

SESSION_TIMEOUT_MS = 10_000
"""``session.timeout.ms`` of both consumers: a killed consumer leaves the group after 10 s,
so its restart gets the partitions back soon."""
CALIBRATE_MAX_POLL_INTERVAL_MS = 900_000
"""``max.poll.interval.ms`` of the calibration consumer: a batch of LLM calibrations may take
minutes; the consumer must ask for the next batch within this or it leaves the group."""

DEAD_LETTER_CODES: dict[str, str] = {
    "tombstone": "the message has no value",
    "oversized": "the message is longer than the limit",
    "not_json": "the message is not JSON (the parser's message, never the text)",
    "invalid_request": "not a CalibrationRequest (failing fields and rules, never values)",
    "unknown_clause": "the request's policy bundle or clause is not configured",
    "invalid_spectrum": "the bundle's calibration-spectrum block does not parse",
    "calibration_error": "the calibration failed unexpectedly (a bug: logged with its trace)",
    "invalid_event": "not an A/B event (failing fields, never values)",
}
"""Every dead-letter reason code of the two consumers, with what it means."""

_REBALANCED = frozenset({
    KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.REBALANCE_IN_PROGRESS, KafkaError._ASSIGNMENT_LOST,
})  # fmt: skip
"""Commit errors after which the partitions belong to another member: the messages are
redelivered there, which the idempotent writes make harmless."""

_T = TypeVar("_T")


class ConsumeError(RuntimeError):
    """A batch could not be stored (after the retries), its outputs or dead letters were not
    confirmed by the broker, or its offsets could not be committed: nothing of it was
    committed, so it is redelivered after a restart."""


class Rejected(Exception):
    """A message that is dead-lettered: its reason ``code`` (:data:`DEAD_LETTER_CODES`), the
    human-readable ``reason`` (never the message's values) and the ``stage``."""

    def __init__(self, code: str, reason: str, stage: DeadLetterStage = "validate") -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.stage: DeadLetterStage = stage


# -- messages ----------------------------------------------------------------------------------
def source_of(msg: Message) -> str:
    """Where a message came from, as stored with its rows: ``kafka:<topic> partition P offset
    O``."""
    return f"kafka:{msg.topic()} {kafka_location(msg.partition() or 0, msg.offset() or 0)}"


def run_id_for(topic: str, partition: int, offset: int, value: bytes) -> str:
    """The calibration run id of the request at ``topic``/``partition``/``offset`` with body
    ``value``: ``cal-`` and 32 hex digits of their SHA-256. The same message redelivered gets
    the same id; another message at the same place (a topic deleted and made again) another
    one, so it never replaces an older run."""
    digest = hashlib.sha256()
    for part in (topic.encode(), str(partition).encode(), str(offset).encode()):
        digest.update(len(part).to_bytes(8, "big") + part)
    digest.update(hashlib.sha256(value).digest())
    return f"cal-{digest.hexdigest()[:32]}"


def _size_and_presence(raw: bytes | None, limit: int) -> bytes:
    if raw is None:
        raise Rejected("tombstone", "the message has no value")
    if len(raw) > limit:
        raise Rejected("oversized", f"the message has {len(raw)} bytes; the limit is {limit}")
    return raw


def decode_request(raw: bytes | None, limit: int = MAX_REQUEST_BYTES) -> CalibrationRequest:
    """A message's value as a ``CalibrationRequest``. Raises :class:`Rejected` (``tombstone``,
    ``oversized``, ``not_json``, ``invalid_request``) naming fields and rules, never values."""
    body = _size_and_presence(raw, limit)
    try:
        return CalibrationRequest.model_validate_json(body)
    except ValidationError as exc:
        if not body.strip():
            raise Rejected("not_json", "the message is empty", "decode") from None
        parse_error = not_json(body)
        if parse_error is not None:
            raise Rejected("not_json", parse_error, "decode") from None
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        fields = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}" for e in errors
        )
        raise Rejected("invalid_request", f"not a CalibrationRequest: {fields}"[:2000]) from None


def decode_event(raw: bytes | None, limit: int = MAX_EVENT_BYTES) -> ABEvent:
    """A message's value as an A/B event (``parse_event``). Raises :class:`Rejected`
    (``tombstone``, ``oversized``, ``not_json``, ``invalid_event``) naming fields, never
    values."""
    body = _size_and_presence(raw, limit)
    if not body.strip():
        raise Rejected("not_json", "the message is empty", "decode")
    parse_error = not_json(body)
    if parse_error is not None:
        raise Rejected("not_json", parse_error, "decode")
    if not isinstance(orjson.loads(body), dict):
        raise Rejected("invalid_event", "invalid event: not a JSON object")
    try:
        return parse_event(body)
    except EventError as exc:
        raise Rejected("invalid_event", str(exc)[:2000]) from None


def redact_request(request: CalibrationRequest, redactor: Redactor | None) -> CalibrationRequest:
    """``request`` with its ``request`` and ``refusal`` texts redacted by ``redactor``, as
    ``refusal_audit.calibration.runs.read_requests`` does (unchanged without a redactor)."""
    if redactor is None:
        return request
    text = request.request
    return request.model_copy(
        update={
            "refusal": redactor.redact(request.refusal).text,
            "request": redactor.redact(text).text if text is not None else None,
        }
    )


# -- calibrating one request at a time ---------------------------------------------------------
class Calibrator:
    """The configured bundles, variant engine (``engine_name``, default ``calibrate_engine``)
    and team suite, kept for the life of a consumer, with one event loop for the engine's
    calls. Raises ``ConfigError`` (bundles, engine)."""

    def __init__(
        self, cfg: Settings, engine_name: str | None = None, spectrum: Spectrum | None = None
    ) -> None:
        self.bundles = load_bundles(cfg.policy_bundles, cfg.data_dir)
        self.engine = build_variant_engine(cfg, engine_name)
        self.suite = build_suite(cfg)
        self.spectrum = spectrum
        self.auditor = LocalEngine()
        self._runner = asyncio.Runner()

    def unknown(self, request: CalibrationRequest) -> str | None:
        """Why ``request`` names an unknown bundle or clause, or None."""
        bundle = self.bundles.get(request.policy_bundle)
        if bundle is None:
            return (
                f"unknown policy bundle {request.policy_bundle!r} "
                f"(configured: {', '.join(sorted(self.bundles))})"
            )
        if bundle.clause(request.clause_id) is None:
            return f"clause {request.clause_id!r} is not in bundle {request.policy_bundle!r}"
        return None

    def run(self, request: CalibrationRequest, run_id: str, created_at: datetime) -> CalibrationRun:
        """Calibrate ``request`` (``processors.calibration.run.calibrate``) and apply the
        team's suite (``run_with_suite``). The run's ``started_by`` is the request's
        ``requested_by`` (None when it names nobody: such a run cannot be approved). Raises
        ``CalibrationInputError`` (unknown bundle or clause, a bundle spectrum that does not
        parse)."""
        run = self._runner.run(
            calibrate(
                request, self.bundles, self.engine, run_id=run_id, created_at=created_at,
                started_by=None, spectrum=self.spectrum, auditor=self.auditor,
            )
        )  # fmt: skip
        return run_with_suite(run, self.bundles[request.policy_bundle], request, self.suite)

    def close(self) -> None:
        """Close the engine's client and the event loop."""
        from refusal_audit.audit.engines import close_engine

        try:
            self._runner.run(close_engine(self.engine))
        finally:
            self._runner.close()


# -- the consumer loops ------------------------------------------------------------------------
@dataclass(frozen=True)
class LoopOptions:
    """How a consumer loop batches and retries.

    ``batch_size``: most messages per batch; ``batch_wait``: seconds a batch waits for more
    messages; ``idle_timeout``: stop after this many seconds without a message once
    partitions are assigned (None: never); ``max_messages``: stop after this many (None:
    never); ``store_attempts`` / ``store_wait``: attempts of each warehouse call and the
    first backoff in seconds (doubling, at most 30 s); ``confirm_timeout``: seconds the
    broker gets to confirm a batch's outputs.
    """

    batch_size: int = 20
    batch_wait: float = 1.0
    idle_timeout: float | None = None
    max_messages: int | None = None
    store_attempts: int = 3
    store_wait: float = 1.0
    confirm_timeout: float = 60.0


@dataclass
class LoopStats:
    """What a loop did: ``messages`` consumed and committed, ``stored`` (runs or events
    written), ``republished`` (runs already stored, published again), ``dead_letters``,
    ``batches`` committed."""

    messages: int = 0
    stored: int = 0
    republished: int = 0
    dead_letters: int = 0
    batches: int = 0
    codes: dict[str, int] = field(default_factory=dict)


@dataclass
class Handled:
    """A batch's result: the ``outputs`` to publish (topic, key, value), the dead letters
    with their originals, and how many messages of the batch (a prefix) were handled."""

    outputs: list[tuple[str, bytes, bytes]]
    letters: list[tuple[DeadLetter, OriginalRecord]]
    done: int


class ConsumerLoop:
    """A bounded-batch, at-least-once consumer of one input topic (module docstring);
    subclasses implement :meth:`handle`. ``run`` blocks until :meth:`stop`, the idle timeout
    or the message limit, then leaves the group; it raises :class:`ConsumeError`."""

    group_suffix: ClassVar[str] = ""
    extra_config: ClassVar[dict[str, Any]] = {}

    def __init__(
        self,
        cfg: Settings,
        store: Warehouse,
        options: LoopOptions | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.options = options or LoopOptions()
        self.clock = clock
        self.topics = Topics.from_prefix(cfg.kafka_topic_prefix)
        self.redactor = Redactor(cfg.redaction_kinds) if cfg.redaction_enabled else None
        self.writer = TopicWriter(make_producer(cfg.kafka_bootstrap_servers))
        self.group = cfg.kafka_topic_prefix + self.group_suffix
        self.consumer = Consumer(
            {
                "bootstrap.servers": cfg.kafka_bootstrap_servers,
                "group.id": self.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                **self.extra_config,
            },
            logger=KAFKA_LOGGER,
        )
        self.stopping = threading.Event()
        self.assigned = threading.Event()
        self.stats = LoopStats()

    @property
    def input_topic(self) -> str:
        """The topic this loop consumes."""
        raise NotImplementedError

    def stop(self) -> None:
        """Ask ``run`` to return after the message in hand (thread- and signal-safe)."""
        self.stopping.set()

    def handle(self, batch: Sequence[Message]) -> Handled:
        """Process ``batch`` (store its rows); return its outputs and dead letters. Raises
        :class:`ConsumeError`."""
        raise NotImplementedError

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("%s: assigned %s", self.group, [p.partition for p in partitions])
        self.assigned.set()

    def run(self) -> LoopStats:
        """Consume until stopped (module docstring); return what was done. Raises
        :class:`ConsumeError` (the batch in hand is not committed)."""
        self.consumer.subscribe([self.input_topic], on_assign=self._on_assign)
        log.info("%s: consuming %s", self.group, self.input_topic)
        idle_since: float | None = None
        try:
            while not self.stopping.is_set():
                want = self.options.batch_size
                if self.options.max_messages is not None:
                    want = min(want, self.options.max_messages - self.stats.messages)
                    if want <= 0:
                        break
                batch = self._usable(self.consumer.consume(want, self.options.batch_wait))
                if batch:
                    self.process(batch)
                    idle_since = None
                    continue
                if self.options.idle_timeout is None or not self.assigned.is_set():
                    continue
                now = time.monotonic()
                idle_since = now if idle_since is None else idle_since
                if now - idle_since >= self.options.idle_timeout:
                    log.info("%s: idle for %.1f s, stopping", self.group, now - idle_since)
                    break
        finally:
            self.close()
        return self.stats

    def _usable(self, messages: Iterable[Message]) -> list[Message]:
        batch = []
        for msg in messages:
            error = msg.error()
            if error is None:
                batch.append(msg)
            elif error.code() != KafkaError._PARTITION_EOF:
                log.warning("%s: consumer error: %s", self.group, error)
        return batch

    def process(self, batch: Sequence[Message]) -> None:
        """Handle ``batch``, store its dead letters, publish and confirm its outputs and dead
        letters, then commit the handled messages' offsets. Raises :class:`ConsumeError`."""
        handled = self.handle(batch)
        letters = [letter for letter, _ in handled.letters]
        self.retry("storing dead letters", lambda: self.store.insert_dead_letters(letters))
        for topic, key, value in handled.outputs:
            self.writer.send(topic, value, key)
        for letter, original in handled.letters:
            copy, copy_key, headers = dead_letter_message(letter, original)
            self.writer.send(self.topics.dead_letters, copy, copy_key, headers)
        try:
            self.writer.confirm(self.options.confirm_timeout)
        except DeliveryError as exc:
            raise ConsumeError(f"the broker did not confirm the batch's outputs: {exc}") from exc
        for letter, _ in handled.letters:
            self.stats.dead_letters += 1
            self.stats.codes[letter.reason_code] = self.stats.codes.get(letter.reason_code, 0) + 1
        self.commit(batch[: handled.done])
        self.stats.messages += handled.done
        self.stats.batches += 1

    def commit(self, messages: Sequence[Message]) -> None:
        """Commit the offsets after ``messages`` (synchronously). A commit refused because
        the partitions were reassigned is logged (the messages are redelivered to their new
        owner); any other failure raises :class:`ConsumeError`."""
        last: dict[tuple[str, int], int] = {}
        for msg in messages:
            key = (msg.topic() or "", msg.partition() or 0)
            last[key] = max(last.get(key, -1), msg.offset() or 0)
        if not last:
            return
        offsets = [TopicPartition(t, p, o + 1) for (t, p), o in sorted(last.items())]
        try:
            result = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() in _REBALANCED:
                log.warning("%s: offsets not committed, the partitions were reassigned (%s); "
                            "the messages are redelivered", self.group, error)  # fmt: skip
                return
            raise ConsumeError(f"committing offsets failed: {exc}") from exc
        failed = [tp for tp in result or [] if tp.error is not None]
        if failed:
            raise ConsumeError(f"committing offsets failed: {failed[0].error}")

    def retry(self, what: str, call: Callable[[], _T]) -> _T:
        """``call()``, attempted ``store_attempts`` times with exponential backoff while it
        raises ``WarehouseError``; then :class:`ConsumeError`."""
        attempts = max(1, self.options.store_attempts)

        def before_sleep(state: Any) -> None:
            log.warning("%s: %s failed (attempt %d of %d), retrying: %s", self.group, what,
                        state.attempt_number, attempts,
                        state.outcome.exception() if state.outcome else "")  # fmt: skip

        retrying = Retrying(
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=self.options.store_wait, max=30.0),
            retry=retry_if_exception_type(WarehouseError),
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            return retrying(call)
        except WarehouseError as exc:
            raise ConsumeError(f"{what}: the warehouse failed {attempts} time(s): {exc}") from exc

    def dead_letter(
        self, msg: Message, rejected: Rejected, log_id: str | None = None
    ) -> tuple[DeadLetter, OriginalRecord]:
        """The dead letter of ``msg`` (value redacted like the input) and its original key,
        headers and tombstone flag."""
        value = msg.value()
        record = SourceRecord(
            msg.topic() or "", kafka_location(msg.partition() or 0, msg.offset() or 0),
            value or b"", tombstone=value is None,
        )  # fmt: skip
        letter = make_dead_letter(
            record, rejected.stage, rejected.code, rejected.reason, self.clock(), log_id=log_id,
            redactor=self.redactor, max_raw_bytes=self.cfg.dead_letter_max_raw_bytes,
        )  # fmt: skip
        log.warning("%s: dead letter %s from %s %s: %s", self.group, rejected.code,
                    record.source, record.location, letter.reason)  # fmt: skip
        return letter, original_record(msg.key(), msg.headers(), value)

    def close(self) -> None:
        """Leave the group and flush the producer (nothing more is committed). Never
        raises."""
        try:
            self.consumer.close()
        except Exception as exc:  # closing must not hide why the loop ended
            log.warning("%s: closing the consumer failed: %s", self.group, exc)
        self.writer.producer.flush(5.0)


class CalibrateConsumer(ConsumerLoop):
    """Consumes ``calibrate.requests``, stores each run and publishes it on
    ``calibrate.runs`` (module docstring). ``calibrator`` is closed by its owner."""

    group_suffix = "calibrate"
    extra_config: ClassVar[dict[str, Any]] = {
        "max.poll.interval.ms": CALIBRATE_MAX_POLL_INTERVAL_MS
    }

    def __init__(
        self,
        cfg: Settings,
        store: Warehouse,
        calibrator: Calibrator,
        options: LoopOptions | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        super().__init__(cfg, store, options, clock)
        self.calibrator = calibrator

    @property
    def input_topic(self) -> str:
        """``calibrate.requests``."""
        return self.topics.calibrate_requests

    def handle(self, batch: Sequence[Message]) -> Handled:
        """Decode, look up, calibrate and store each request of ``batch`` in order (a
        stored run is reused); stop early when asked to (``Handled.done``). Raises
        :class:`ConsumeError`."""
        decoded: list[CalibrationRequest | Rejected] = []
        ids: dict[int, str] = {}
        for i, msg in enumerate(batch):
            try:
                request = decode_request(msg.value())
                unknown = self.calibrator.unknown(request)
                if unknown is not None:
                    raise Rejected("unknown_clause", unknown)
            except Rejected as rejected:
                decoded.append(rejected)
                continue
            decoded.append(request)
            ids[i] = run_id_for(msg.topic() or "", msg.partition() or 0, msg.offset() or 0,
                                msg.value() or b"")  # fmt: skip
        stored = self.retry(
            "reading stored runs", lambda: runs_by_id(self.store, sorted(set(ids.values())))
        )
        texts = self._stored_requests([
            r for i, r in enumerate(decoded)
            if isinstance(r, CalibrationRequest) and ids[i] not in stored
        ])  # fmt: skip
        outputs: list[tuple[str, bytes, bytes]] = []
        letters: list[tuple[DeadLetter, OriginalRecord]] = []
        done = 0
        for i, (msg, item) in enumerate(zip(batch, decoded, strict=True)):
            if i and self.stopping.is_set():
                log.info("%s: stopping after %d of %d message(s) of the batch", self.group,
                         i, len(batch))  # fmt: skip
                break
            done = i + 1
            if isinstance(item, Rejected):
                letters.append(self.dead_letter(msg, item))
                continue
            run = stored.get(ids[i])
            if run is not None:
                self.stats.republished += 1
            else:
                try:
                    run = self._calibrate(msg, item, ids[i], texts)
                except Rejected as rejected:
                    letters.append(self.dead_letter(msg, rejected, item.log_id))
                    continue
                self._store(run, source_of(msg))
            outputs.append((self.topics.calibrate_runs, run.calibration_run_id.encode(),
                            run.model_dump_json().encode()))  # fmt: skip
        return Handled(outputs, letters, done)

    def _store(self, run: CalibrationRun, source: str) -> None:
        now = self.clock()
        self.retry("storing a run", lambda: insert_runs(self.store, [run], source, now))
        self.stats.stored += 1

    def _stored_requests(self, requests: Sequence[CalibrationRequest]) -> dict[str, list[Any]]:
        """log id -> the warehouse's refusals of it (for requests that name a log id and no
        request text)."""
        log_ids = sorted({r.log_id for r in requests if r.request is None and r.log_id})
        if not log_ids:
            return {}
        rows = self.retry(
            "looking up log ids",
            lambda: refusals_to_calibrate(self.store, log_ids=log_ids, limit=10 * len(log_ids)),
        )
        found: dict[str, list[Any]] = {}
        for row in rows:
            found.setdefault(row["log_id"], []).append(row)
        return found

    def _calibrate(
        self, msg: Message, request: CalibrationRequest, run_id: str, texts: dict[str, list[Any]]
    ) -> CalibrationRun:
        if request.request is None and request.log_id in texts:
            rows = texts[request.log_id]
            row = next((r for r in rows if r["policy_bundle"] == request.policy_bundle), rows[0])
            if row["request"]:
                request = request.model_copy(update={"request": row["request"]})
        request = redact_request(request, self.redactor)
        try:
            return self.calibrator.run(request, run_id, self.clock())
        except CalibrationInputError as exc:  # a bundle spectrum that does not parse
            raise Rejected("invalid_spectrum", str(exc)) from None
        except Exception as exc:  # a bug: keep the message, do not block the partition
            log.exception("%s: calibrating %s failed", self.group, source_of(msg))
            raise Rejected(
                "calibration_error", f"{type(exc).__name__}: {exc}"[:2000], "audit"
            ) from None


class ABConsumer(ConsumerLoop):
    """Consumes ``ab.events`` and stores each batch's valid events in one insert (module
    docstring)."""

    group_suffix = "ab"

    @property
    def input_topic(self) -> str:
        """``ab.events``."""
        return self.topics.ab_events

    def handle(self, batch: Sequence[Message]) -> Handled:
        """Validate every event of ``batch``; store the valid ones (one insert). Raises
        :class:`ConsumeError`."""
        valid: list[tuple[ABEvent, str]] = []
        letters: list[tuple[DeadLetter, OriginalRecord]] = []
        for msg in batch:
            try:
                valid.append((decode_event(msg.value()), source_of(msg)))
            except Rejected as rejected:
                letters.append(self.dead_letter(msg, rejected))
        now = self.clock()
        self.retry("storing A/B events", lambda: insert_ab_events(self.store, valid, now))
        self.stats.stored += len(valid)
        return Handled([], letters, len(batch))


def check_topics(cfg: Settings, roles: Sequence[str]) -> Topics:
    """The topic names; raises ``streams.topics.TopicError`` when the broker cannot be
    reached or a topic of ``roles`` (``Topics`` field names) is missing."""
    topics = Topics.from_prefix(cfg.kafka_topic_prefix)
    admin = admin_client(cfg.kafka_bootstrap_servers)
    for role in roles:
        require_topic(admin, getattr(topics, role))
    return topics


# -- the owner channel of an embedded store ----------------------------------------------------
# -- producing files onto the topics -----------------------------------------------------------
@dataclass
class ProduceReport:
    """What ``produce_file`` did: lines ``sent``, ``delivered`` (acknowledged),
    ``undelivered`` (failed or unconfirmed), ``rejected`` lines (line number, reason; not
    sent) and the delivery errors."""

    sent: int = 0
    delivered: int = 0
    undelivered: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)
    delivery_errors: list[str] = field(default_factory=list)


def request_key(line: bytes) -> bytes | None:
    """The key of a calibration request line (its log id, else none). Raises ``ValueError``
    with the reason (fields, never values) when the line is not a request."""
    try:
        request = decode_request(line)
    except Rejected as rejected:
        raise ValueError(f"{rejected.code}: {rejected.reason}") from None
    return request.log_id.encode() if request.log_id else None


def event_key(line: bytes) -> bytes | None:
    """The key of an A/B event line (its event id). Raises ``ValueError`` with the reason
    when the line is not an event."""
    try:
        return decode_event(line).event_id.encode()
    except Rejected as rejected:
        raise ValueError(f"{rejected.code}: {rejected.reason}") from None


def produce_file(
    path: Path,
    writer: TopicWriter,
    topic: str,
    key_of: Callable[[bytes], bytes | None],
    *,
    raw: bool = False,
    confirm_every: int = 10_000,
) -> ProduceReport:
    """Send every non-blank line of the JSONL file ``path`` to ``topic`` byte for byte, keyed
    by ``key_of(line)``; a line ``key_of`` refuses (``ValueError``) is reported, not sent,
    unless ``raw`` (then it is sent without a key, for the consumer to dead-letter). Raises
    ``OSError``."""
    report = ProduceReport()

    def confirm() -> None:
        try:
            report.delivered += writer.confirm()
        except DeliveryError as exc:
            report.delivered += exc.delivered
            report.delivery_errors.append(str(exc))
        report.undelivered = report.sent - report.delivered

    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            body = line.rstrip(b"\r\n")
            if not body.strip():
                continue
            try:
                key = key_of(body)
            except ValueError as exc:
                if not raw:
                    report.rejected.append((lineno, str(exc)))
                    continue
                key = None
            writer.send(topic, body, key)
            report.sent += 1
            if report.sent % confirm_every == 0:
                confirm()
    confirm()
    return report


__all__ = [
    "DEAD_LETTER_CODES",
    "EXIT_CRASH",
    "ABConsumer",
    "CalibrateConsumer",
    "Calibrator",
    "ConsumeError",
    "ConsumerLoop",
    "LoopOptions",
    "LoopStats",
    "ProduceReport",
    "Rejected",
    "check_topics",
    "decode_event",
    "decode_request",
    "event_key",
    "produce_file",
    "redact_request",
    "request_key",
    "run_id_for",
    "source_of",
]
