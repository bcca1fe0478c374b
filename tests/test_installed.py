"""Start-up as a user who installed the package: from an empty directory, nothing of the
repository on the path, no data directory yet (issue 9, items 1 and 2).

The package is built into a wheel and installed with pip into a directory of its own, which
goes first on ``PYTHONPATH``; every command runs in a fresh empty directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from streaming import Deployment, free_port, read_topic

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the package installed from a freshly built wheel."""
    wheels = tmp_path_factory.mktemp("wheel")
    # from a copy without build outputs: setuptools reuses a stale build/ directory
    source = tmp_path_factory.mktemp("source") / "refusal-audit"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", "out", ".refusal-audit",
        ".mypy_cache", ".ruff_cache", ".pytest_cache", "lib", "data",
    ))  # fmt: skip
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("refusal_audit-*.whl")
    target = tmp_path_factory.mktemp("site")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
         str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    return target


def user_env(installed: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFUSAL_AUDIT_")}
    env["PYTHONPATH"] = str(installed)
    env.update(settings)
    return env


def run_cli(
    installed: Path, cwd: Path, *args: str, **settings: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "refusal_audit.cli", *args],
        cwd=cwd,
        env=user_env(installed, **settings),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture
def empty_dir(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "somewhere"
    where.mkdir()
    yield where


def test_the_installed_package_is_the_one_that_runs(installed: Path, empty_dir: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import refusal_audit, warehouse; print(refusal_audit.__file__)"],
        cwd=empty_dir,
        env=user_env(installed),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.startswith(str(installed)), out


def test_audit_from_any_directory_uses_the_shipped_example_bundle(
    installed: Path, empty_dir: Path
) -> None:
    log = empty_dir / "log.jsonl"
    log.write_bytes(b"\n".join(EXAMPLE_LOG.read_bytes().splitlines()[:30]) + b"\n")
    result = run_cli(installed, empty_dir, "audit", "log.jsonl")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "example bundle shipped with refusal-audit" in result.stderr
    assert (empty_dir / ".refusal-audit" / "chdb").is_dir()  # data_dir made under the CWD
    config = orjson.loads(run_cli(installed, empty_dir, "config", "show").stdout)
    assert config["policy_bundles"]["default"]["taxonomy"].startswith(str(installed))


def test_a_users_relative_bundle_paths_still_resolve_against_the_cwd(
    installed: Path, empty_dir: Path
) -> None:
    policies = empty_dir / "policies"
    policies.mkdir()
    for name in ("allowed_use_policy.md", "product_safety_policy.md", "refusal_taxonomy.md"):
        text = (REPO / "refusal_audit" / "example_policies" / name).read_text(encoding="utf-8")
        (policies / name).write_text(text, encoding="utf-8")
    (empty_dir / "refusal-audit.toml").write_text(
        "[policy_bundles.team]\n"
        'allowed_use = "policies/allowed_use_policy.md"\n'
        'product_safety = "policies/product_safety_policy.md"\n'
        'taxonomy = "policies/refusal_taxonomy.md"\n',
        encoding="utf-8",
    )
    event = {
        "log_id": "t-1",
        "event_time": "2026-11-20T09:00:00Z",
        "request": "How do I kill a zombie process?",
        "response": "I can't help with that.",
        "model": "m",
        "policy_bundle": "team",
    }
    (empty_dir / "log.jsonl").write_bytes(orjson.dumps(event) + b"\n")
    result = run_cli(installed, empty_dir, "audit", "log.jsonl")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "example bundle" not in result.stderr
    moved = empty_dir / "elsewhere"
    moved.mkdir()
    (moved / "refusal-audit.toml").write_bytes((empty_dir / "refusal-audit.toml").read_bytes())
    missing = run_cli(installed, moved, "audit", str(empty_dir / "log.jsonl"))
    assert missing.returncode == 2 and "policies/allowed_use_policy.md" in missing.stderr


@pytest.mark.kafka
def test_the_worker_starts_without_its_data_directory(
    installed: Path, empty_dir: Path, kafka_bootstrap: str, unique_topic_prefix: str
) -> None:
    dep = Deployment(kafka_bootstrap, unique_topic_prefix, empty_dir)
    dep.cli("topics", "create")
    dep.cli("produce", str(EXAMPLE_LOG))
    store = empty_dir / "not" / "yet" / "there" / "wh"
    env = {k: v for k, v in dep.env().items() if k != "REFUSAL_AUDIT_DATA_DIR"}
    env.update(PYTHONPATH=str(installed), REFUSAL_AUDIT_WAREHOUSE_DSN=f"chdb://{store}")
    env["REFUSAL_AUDIT_WORKER_WEB_PORT"] = str(free_port())
    cwd = empty_dir / "run"
    cwd.mkdir()
    log = empty_dir / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "refusal_audit.cli", "worker", "--outputs", "warehouse"],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        dep.log_paths[worker.pid] = log
        dep.wait_drained(worker, timeout=300)
    finally:
        worker.terminate()
        worker.wait(60)
    assert worker.returncode == 0, log.read_text(errors="replace")[-3000:]
    assert (cwd / ".refusal-audit" / "faust").is_dir() and store.is_dir()
    assessments = list(read_topic(kafka_bootstrap, dep.topic("assessments"), idle=2.0))
    assert assessments


def test_a_data_directory_that_cannot_be_made_stops_the_worker_clearly(
    installed: Path, empty_dir: Path
) -> None:
    blocker = empty_dir / "a-file"
    blocker.write_text("not a directory")
    result = run_cli(
        installed,
        empty_dir,
        "worker",
        "--outputs",
        "warehouse",
        REFUSAL_AUDIT_DATA_DIR=str(blocker / "state"),
        REFUSAL_AUDIT_KAFKA_BOOTSTRAP_SERVERS=f"127.0.0.1:{free_port()}",
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "cannot create the worker's data directory" in result.stderr
    assert str(blocker / "state") in result.stderr


def test_the_installed_package_loads_the_fetched_encoders_from_any_directory(
    installed: Path, empty_dir: Path
) -> None:
    """The wheel carries ``refusal_audit.encoders``; with ``encoder_dir`` pointing at the
    cache `make install` filled, an installed package lists and loads the int8 models."""
    cache = str(Path(__file__).resolve().parents[1] / ".refusal-audit" / "encoders")
    listing = run_cli(installed, empty_dir, "encoders", "list", REFUSAL_AUDIT_ENCODER_DIR=cache)
    assert listing.returncode == 0, listing.stderr[-3000:]
    rows = [line for line in listing.stdout.splitlines() if "-q " in line]
    assert len(rows) == 2 and all("│ fetched" in row for row in rows), listing.stdout
    code = (
        "import refusal_audit.encoders.runtime as runtime\n"
        "from refusal_audit.config import load_settings\n"
        "e = runtime.OnnxEncoder.load('all-minilm-l6-v2-q', load_settings())\n"
        "print(runtime.__file__)\n"
        "print(e.encode(['a refusal', 'an answer']).shape)\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code],
        cwd=empty_dir,
        env=user_env(installed, REFUSAL_AUDIT_ENCODER_DIR=cache),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    where, shape = loaded.stdout.splitlines()
    assert where.startswith(str(installed)), where  # not the development tree's copy
    assert shape == "(2, 384)"
