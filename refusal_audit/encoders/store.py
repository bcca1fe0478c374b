"""The private on-disk cache of fetched encoders and its verification.

Layout: ``<encoder_dir>/<name>/{model.onnx, tokenizer.json, manifest.json}``, directories
0700 and files 0600. An encoder is installed when its manifest names the catalogue's pinned
jar and both files hash to the catalogue's pinned sha256; anything else is reported as not
installed or corrupt, with the command that (re)fetches it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from refusal_audit.encoders.catalog import (
    MANIFEST_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    EncoderError,
    EncoderSpec,
    fetch_command,
)


class EncoderNotInstalled(EncoderError):
    """The encoder was never fetched into this cache (or its manifest is gone)."""


class EncoderCorrupt(EncoderError):
    """The cached files are not the pinned ones (tampered, truncated or another version)."""


@dataclass(frozen=True)
class InstalledEncoder:
    """The verified bytes of an installed encoder (read once: what was hashed is what is
    loaded). ``directory`` is its cache folder."""

    directory: Path
    model_bytes: bytes
    tokenizer_json: str


def sha256_hex(data: bytes) -> str:
    """Lower-case hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def encoder_path(cache_dir: Path, spec: EncoderSpec) -> Path:
    """The folder of ``spec`` in the cache."""
    return cache_dir / spec.name


def read_installed(cache_dir: Path, spec: EncoderSpec) -> InstalledEncoder:
    """Read and verify an installed encoder; no network.

    Raises ``EncoderNotInstalled`` when its folder or manifest is missing and
    ``EncoderCorrupt`` when the manifest names another jar or a file is missing or does not
    hash to the catalogue's pin; both messages name the fetch command.
    """
    folder = encoder_path(cache_dir, spec)
    fix = f"run {fetch_command(spec.name)}"
    manifest_path = folder / MANIFEST_FILE
    if not manifest_path.is_file():
        raise EncoderNotInstalled(f"encoder {spec.name} is not installed in {cache_dir}: {fix}")
    try:
        manifest = orjson.loads(manifest_path.read_bytes())
        pinned = manifest["jar_sha256"]
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise EncoderCorrupt(
            f"encoder {spec.name}: unreadable {manifest_path} ({exc}); {fix}"
        ) from exc
    if pinned != spec.jar_sha256:
        raise EncoderCorrupt(
            f"encoder {spec.name} in {folder} was fetched from another jar "
            f"(sha256 {pinned}, pinned {spec.jar_sha256}); {fix}"
        )
    try:
        model = (folder / MODEL_FILE).read_bytes()
        tokenizer = (folder / TOKENIZER_FILE).read_bytes()
    except OSError as exc:
        raise EncoderCorrupt(f"encoder {spec.name}: {exc}; {fix}") from exc
    for file, data, pin in (
        (MODEL_FILE, model, spec.onnx_sha256),
        (TOKENIZER_FILE, tokenizer, spec.tokenizer_sha256),
    ):
        digest = sha256_hex(data)
        if digest != pin:
            raise EncoderCorrupt(
                f"encoder {spec.name}: {folder / file} has sha256 {digest}, pinned {pin} "
                f"(changed since it was fetched); {fix}"
            )
    try:
        tokenizer_json = tokenizer.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EncoderCorrupt(f"encoder {spec.name}: {TOKENIZER_FILE} is not UTF-8; {fix}") from exc
    return InstalledEncoder(folder, model, tokenizer_json)


def installed_state(cache_dir: Path, spec: EncoderSpec) -> str:
    """``fetched``, ``not fetched`` or ``corrupt: <reason>`` (for ``encoders list``)."""
    try:
        read_installed(cache_dir, spec)
    except EncoderNotInstalled:
        return "not fetched"
    except EncoderError as exc:
        return f"corrupt: {str(exc).split('; run')[0]}"
    return "fetched"


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` created with mode 0600 (fails if it exists)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
