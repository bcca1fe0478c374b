"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of ../shared/data (real labelled refusal logs). Fails, never skips, when absent."""
    if not (SHARED_DATA / "xstest").is_dir():
        pytest.fail(f"shared data not found at {SHARED_DATA}; tests need ../shared/data")
    return SHARED_DATA
