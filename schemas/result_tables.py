"""The tables one audit run writes: the contract between the pipeline and its stores.

:class:`ResultTables` is implemented by ``warehouse.store.Warehouse`` (batch mode, the faust
worker's warehouse), ``streams.result_writer.ResultWriter`` (the warehouse, then the output
topics) and the transactional worker's ``TopicOutputs``; the pipeline
(``refusal_audit.audit.pipeline``, where it is called ``Sink``) writes through it. Defined here,
in the contracts, because ``streams/`` may not import the application layer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from schemas.audit import BatchRecord, StoredAssessment
from schemas.deadletter import DeadLetter
from schemas.events import StoredEvent, StoredIdentity


class ResultTables(Protocol):
    """Stores an audit run's rows; each method blocks until they are stored (or raises).

    ``stored_identities`` maps the log ids of ``keys`` (``(log_id, policy_bundle)`` pairs)
    that are already stored to what the store holds of them (the duplicate-log-id rule).
    """

    def insert_events(self, events: Sequence[StoredEvent]) -> None: ...
    def insert_assessments(self, items: Sequence[StoredAssessment]) -> None: ...
    def insert_batches(self, batches: Sequence[BatchRecord]) -> None: ...
    def insert_dead_letters(self, items: Sequence[DeadLetter]) -> None: ...
    def stored_identities(
        self, keys: Sequence[tuple[str, str]]
    ) -> Mapping[str, StoredIdentity]: ...
