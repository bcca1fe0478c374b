"""Random secrets kept in files of the data directory (mode 0600), made on first use."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from refusal_audit.config import ConfigError
from warehouse.private import make_private_dir


def random_secret_file(path: Path, what: str) -> str:
    """The secret in ``path``, or a new random one (``secrets.token_urlsafe(48)``: 64
    characters) written there with mode 0600 when the file does not exist (its folder made
    0700, ``warehouse.private.make_private_dir``). ``what`` names
    the secret in errors. Raises ``ConfigError`` when the file cannot be read or written."""
    try:
        if path.exists():
            return path.read_text().strip()
        make_private_dir(path.parent, None)  # the secret itself is 0600
        key = secrets.token_urlsafe(48)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key + "\n")
        return key
    except OSError as exc:
        raise ConfigError(f"cannot keep the {what} in {path}: {exc}") from exc
