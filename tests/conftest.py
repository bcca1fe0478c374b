"""Shared test fixtures."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

pytest_plugins = ["kafka_fixture", "llm_fixture"]

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

    from schemas.policy import PolicyBundle
    from warehouse import Warehouse

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of ../shared/data (real labelled refusal logs). Fails, never skips, when absent."""
    if not (SHARED_DATA / "xstest").is_dir():
        pytest.fail(f"shared data not found at {SHARED_DATA}; tests need ../shared/data")
    return SHARED_DATA


@pytest.fixture(scope="session")
def example_bundle() -> PolicyBundle:
    """The example policy bundle under examples/policies/, parsed (name ``wren``)."""
    from processors.policy import parse_bundle

    policies = REPO_ROOT / "refusal_audit" / "example_policies"
    return parse_bundle(
        "wren",
        *(
            (policies / name).read_text(encoding="utf-8")
            for name in ("allowed_use_policy.md", "product_safety_policy.md", "refusal_taxonomy.md")
        ),
    )


@pytest.fixture(scope="session")
def chdb_dsn(tmp_path_factory: pytest.TempPathFactory) -> str:
    """DSN of the one embedded chDB store of this test session (chDB allows one path per
    process, so every test that needs a warehouse must use this one)."""
    return f"chdb://{tmp_path_factory.mktemp('chdb').resolve()}"


@pytest.fixture
def warehouse_db(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    """A client on a fresh, migrated database with a unique name: ``(client, database)``.

    The database is dropped afterwards.
    """
    from warehouse import connect, migrate

    database = f"t_{uuid.uuid4().hex[:16]}"
    client = connect(chdb_dsn, database)
    migrate(client, database)
    try:
        yield client, database
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{database}`")
        client.close()


@pytest.fixture
def warehouse(warehouse_db: tuple[Client, str]) -> Warehouse:
    """A migrated ``warehouse.Warehouse`` on a fresh database (3 insert attempts, no backoff)."""
    from warehouse import Warehouse

    client, database = warehouse_db
    return Warehouse(client, database, retries=3, retry_wait=0.0)


@pytest.fixture
def cli_env(chdb_dsn: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment for in-process CLI runs: no inherited REFUSAL_AUDIT_* settings, the
    repository as working directory, and a fresh database in the session's chDB store."""
    import os

    for key in list(os.environ):
        if key.startswith("REFUSAL_AUDIT_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(REPO_ROOT)
    return {
        "REFUSAL_AUDIT_WAREHOUSE_DSN": chdb_dsn,
        "REFUSAL_AUDIT_WAREHOUSE_DATABASE": f"cli_{uuid.uuid4().hex[:12]}",
    }


#: Test modules with the longest tests, longest first (``--durations`` of the fresh-clone CI
#: runs of 2026-12-05/06). They are collected first so pytest-xdist starts them early and the
#: parallel pass ends on short tests (longest-processing-time-first): collected in file
#: order, the 226 s drift-alert test ran last and one worker idled while it finished.
SLOW_MODULES_FIRST = (
    "test_local_llm_paths",  # one xdist group, about 400 s
    "test_worker_alerts",
    "test_review_daily",
    "test_sink_duplicates",
    "test_gap_daily",
    "test_daily_aggregates",
    "test_gap_lookups",
    "test_scanning",
    "test_readme_calibration",
    "test_grafana_daily",
    "test_disagreement_listing",
    "test_calibrate_consume_faults",
    "test_sink",
    "test_review_beside_worker",
    "test_alerting",
    "test_worker",
)


def _slow_first_rank(item: pytest.Item) -> int:
    """The module's place in :data:`SLOW_MODULES_FIRST` (after all of them if absent)."""
    stem = Path(str(item.fspath)).stem
    return SLOW_MODULES_FIRST.index(stem) if stem in SLOW_MODULES_FIRST else len(
        SLOW_MODULES_FIRST
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that stops or restarts the shared broker (``broker_control``) as
    ``serial``: ``make unit`` runs the others in parallel (pytest-xdist), then these alone.
    Then order the modules of :data:`SLOW_MODULES_FIRST` first (a stable sort: each module's
    tests stay together and in their order, so module-scoped fixtures are set up once)."""
    for item in items:
        if "broker_control" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.serial)
    items.sort(key=_slow_first_rank)
