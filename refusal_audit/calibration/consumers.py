"""Refusal-style calibration on Kafka: the consumers of ``calibrate consume`` and
``ab consume`` (docs/calibration.md), on the one consumer loop of ``streams.consumer_loop``.

Topics (``streams.topics``, names ``<kafka_topic_prefix><suffix>``):

- ``calibrate.requests`` (in): one ``schemas.calibration.CalibrationRequest`` JSON object per
  message, the application's post-refusal hook (any key, or none);
- ``calibrate.runs`` (out): every ``CalibrationRun`` as JSON, keyed by its
  ``calibration_run_id``;
- ``ab.events`` (in): the product's A/B events (``schemas/json/ab_event.schema.json``);
- ``dead-letters`` (out): a message that cannot be processed, with its reason
  (``schemas.deadletter``, headers as for the worker: ``streams.dead_letters.dead_letter_message``);
  every dead letter is also stored in the warehouse's ``dead_letters`` table.

:class:`CalibrateConsumer` (consumer group ``<kafka_topic_prefix>calibrate``) decodes each
request, fills a request that names only a ``log_id`` from the warehouse (the audit's stored,
redacted request; an unknown log id is calibrated from the refusal alone), redacts it like
``refusal_audit.calibration.runs.read_requests``, calibrates it with the configured engine and suite
(``refusal_audit.calibration.calibrator.Calibrator``: ``processors.calibration.run.calibrate`` and
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
message's topic, partition, offset and value (``decoders.run_id_for``), and a redelivered
request whose run is already stored is not calibrated again (the stored run is published again, so
an approval given meanwhile keeps pointing at the text that was approved); ``ab_event_log`` keeps
one row per (experiment, event id).

Failures: a message that cannot be processed is dead-lettered with a reason code
(``refusal_audit.calibration.decoders.DEAD_LETTER_CODES``) and committed; the consumer goes
on. A warehouse that fails after the retries, or outputs the broker does not confirm, raise
:class:`ConsumeError` without committing anything of the batch (the command exits 70; a
supervisor restarts it, and the
batch is redelivered). ``stop`` (SIGTERM/SIGINT in the command) ends the loop after the
message in hand: what was processed is committed, the rest is redelivered.

Embedded store: a consumer that owns a chDB store serves it to the other commands on a
loopback HTTP server of its own (``refusal_audit.streaming.owner.OwnerServer``, the owner channel of
``refusal_audit.streaming.owner``), and follows another owner (the worker, the review server) when
one runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from processors.calibration.base import CalibrationInputError
from refusal_audit.audit.engine_setup import configured_redactor
from refusal_audit.calibration.calibrator import Calibrator
from refusal_audit.calibration.decoders import (
    decode_event,
    decode_request,
    redact_request,
    run_id_for,
    source_of,
)
from refusal_audit.config import Settings
from schemas.calibration import ABEvent, CalibrationRequest, CalibrationRun
from schemas.deadletter import DeadLetter
from streams.clients import LONG_HANDLER_MAX_POLL_INTERVAL_MS, Message
from streams.consumer_loop import (
    EXIT_CRASH,
    ConsumeError,
    ConsumerLoop,
    Handled,
    LoopConfig,
    LoopStats,
    Rejected,
    dead_letter,
    require_topics,
)
from streams.dead_letters import OriginalRecord
from streams.topics import Topics
from warehouse.calibration import (
    insert_ab_events,
    insert_runs,
    refusals_to_calibrate,
    runs_by_id,
)
from warehouse.client import WarehouseError
from warehouse.store import Warehouse

log = logging.getLogger("refusal_audit.calibrate")

_T = TypeVar("_T")


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


class WarehouseConsumer:
    """A bounded-batch, at-least-once consumer of one input topic that stores its results in
    the warehouse (module docstring), run by ``streams.consumer_loop.ConsumerLoop`` with a
    batch of ``options.batch_size``, reassigned commits passed over and
    :class:`ConsumeError` raised out of :meth:`run`; subclasses implement :meth:`handle`.
    ``run`` blocks until :meth:`stop`, the idle timeout or the message limit, then leaves the
    group."""

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
        self.redactor = configured_redactor(cfg)
        self.group = cfg.kafka_topic_prefix + self.group_suffix
        loop = LoopConfig(
            name=self.group, group=self.group, topics=(self.input_topic,),
            dead_letter_topic=self.topics.dead_letters, batch_size=self.options.batch_size,
            batch_wait=self.options.batch_wait, idle_timeout=self.options.idle_timeout,
            max_messages=self.options.max_messages,
            confirm_timeout=self.options.confirm_timeout, consumer_overrides=self.extra_config,
        )  # fmt: skip
        self.loop = ConsumerLoop(cfg.kafka(), loop, self, log)
        self.stopping = self.loop.stopping
        self.stats = self.loop.stats

    @property
    def input_topic(self) -> str:
        """The topic this consumer reads."""
        raise NotImplementedError

    def run(self) -> LoopStats:
        """Consume until stopped (module docstring); return what was done. Raises
        :class:`ConsumeError` (the batch in hand is not committed)."""
        return self.loop.run()

    def stop(self) -> None:
        """Ask ``run`` to return after the message in hand (thread- and signal-safe)."""
        self.loop.stop()

    def handle(self, batch: Sequence[Message]) -> Handled:
        """Process ``batch`` (store its rows and its dead letters); return its outputs and
        dead letters. Raises :class:`ConsumeError`."""
        raise NotImplementedError

    def stored_letters(self, handled: Handled) -> Handled:
        """``handled``, once its dead letters are in the warehouse's ``dead_letters`` table.
        Raises :class:`ConsumeError`."""
        letters = [letter for letter, _ in handled.letters]
        self.retry("storing dead letters", lambda: self.store.insert_dead_letters(letters))
        return handled

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
        return dead_letter(
            msg, rejected, self.clock(), name=self.group, logger=log, redactor=self.redactor,
            max_raw_bytes=self.cfg.dead_letter_max_raw_bytes, log_id=log_id,
        )  # fmt: skip


class CalibrateConsumer(WarehouseConsumer):
    """Consumes ``calibrate.requests``, stores each run and publishes it on
    ``calibrate.runs`` (module docstring). ``calibrator`` is closed by its owner."""

    group_suffix = "calibrate"
    extra_config: ClassVar[dict[str, Any]] = {
        "max.poll.interval.ms": LONG_HANDLER_MAX_POLL_INTERVAL_MS
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
        return self.stored_letters(Handled(outputs, letters, done))

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


class ABConsumer(WarehouseConsumer):
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
        return self.stored_letters(Handled([], letters, len(batch)))


def check_topics(cfg: Settings, roles: Sequence[str]) -> Topics:
    """The topic names; raises ``streams.topics.TopicError`` when the broker cannot be
    reached or a topic of ``roles`` (``Topics`` field names) is missing."""
    topics = Topics.from_prefix(cfg.kafka_topic_prefix)
    require_topics(cfg.kafka(), [getattr(topics, role) for role in roles])
    return topics


__all__ = [
    "EXIT_CRASH",
    "ABConsumer",
    "CalibrateConsumer",
    "ConsumeError",
    "LoopOptions",
    "LoopStats",
    "WarehouseConsumer",
    "check_topics",
]
