"""What a newcomer reads as errors but is not: none of it is printed any more.

The owner channel's own listening probe ("401 Unauthorized" in the access log), the
example-bundle notice on every command, progress counters ending in "/?" when the total is
known, ``serve --help`` naming settings instead of the default address, and a "listening"
line printed before the port turned out to be taken.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from refusal_audit import bundles
from refusal_audit.audit.batch import BatchOptions, file_source
from refusal_audit.audit.settings import example_bundle_paths
from refusal_audit.cli import app
from refusal_audit.config import Settings

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"
CLI = Path(sys.executable).parent / "refusal-audit"
runner = CliRunner()


def _env(data_dir: Path) -> dict[str, str]:
    """The process environment without REFUSAL_AUDIT_* settings, with its own data dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFUSAL_AUDIT_")}
    env["REFUSAL_AUDIT_DATA_DIR"] = str(data_dir)
    env["COLUMNS"] = "200"
    return env


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another socket listens on."""
    with socket.create_server(("127.0.0.1", 0)) as holder:
        yield int(holder.getsockname()[1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", [["review", "serve"], ["clarify", "serve"]])
def test_the_owner_channel_s_probe_leaves_no_401_line(tmp_path: Path, command: list[str]) -> None:
    owner = tmp_path / "chdb.owner.json"
    serve = subprocess.Popen(
        [str(CLI), *command, "--port", str(_free_port())],
        env=_env(tmp_path), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not owner.exists() and time.monotonic() < deadline and serve.poll() is None:
            time.sleep(0.2)
        assert owner.exists(), "the store was never announced"
    finally:
        serve.terminate()
        output, _ = serve.communicate(timeout=60)
    assert "Application startup complete" in output, output
    # an access line reads '... "GET /path HTTP/1.1" 401 Unauthorized'; a process id may hold "401"
    assert not re.search(r'HTTP/[0-9.]+" 401\b', output) and "Unauthorized" not in output, output
    assert "httpx" not in output, output  # no line per owner-channel request


@pytest.mark.parametrize(
    ("command", "listening"),
    [(["review", "serve"], "review app on"), (["clarify", "serve"], "clarification service on")],
)
def test_a_taken_port_is_one_error_and_no_listening_line(
    tmp_path: Path, taken_port: int, command: list[str], listening: str
) -> None:
    done = subprocess.run(
        [str(CLI), *command, "--port", str(taken_port)],
        env=_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert f"cannot listen on 127.0.0.1:{taken_port}" in output, output
    assert listening not in output and "Traceback" not in output, output


@pytest.mark.parametrize("command", ["review", "clarify"])
def test_serve_help_shows_the_default_address(command: str) -> None:
    result = runner.invoke(app, [command, "serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    host = Settings.model_fields[f"{command}_web_host"].default
    port = Settings.model_fields[f"{command}_web_port"].default
    assert f"(default: {host}, setting {command}_web_host)" in result.output
    assert f"(default: {port}, setting {command}_web_port)" in result.output


def test_the_example_bundle_is_noticed_once_per_data_dir_and_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    configured = {"default": example_bundle_paths()}
    caplog.set_level(logging.DEBUG, logger="refusal_audit.bundles")

    def warnings() -> int:
        n = sum(r.levelno >= logging.WARNING for r in caplog.records)
        caplog.clear()
        return n

    monkeypatch.setattr(bundles, "_noticed", set())  # a new process
    bundles.load_bundles(configured, tmp_path)
    bundles.load_bundles(configured, tmp_path)  # e.g. `calibrate run` loads them twice
    assert warnings() == 1
    monkeypatch.setattr(bundles, "_noticed", set())  # the next command, same data dir
    bundles.load_bundles(configured, tmp_path)
    assert warnings() == 0
    monkeypatch.setattr(bundles, "_noticed", set())  # another data dir: told again
    other = tmp_path / "other"
    other.mkdir()
    bundles.load_bundles(configured, other)
    assert warnings() == 1


def test_the_audit_counter_shows_the_known_total(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    log.write_bytes(b"\n".join(EXAMPLE_LOG.read_bytes().splitlines()[:30]) + b"\n\n")
    env = cli_env | {"REFUSAL_AUDIT_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "200"}
    result = runner.invoke(app, ["audit", str(log)], env=env)
    assert result.exit_code == 0, result.output
    assert "30/30" in result.output and "/?" not in result.output, result.output


def test_a_csv_total_is_not_guessed_from_its_lines(tmp_path: Path) -> None:
    from refusal_audit.audit.batch import record_total

    csv = tmp_path / "x.csv"
    csv.write_text('prompt,type,final_label\n"a\nmulti-line prompt",safe,1_full_refusal\n')
    options = BatchOptions.build("xstest-csv", None, None, None, None)
    sources = [file_source(csv, options, Settings())]
    assert record_total([csv], sources) is None


@pytest.mark.parametrize(
    "message",
    [
        "GETPID [rdkafka#producer-2] [thrd:main]: Failed to acquire transactional PID from "
        "broker TxnCoordinator/1: Broker: Not coordinator: retrying",
        "GETPID [rdkafka#producer-2] [thrd:main]: Failed to acquire idempotence PID from "
        "broker 127.0.0.1:19592/1: Broker: Coordinator load in progress: retrying",
    ],
)
def test_librdkafka_s_start_up_retries_are_not_warnings(
    message: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The two lines a worker and `produce` printed against a fresh broker (seen live)."""
    from streams.producer import KAFKA_LOGGER

    other = f"FAIL [rdkafka#producer-{len(message)}]: Connect to ipv4#127.0.0.1:9 failed"
    # at the services' INFO level the retry is not shown at all
    caplog.set_level(logging.INFO, logger=KAFKA_LOGGER.name)
    KAFKA_LOGGER.warning(message)
    KAFKA_LOGGER.warning(other)  # a real problem stays a warning
    assert [(r.levelname, r.getMessage()[:4]) for r in caplog.records] == [("WARNING", "FAIL")]
    # with DEBUG (-v) it shows, as DEBUG
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger=KAFKA_LOGGER.name)
    KAFKA_LOGGER.warning(message)
    KAFKA_LOGGER.warning(other.replace("127.0.0.1:9", "127.0.0.1:10"))  # not a repeat
    levels = [(r.levelname, r.getMessage()[:4]) for r in caplog.records]
    assert levels == [("DEBUG", "GETP"), ("WARNING", "FAIL")]


def test_the_help_groups_the_commands_by_task_and_says_where_to_start() -> None:
    """`refusal-audit --help` names a starting point and groups every command under a task
    panel (issue 26): no command is left in typer's default "Commands" panel."""
    from typer.testing import CliRunner

    from refusal_audit.cli import app

    text = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    assert "Start here" in text and "Audit log files (start here)" in text
    for panel in ("Streaming: Kafka workers", "Human review and alerts",
                  "Clarification and refusal-style calibration", "Models, encoders"):  # fmt: skip
        assert panel in text, panel
    assert "─ Commands ─" not in text
