"""The clarification service's conversation states in a SQLite file: the SQL of
``refusal_audit.clarification.store.SqliteStore`` (one ``conversations`` row per
conversation: its revision, outcome, update time and the state's JSON).

The functions take an open connection (``open_states``) and plain values; the caller holds
its own lock around them (the connection is shared between threads). They raise
``sqlite3.Error`` when the file fails.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["all_state_texts", "insert_state", "open_states", "read_state", "update_state"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    conversation_id TEXT PRIMARY KEY,
    revision INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    state TEXT NOT NULL
)
"""


def open_states(path: Path) -> sqlite3.Connection:
    """Open (or make) the SQLite file ``path`` in autocommit mode, usable from any thread
    (WAL journal, ``synchronous=NORMAL``, a 5 s busy timeout), with its ``conversations``
    table made. Raises ``sqlite3.Error``."""
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA busy_timeout=5000")
    db.execute(_SCHEMA)
    return db


def read_state(db: sqlite3.Connection, conversation_id: str) -> str | None:
    """The stored state JSON of ``conversation_id``, or None."""
    row = db.execute(
        "SELECT state FROM conversations WHERE conversation_id = ?", (conversation_id,)
    ).fetchone()
    return str(row[0]) if row is not None else None


def insert_state(
    db: sqlite3.Connection,
    conversation_id: str,
    values: tuple[int, str, str],
    text: str,
) -> bool:
    """Store a new conversation: ``values`` = (revision, outcome, updated_at ISO text),
    ``text`` the state's JSON. False (nothing stored) when ``conversation_id`` is taken."""
    try:
        db.execute(
            "INSERT INTO conversations VALUES (?, ?, ?, ?, ?)",
            (conversation_id, *values, text),
        )
    except sqlite3.IntegrityError:
        return False
    return True


def update_state(
    db: sqlite3.Connection,
    conversation_id: str,
    expected_revision: int,
    values: tuple[int, str, str],
    text: str,
) -> bool:
    """Replace the conversation's row if it is at ``expected_revision``: ``values`` =
    (revision, outcome, updated_at ISO text), ``text`` the state's JSON. False (nothing
    changed) when it is not (unknown, or at another revision)."""
    cursor = db.execute(
        "UPDATE conversations SET revision = ?, outcome = ?, updated_at = ?, state = ? "
        "WHERE conversation_id = ? AND revision = ?",
        (*values, text, conversation_id, expected_revision),
    )
    return cursor.rowcount == 1


def all_state_texts(db: sqlite3.Connection) -> list[str]:
    """Every stored state's JSON (read at once)."""
    return [str(r[0]) for r in db.execute("SELECT state FROM conversations").fetchall()]
