"""The ClickHouse warehouse of refusal-audit (embedded chDB or a ClickHouse server).

``connect`` opens it, ``migrate`` brings its schema up to date, ``Warehouse`` writes and reads
the pipeline's records idempotently, ``run_named`` / ``run_readonly`` answer analysts.
"""

from warehouse.client import WarehouseError
from warehouse.connect import connect
from warehouse.migrate import Migration, MigrationError, load_migrations, migrate
from warehouse.queries import (
    NAMED_QUERIES,
    NamedQuery,
    QueryResult,
    ReadOnlyViolation,
    UnknownQueryError,
    UnsupportedFilterError,
    check_readonly,
    run_named,
    run_readonly,
)
from warehouse.store import Warehouse

__all__ = [
    "NAMED_QUERIES",
    "Migration",
    "MigrationError",
    "NamedQuery",
    "QueryResult",
    "ReadOnlyViolation",
    "UnknownQueryError",
    "UnsupportedFilterError",
    "Warehouse",
    "WarehouseError",
    "check_readonly",
    "connect",
    "load_migrations",
    "migrate",
    "run_named",
    "run_readonly",
]
