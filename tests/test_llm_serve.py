"""``refusal-audit llm serve``: llama.cpp's server in-process (issue 24, item 1).

The model-file and option checks run in-process (CliRunner; nothing loads). The served model
is the session's ``local_llm`` server (tests/llm_fixture.py); the stop test starts one server
of its own, the busy-port and load-failure tests fail before or at the load.
"""

from __future__ import annotations

import socket
import struct
import sys
from pathlib import Path

import httpx
import openai
import pytest
from llm_fixture import LocalLLM, ServeProcess, require_local_llm, write_key_file
from typer.testing import CliRunner

from refusal_audit.cli import app
from refusal_audit.llm import serve
from refusal_audit.llm.serve import (
    ModelFileError,
    OptionsError,
    ServeOptions,
    gguf_context_length,
    resolve_model,
)

runner = CliRunner()


def llm_serve(*args: str) -> tuple[int, str]:
    """Run ``llm serve ARGS`` in-process: (exit code, stdout + stderr)."""
    result = runner.invoke(app, ["llm", "serve", *args])
    return result.exit_code, result.output


def test_a_missing_model_file_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.gguf"
    code, output = llm_serve(str(missing))
    assert code == 2
    assert "model file not found" in output and "nowhere.gguf" in output


def test_a_file_that_is_not_gguf_is_refused_before_loading(tmp_path: Path) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 a zip, not a model" * 4)
    code, output = llm_serve(str(fake))
    assert code == 2
    assert "model.gguf" in output and "not a GGUF model file" in output
    folder = tmp_path / "dir.gguf"
    folder.mkdir()
    code, output = llm_serve(str(folder))
    assert code == 2 and "not a file" in output


def test_the_shortcut_is_checked_against_its_pinned_sha256(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require_local_llm()
    assert resolve_model("smollm2-135m").name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    pinned = serve.PACKAGED_MODELS["smollm2-135m"]
    monkeypatch.setitem(
        serve.PACKAGED_MODELS, "smollm2-135m", serve.PackagedModel(
            pinned.package, pinned.filename, "0" * 64, pinned.install
        ),
    )  # fmt: skip
    code, output = llm_serve("smollm2-135m", "--port", "0")
    assert code == 2
    assert "sha256" in output and pinned.sha256 in output and "0" * 64 in output


def test_a_shortcut_whose_package_is_missing_names_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(
        serve.PACKAGED_MODELS, "tiny", serve.PackagedModel(
            "no_such_package_here", "x.gguf", "0" * 64, "pip install no-such-package"
        ),
    )  # fmt: skip
    with pytest.raises(ModelFileError, match=r"not installed.*pip install no-such-package"):
        resolve_model("tiny")


def test_a_non_loopback_host_needs_an_api_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(serve.API_KEY_ENV, raising=False)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    code, output = llm_serve(str(model), "--host", "0.0.0.0")
    assert code == 2 and "0.0.0.0" in output and "API key" in output
    options = ServeOptions(model=model, alias="m", host="0.0.0.0")
    with pytest.raises(OptionsError, match="not a loopback address"):
        options.check()
    ServeOptions(model=model, alias="m", host="0.0.0.0", api_key="k").check()
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        ServeOptions(model=model, alias="m", host=host).check()


def test_the_api_key_never_comes_from_argv_and_an_empty_key_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "--api-key " not in runner.invoke(app, ["llm", "serve", "--help"]).output
    empty = tmp_path / "key"
    empty.write_text("\n")
    code, output = llm_serve("model.gguf", "--api-key-file", str(empty))
    assert code == 2 and "is empty" in output
    monkeypatch.setenv(serve.API_KEY_ENV, "  ")
    with pytest.raises(OptionsError, match="set but empty"):
        serve.read_api_key(None)
    monkeypatch.setenv(serve.API_KEY_ENV, "s3cret-key")
    assert serve.read_api_key(None) == ("s3cret-key", f"${serve.API_KEY_ENV}")


def test_a_key_no_http_header_can_carry_is_refused_without_echoing_it(tmp_path: Path) -> None:
    """A two-line key file kept its inner newline: httpx then refused the header and the
    readiness error printed ``Bearer <key>`` to stderr."""
    two_lines = tmp_path / "key"
    two_lines.write_text("first-half-of-key\nsecond-half-of-key\n")
    code, output = llm_serve("model.gguf", "--api-key-file", str(two_lines))
    assert code == 2 and "whitespace, control or non-ASCII characters" in output
    assert "first-half" not in output and "second-half" not in output
    pasted = tmp_path / "pasted"  # an em dash pasted from a document: not ASCII
    pasted.write_text("SECRET\u2014unicode-abcdef\n", encoding="utf-8")
    code, output = llm_serve("model.gguf", "--api-key-file", str(pasted))
    assert code == 2 and "non-ASCII" in output
    assert "SECRET" not in output and "unicode-abcdef" not in output and "\u2014" not in output
    short = tmp_path / "short"
    short.write_text("abc")
    code, output = llm_serve("model.gguf", "--api-key-file", str(short))
    assert code == 2 and "shorter than" in output and "abc" not in output


def test_a_key_file_others_may_read_is_warned_about(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("s3cret-key-0123\n")
    key.chmod(0o644)
    assert "chmod 600" in (serve.key_file_warning(key) or "")
    assert "s3cret" not in (serve.key_file_warning(key) or "")
    key.chmod(0o600)
    assert serve.key_file_warning(key) is None
    assert serve.key_file_warning(None) is None
    assert serve.key_file_warning(tmp_path / "missing") is None


def test_a_near_miss_of_a_shortcut_suggests_it() -> None:
    code, output = llm_serve("smollm2-135")
    assert code == 2 and "not found" in output and "did you mean" in output
    assert "smollm2-135m" in output


def test_the_trained_context_is_read_from_the_gguf_header(tmp_path: Path) -> None:
    require_local_llm()
    assert gguf_context_length(resolve_model("smollm2-135m")) == 8192

    def kv_string(key: str, value: str) -> bytes:
        k, v = key.encode(), value.encode()
        return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", 8, len(v)) + v

    def kv_u32(key: str, value: int) -> bytes:
        k = key.encode()
        return struct.pack("<Q", len(k)) + k + struct.pack("<II", 4, value)

    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 3)
    path = tmp_path / "tiny.gguf"
    path.write_bytes(
        header + kv_string("general.architecture", "llama") + kv_u32("other.context_length", 1)
        + kv_u32("llama.context_length", 4096)
    )  # fmt: skip
    assert gguf_context_length(path) == 4096
    path.write_bytes(header + kv_string("general.architecture", "llama")[:-2])
    with pytest.raises(ModelFileError, match="truncated"):
        gguf_context_length(path)
    # crafted headers: each is a ModelFileError (exit 2), never a traceback
    huge_string = struct.pack("<Q", 1) + b"k" + struct.pack("<IQ", 8, 2**63 + 5)
    deep = struct.pack("<Q", 1) + b"k" + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 5000
    for body in (huge_string, deep):
        path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + body + bytes(64))
        with pytest.raises(ModelFileError, match="malformed GGUF header"):
            gguf_context_length(path)
    path.write_bytes(
        header + kv_string("general.architecture", "llama") + kv_u32("other.context_length", 1)
        + struct.pack("<Q", 20) + b"llama.context_length" + struct.pack("<Ii", 5, -5)
    )  # fmt: skip
    assert gguf_context_length(path) is None  # a negative context is no trained context


