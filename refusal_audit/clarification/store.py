"""Where conversation states live: a small store interface and two implementations.

:class:`StateStore` is what the clarification service needs: ``get`` a conversation's state
and ``put`` a new one with optimistic concurrency (the revision the writer read, or None for
a new conversation), so two processes (HTTP and Kafka services, or two HTTP workers)
sharing a store never lose an update. :class:`MemoryStore` keeps states in a dict (tests,
benchmarks, one-process use); :class:`SqliteStore` keeps them in a SQLite file (WAL mode;
its SQL is ``warehouse.conversation_states``), so they survive restarts. A faust Table
store for the Kafka service fits the same protocol.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from schemas.clarification import ConversationState
from warehouse.conversation_states import (
    all_state_texts,
    insert_state,
    open_states,
    read_state,
    update_state,
)
from warehouse.private import make_private_dir, warn_if_open


class StaleStateError(RuntimeError):
    """The stored revision is not the one the writer read (someone else wrote first), or a
    new conversation's id is already taken."""


class StoreUnavailableError(RuntimeError):
    """The store could not keep a state (e.g. the broker of a Kafka store did not confirm
    it); nothing was stored, the caller may retry."""


class StateStore(Protocol):
    """Conversation states by ``conversation_id``."""

    def get(self, conversation_id: str) -> ConversationState | None:
        """The state, or None for an unknown conversation."""
        ...

    def put(self, state: ConversationState, expected_revision: int | None) -> None:
        """Store ``state``. ``expected_revision`` is the revision the writer read (None: the
        conversation must be new). Raises :class:`StaleStateError` when it does not match,
        :class:`StoreUnavailableError` when the state could not be kept."""
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...


class MemoryStore:
    """An in-process :class:`StateStore` (a dict behind a lock)."""

    def __init__(self) -> None:
        self._states: dict[str, ConversationState] = {}
        self._lock = threading.Lock()

    def get(self, conversation_id: str) -> ConversationState | None:
        """See :class:`StateStore`."""
        with self._lock:
            return self._states.get(conversation_id)

    def put(self, state: ConversationState, expected_revision: int | None) -> None:
        """See :class:`StateStore`."""
        with self._lock:
            current = self._states.get(state.conversation_id)
            found = current.revision if current is not None else None
            if found != expected_revision:
                raise StaleStateError(
                    f"conversation {state.conversation_id!r}: revision {found}, "
                    f"expected {expected_revision}"
                )
            self._states[state.conversation_id] = state

    def all_states(self) -> Iterator[ConversationState]:
        """Every stored state (a snapshot)."""
        with self._lock:
            return iter(list(self._states.values()))

    def close(self) -> None:
        """Nothing to release."""

    def __len__(self) -> int:
        return len(self._states)


class SqliteStore:
    """A :class:`StateStore` in a SQLite file (made with its folder on first use; WAL
    journal, ``synchronous=NORMAL``: a committed state survives a process crash). States are
    stored as their JSON. The folder is made ``0700`` and the files ``0600`` (the process's
    umask is made private, ``warehouse.private``); an existing file open to other users is
    warned about once. Raises ``sqlite3.Error`` when the file cannot be opened,
    ``OSError`` when its folder cannot be made."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        # the folder 0700 when made, the file and its WAL 0600 (warehouse.private)
        make_private_dir(self.path.parent, None)
        warn_if_open(self.path, "clarification store")
        self._lock = threading.Lock()
        self._db = open_states(self.path)

    def get(self, conversation_id: str) -> ConversationState | None:
        """See :class:`StateStore`."""
        with self._lock:
            text = read_state(self._db, conversation_id)
        return ConversationState.model_validate_json(text) if text is not None else None

    def put(self, state: ConversationState, expected_revision: int | None) -> None:
        """See :class:`StateStore`."""
        values = (state.revision, state.outcome.value, state.updated_at.isoformat())
        text = state.model_dump_json()
        with self._lock:
            if expected_revision is None:
                if not insert_state(self._db, state.conversation_id, values, text):
                    raise StaleStateError(f"conversation {state.conversation_id!r} exists already")
                return
            if not update_state(self._db, state.conversation_id, expected_revision, values, text):
                raise StaleStateError(
                    f"conversation {state.conversation_id!r}: not at revision {expected_revision}"
                )

    def all_states(self) -> Iterator[ConversationState]:
        """Every stored state (read at once)."""
        with self._lock:
            texts = all_state_texts(self._db)
        return iter([ConversationState.model_validate_json(t) for t in texts])

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()
