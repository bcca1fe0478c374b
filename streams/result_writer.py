"""The faust worker's writer of results: the warehouse first, then the output topics.

``ResultWriter`` implements ``schemas.result_tables.ResultTables`` (the pipeline's ``Sink``)
over another ``ResultTables`` (``warehouse.store.Warehouse`` in the worker). Every row goes
to ClickHouse (where dedup on write makes redelivery harmless) and then to its topic through
a ``TopicWriter``; the worker acknowledges its input only after ``TopicWriter.confirm``
succeeds, so an event's offset becomes committable only once its assessment is stored and
its outputs are on the broker. Dead letters go to the dead-letter topic as
``streams.dead_letters.dead_letter_message`` frames them, with their original records' key
and headers when the worker passes them (:meth:`ResultWriter.use_originals`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from schemas.audit import BatchRecord, StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent, StoredIdentity
from schemas.result_tables import ResultTables
from streams.dead_letters import OriginalRecord, dead_letter_message
from streams.producer import TopicWriter
from streams.topics import Topics


class ResultWriter:
    """Warehouse + topics; see the module docstring. Methods block (call them off the loop).

    ``observe_write(table, seconds)`` receives the duration of each warehouse insert.
    """

    def __init__(
        self,
        warehouse: ResultTables,
        writer: TopicWriter,
        topics: Topics,
        observe_write: Callable[[str, float], None] | None = None,
    ) -> None:
        self.warehouse = warehouse
        self.writer = writer
        self.topics = topics
        self.observe_write = observe_write
        self._originals: Mapping[tuple[str, str], OriginalRecord] = {}

    def use_originals(self, originals: Mapping[tuple[str, str], OriginalRecord]) -> None:
        """Key, headers and tombstone flag of the records about to be processed.

        Keyed by ``(source, location)`` as in their dead letters (``window_originals``);
        replaces the previous window's. Dead letters of records not in it are published
        without them (key: the log id).
        """
        self._originals = originals

    @contextmanager
    def _timed(self, table: str) -> Iterator[None]:
        started = time.perf_counter()
        yield
        if self.observe_write is not None:
            self.observe_write(table, time.perf_counter() - started)

    def insert_events(self, events: Sequence[StoredEvent]) -> None:
        """Store the redacted events."""
        with self._timed("refusal_events"):
            self.warehouse.insert_events(events)

    def insert_assessments(self, items: Sequence[StoredAssessment]) -> None:
        """Store assessments; publish each one, and sampled ones to the review queue too."""
        with self._timed("assessments"):
            self.warehouse.insert_assessments(items)
        for item in items:
            value = item.model_dump_json().encode()
            key = item.log_id.encode()
            self.writer.send(self.topics.assessments, value, key)
            if item.sampled_for_review:
                self.writer.send(self.topics.review_queue, value, key)

    def insert_batches(self, batches: Sequence[BatchRecord]) -> None:
        """Store the batch rows. Their policy-gap flags reach the policy-gap topic grouped,
        as alerts of the gap tracker (``refusal_audit.alerts.gaps``), not one message per flag."""
        with self._timed("audit_batches"):
            self.warehouse.insert_batches(batches)

    def stored_identities(self, keys: Sequence[tuple[str, str]]) -> Mapping[str, StoredIdentity]:
        """The warehouse's stored identities of ``(policy_bundle, log_id)`` ``keys``."""
        return self.warehouse.stored_identities(keys)

    def insert_dead_letters(self, items: Sequence[DeadLetter]) -> None:
        """Store dead letters; publish their original bytes with the reason in headers.

        The topic copy keeps the original key, headers and null value when the originals
        are known (``use_originals``); see the module docstring.
        """
        with self._timed("dead_letters"):
            self.warehouse.insert_dead_letters(items)
        for letter in items:
            original = self._originals.get((letter.source, letter.location))
            value, key, headers = dead_letter_message(letter, original)
            self.writer.send(self.topics.dead_letters, value, key, headers)