def test_llama_cpp_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    require_local_llm()
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # import xllamacpp -> ImportError
    code, output = llm_serve("smollm2-135m", "--port", "0")
    assert code == 1
    assert "pip install 'refusal-audit[local-llm]'" in output


def test_a_model_llama_cpp_cannot_load_is_a_clear_error(tmp_path: Path) -> None:
    require_local_llm()
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 0) + bytes(64))
    code, output = llm_serve(str(broken), "--port", "0", "--threads", "1")
    assert code == 1
    assert "could not start a server for" in output and "broken.gguf" in output


def test_a_busy_port_is_a_clear_error() -> None:
    require_local_llm()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code, output = llm_serve("smollm2-135m", "--port", str(port))
    assert code == 1
    assert f"cannot listen on 127.0.0.1:{port}" in output and "in use" in output


@pytest.mark.local_llm
@pytest.mark.xdist_group("local_llm")
def test_the_served_model_answers_the_openai_sdk(local_llm: LocalLLM) -> None:
    assert local_llm.base_url.startswith("http://127.0.0.1:")
    assert local_llm.base_url.endswith("/v1")
    # 16,384 asked, 8,192 trained: the slot is stretched (YaRN), not capped by llama.cpp
    assert local_llm.context_size == 16384
    client = openai.OpenAI(base_url=local_llm.base_url, api_key=local_llm.api_key, timeout=60)
    assert local_llm.model in [m.id for m in client.models.list()]
    answer = client.chat.completions.create(
        model=local_llm.model,
        messages=[{"role": "user", "content": "Say hi."}],
        max_tokens=8,
        temperature=0,
    )
    assert answer.choices[0].message.content is not None
    assert answer.usage is not None and 0 < answer.usage.completion_tokens <= 8


