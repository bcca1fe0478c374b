"""Private stores: directories 0700 and files 0600 for what holds secrets (issue 23, item 6).

The embedded chDB warehouse (reviewers' argon2id password hashes, audited texts) and the
clarification service's SQLite store are written by the process that owns them, partly in
background threads (chDB's merges, SQLite's WAL), so the file mode cannot be passed per
file: :func:`private_umask` adds ``077`` to the process's umask before the store is opened,
and every file or directory the process creates from then on is its owner's only (the
``--out`` files of that process too). :func:`make_private_dir` creates a store's directory
(and any missing parent) ``0700`` and warns once per process, on the log (stderr for the
CLI), when the directory already exists with permissions for group or others: it was made
before this rule (or by hand) and its files may be readable; ``chmod -R go-rwx DIR`` fixes
it. An existing directory's mode is not changed: the operator may have chosen it.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path

log = logging.getLogger(__name__)

#: Bits the umask always holds once a private store is opened: no permission for group or
#: others.
PRIVATE_UMASK = 0o077

_warned: set[str] = set()
_lock = threading.Lock()


def private_umask() -> None:
    """Add :data:`PRIVATE_UMASK` to the process's umask (the other bits are kept), so files
    this process creates from now on are ``0600`` and directories ``0700`` at most."""
    with _lock:
        current = os.umask(PRIVATE_UMASK)
        os.umask(current | PRIVATE_UMASK)


def open_to_others(path: Path) -> bool:
    """Whether ``path`` exists and grants any permission to its group or to others."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return bool(stat.S_IMODE(mode) & PRIVATE_UMASK)


def warn_if_open(path: Path, what: str) -> bool:
    """Log a warning (once per path and process) when ``path`` exists with permissions for
    group or others; ``what`` names it (e.g. "embedded warehouse directory"). Returns
    whether ``path`` is open to others."""
    if not open_to_others(path):
        return False
    key = str(path.resolve())
    with _lock:
        if key in _warned:
            return True
        _warned.add(key)
    mode = stat.S_IMODE(path.stat().st_mode)
    log.warning(
        "the %s %s is accessible to other users (mode %04o): it holds private data; "
        "restrict it with `chmod -R go-rwx %s`",
        what,
        key,
        mode,
        key,
    )
    return True


def make_private_dir(path: Path, what: str | None) -> None:
    """Set the private umask (:func:`private_umask`) and create ``path`` (and its missing
    parents) with mode ``0700``; an existing ``path`` keeps its mode and is warned about
    when open to others (:func:`warn_if_open`), ``what`` naming it in the warning (None: no
    warning, for a folder whose private files are checked one by one). Raises ``OSError``
    when it cannot be created."""
    private_umask()
    if path.is_dir():
        if what is not None:
            warn_if_open(path, what)
        return
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def private_opener(path: str, flags: int) -> int:
    """An ``opener`` for :func:`open` that writes a file private to its owner: a new file is
    created mode ``0600`` and an existing one is set to ``0600`` before anything is written
    (``os.open``'s mode applies to new files only). Raises ``OSError``."""
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except OSError:
        os.close(fd)
        raise
    return fd
