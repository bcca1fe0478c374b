"""The stores that hold secrets are private: directories 0700, files 0600, and a warning
about an existing directory open to other users (issue 23, item 6; docs/warehouse.md)."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from refusal_audit.clarification.store import SqliteStore

REPO = Path(__file__).resolve().parents[1]
WARNING = "accessible to other users"


def open_entries(root: Path) -> list[str]:
    """Every directory or file under ``root`` (itself included) with a permission for group
    or others, as ``path mode`` strings."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if not path.is_symlink() and mode & 0o077:
            found.append(f"{path} {mode:04o}")
    return found


def audit(data_dir: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``refusal-audit audit examples/refusal_log.jsonl --out OUT`` in a process of its own
    (chDB opens one data path per process) with ``data_dir`` under a umask of 022."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFUSAL_AUDIT_")}
    env["REFUSAL_AUDIT_DATA_DIR"] = str(data_dir)
    script = (
        "import os, sys; os.umask(0o022); from refusal_audit.cli import app; "
        "sys.argv = ['refusal-audit', *sys.argv[1:]]; app()"
    )
    command = [sys.executable, "-c", script, "audit", "examples/refusal_log.jsonl", "--out"]
    return subprocess.run(
        [*command, str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def restored_umask() -> Iterator[None]:
    """The test may make this process's umask private: put the old one back after it."""
    before = os.umask(0o022)
    os.umask(before)
    yield
    os.umask(before)


def test_a_new_warehouse_and_its_data_dir_are_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
    done = audit(data_dir, tmp_path / "result.json")
    assert done.returncode == 0, done.stderr
    assert (data_dir / "chdb").is_dir() and any((data_dir / "chdb").rglob("*.bin"))
    assert open_entries(data_dir) == []
    # the process's later files are private too (the owner's umask), the --out result too
    assert stat.S_IMODE((tmp_path / "result.json").stat().st_mode) == 0o600
    assert WARNING not in done.stderr


def test_an_existing_open_warehouse_dir_is_warned_about_once(tmp_path: Path) -> None:
    store = tmp_path / "state" / "chdb"
    store.mkdir(parents=True)
    store.chmod(0o755)
    done = audit(tmp_path / "state", tmp_path / "result.json")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(WARNING) == 1, done.stderr
    assert str(store) in done.stderr.replace("\n", "")
    assert stat.S_IMODE(store.stat().st_mode) == 0o755  # the operator's mode is kept
    # what the process wrote inside is private all the same
    assert [e for e in open_entries(store) if not e.startswith(f"{store} ")] == []


def test_the_clarification_store_is_private(
    tmp_path: Path, restored_umask: None, caplog: pytest.LogCaptureFixture
) -> None:
    os.umask(0o022)
    folder = tmp_path / "data" / "clarify"
    store = SqliteStore(folder / "clarify.sqlite3")
    store.close()
    assert (folder / "clarify.sqlite3").is_file()
    assert open_entries(tmp_path / "data") == []
    assert WARNING not in caplog.text


def test_an_open_clarification_store_is_warned_about_once(
    tmp_path: Path, restored_umask: None, caplog: pytest.LogCaptureFixture
) -> None:
    os.umask(0o022)
    path = tmp_path / "shared" / "clarify.sqlite3"
    SqliteStore(path).close()  # private from the start: nothing to say
    assert WARNING not in caplog.text
    path.chmod(0o644)  # as stores made before this rule were
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            SqliteStore(path).close()
    warnings = [r for r in caplog.records if WARNING in r.getMessage()]
    assert len(warnings) == 1 and str(path.resolve()) in warnings[0].getMessage()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # the operator's mode is kept