@pytest.mark.local_llm
@pytest.mark.xdist_group("local_llm")
def test_requests_without_the_key_get_401(local_llm: LocalLLM) -> None:
    root = local_llm.base_url.removesuffix("/v1")
    assert httpx.get(f"{root}/health", timeout=10).status_code == 200  # public, no data
    body = {"model": local_llm.model, "messages": [{"role": "user", "content": "hi"}]}
    for headers in ({}, {"Authorization": "Bearer wrong-key"}):
        assert httpx.get(f"{local_llm.base_url}/models", headers=headers).status_code == 401
        response = httpx.post(f"{local_llm.base_url}/chat/completions", json=body, headers=headers)
        assert response.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=local_llm.base_url, api_key="wrong-key").models.list()
    # no web page can read the answers: no CORS origin is allowed
    ok = httpx.get(
        f"{local_llm.base_url}/models",
        headers={"Authorization": f"Bearer {local_llm.api_key}", "Origin": "https://evil.example"},
    )
    assert ok.status_code == 200
    assert ok.headers.get("access-control-allow-origin", "") in ("", "null")


def test_sigterm_stops_the_server_with_exit_0_and_frees_the_port(tmp_path: Path) -> None:
    require_local_llm()
    key_file, key = write_key_file(tmp_path)
    server = ServeProcess(
        ["smollm2-135m", "--port", "0", "--threads", "1", "--ctx-size", "2048",
         "--alias", "tiny-test", "--api-key-file", str(key_file)],
        tmp_path / "serve.log",
    )  # fmt: skip
    try:
        exports = server.wait_ready()
        assert exports["REFUSAL_AUDIT_OPENAI_MODEL"] == "tiny-test"
        assert exports["REFUSAL_AUDIT_OPENAI_API_KEY_FILE"] == str(key_file)
        assert any(line == f"base URL: {exports['REFUSAL_AUDIT_OPENAI_BASE_URL']}"
                   for line in server.lines)  # fmt: skip
        assert all(key not in line for line in server.lines)
        port = int(exports["REFUSAL_AUDIT_OPENAI_BASE_URL"].rsplit(":", 1)[1].split("/")[0])
        with pytest.raises(OSError):  # served while running
            socket.create_server(("127.0.0.1", port)).close()
    finally:
        code = server.stop()
    assert code == 0, server.stderr()
    assert "stopped" in server.stderr() and key not in server.stderr()
    socket.create_server(("127.0.0.1", port)).close()  # released


def test_compose_serves_the_model_to_the_workers_only_with_the_profile() -> None:
    import yaml

    deploy = Path(__file__).resolve().parents[1] / "deploy"
    services = yaml.safe_load((deploy / "docker-compose.yml").read_text())["services"]
    llm, worker = services["llm"], services["worker"]
    assert llm["profiles"] == ["local-llm"]
    assert llm["image"].startswith("ghcr.io/ggml-org/llama.cpp:server")
    assert "ports" not in llm  # the compose network only
    assert {"--no-webui", "--no-slots"} <= set(llm["command"])  # no UI, no prompts in /slots
    assert all(v.endswith(":ro") for v in llm["volumes"])
    args = llm["command"]
    model_dir = llm["volumes"][0].split(":")[-2]
    assert args[args.index("--model") + 1].startswith(model_dir + "/")
    port = args[args.index("--port") + 1]
    env = worker["environment"]
    assert env["REFUSAL_AUDIT_OPENAI_BASE_URL"] == f"http://llm:{port}/v1"
    assert env["REFUSAL_AUDIT_ENGINE"] == "${LLM_WORKER_ENGINE:-local}"  # local without it
    assert env["REFUSAL_AUDIT_OPENAI_MODEL"].startswith("${LLM_MODEL_ALIAS")
    assert args[args.index("--alias") + 1].startswith("${LLM_MODEL_ALIAS")
    assert worker["depends_on"]["llm"] == {"condition": "service_healthy", "required": False}
    settings = dict(
        line.split("=", 1)
        for line in (deploy / "local-llm.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert settings["COMPOSE_PROFILES"] == "local-llm"
    assert settings["LLM_WORKER_ENGINE"] == "openai"
    per_slot = int(settings["LLM_CTX_SIZE"]) // int(settings["LLM_PARALLEL"])
    assert int(settings["LLM_CTX_PER_SLOT"]) == per_slot >= 16384


def test_make_unit_keeps_the_local_llm_tests_in_one_process(tmp_path: Path) -> None:
    """``pytest -n 2 --dist loadgroup`` (make unit) runs an xdist_group in one worker: the
    tests on the session's llama.cpp server share one server. Fails with pytest 9.2 and
    pytest-xdist 3.8 (pytest-xdist issue #1386), hence the pin in pyproject.toml."""
    import re
    import subprocess

    (tmp_path / "test_grouped.py").write_text(
        "import pytest\n"
        + "".join(
            f'@pytest.mark.xdist_group("local_llm")\ndef test_grouped_{i}(): pass\n'
            f"def test_free_{i}(): pass\n"
            for i in range(4)
        )
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadgroup", "-v", "test_grouped.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    workers = set(re.findall(r"\[(gw\d)\] .*PASSED .*test_grouped_\d", run.stdout))
    assert len(workers) == 1, run.stdout
