"""Versioned, idempotent DDL migrations of the warehouse schema.

Migrations are the package data files ``warehouse/migrations/NNNN_name.sql``, applied in
version order. Each may hold several ``;``-separated statements and uses the ``{db}``
placeholder for the (validated, back-quoted) database name. Every statement must be
idempotent on its own (``CREATE TABLE IF NOT EXISTS``, ``ADD COLUMN IF NOT EXISTS``, ...), so a
migration interrupted half-way is simply applied again.

A migration whose text holds the line ``-- requires: keys-in-one-partition``
(``warehouse.partition_keys.MARKER``) relies on every version of a key of ``refusal_events``
and ``assessments`` being stored in one partition: before applying any pending migration,
``migrate`` counts the keys that are not (``warehouse.partition_keys.spanning_keys``) and
refuses the whole run, applying nothing, when there are any, naming the fix.

The ``schema_migrations`` table records each applied version with the SHA-256 of its text;
an applied migration whose file has since changed is an error: add a new migration instead.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources

from clickhouse_connect.driver.exceptions import ClickHouseError

from warehouse.client import Client, WarehouseError, quote_identifier, split_sql
from warehouse.partition_keys import MARKER, spanning_keys

__all__ = [
    "Migration",
    "MigrationError",
    "applied_migrations",
    "check_keys_in_one_partition",
    "load_migrations",
    "migrate",
]

_FILE_RE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")

_MIGRATIONS_TABLE_DDL = """
CREATE TABLE IF NOT EXISTS {db}.schema_migrations
(
    version    String,
    name       String,
    checksum   String,
    applied_at DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(applied_at)
ORDER BY version
"""


class MigrationError(WarehouseError):
    """A migration is malformed, failed to apply, or was changed after being applied."""


@dataclass(frozen=True)
class Migration:
    """One migration: ``version`` ("0001"), ``name`` ("refusal_events") and its SQL text.

    ``checksum`` is the SHA-256 hex digest of the text with line endings normalised to LF.
    """

    version: str
    name: str
    sql: str

    @property
    def id(self) -> str:
        """``"<version>_<name>"``, e.g. ``"0001_refusal_events"``."""
        return f"{self.version}_{self.name}"

    @property
    def needs_keys_in_one_partition(self) -> bool:
        """Whether the migration relies on each key's versions sharing one partition (its
        text holds the line ``warehouse.partition_keys.MARKER``)."""
        return any(line.strip() == MARKER for line in self.sql.splitlines())

    @property
    def checksum(self) -> str:
        """SHA-256 hex digest of the SQL text (LF line endings)."""
        normalised = self.sql.replace("\r\n", "\n")
        return hashlib.sha256(normalised.encode("utf-8")).hexdigest()

    def statements(self, database: str) -> list[str]:
        """The migration's statements with ``{db}`` replaced by the quoted database name.

        Raises ``MigrationError`` if the text cannot be split (unterminated literal/comment).
        """
        try:
            parts = split_sql(self.sql)
        except ValueError as exc:
            raise MigrationError(f"migration {self.id}: {exc}") from exc
        db = quote_identifier(database)
        return [stmt.text.replace("{db}", db) for stmt in parts]


def load_migrations() -> list[Migration]:
    """The packaged migrations, sorted by version.

    Raises ``MigrationError`` for a ``.sql`` file not named ``NNNN_name.sql`` or a duplicate
    version.
    """
    folder = resources.files("warehouse").joinpath("migrations")
    found: dict[str, Migration] = {}
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE_RE.match(entry.name)
        if match is None:
            raise MigrationError(f"migration file {entry.name!r} is not named NNNN_name.sql")
        version = match["version"]
        if version in found:
            raise MigrationError(
                f"duplicate migration version {version}: {found[version].id}, {entry.name}"
            )
        found[version] = Migration(version, match["name"], entry.read_text(encoding="utf-8"))
    return [found[v] for v in sorted(found)]


def applied_migrations(client: Client, database: str) -> dict[str, str]:
    """Map of applied version -> recorded checksum (empty if nothing was applied yet).

    Raises ``WarehouseError`` if the table cannot be read.
    """
    try:
        exists = client.query(
            "SELECT count() FROM system.tables WHERE database = {db:String} "
            "AND name = 'schema_migrations'",
            parameters={"db": database},
        ).result_rows[0][0]
        if not exists:
            return {}
        rows = client.query(
            "SELECT version, checksum FROM {db:Identifier}.schema_migrations FINAL",
            parameters={"db": database},
        ).result_rows
    except ClickHouseError as exc:
        raise WarehouseError(f"cannot read schema_migrations in {database!r}: {exc}") from exc
    return {str(version): str(checksum) for version, checksum in rows}


def check_keys_in_one_partition(client: Client, database: str) -> None:
    """Refuse a store where a key of ``refusal_events`` or ``assessments`` has versions in
    two partitions (months). Raises ``MigrationError`` naming the tables, the counts and the
    fix (``python -m warehouse.partition_check DSN DATABASE --fold``), ``WarehouseError``
    when the count fails."""
    spanning = {t: n for t, n in spanning_keys(client, database).items() if n}
    if not spanning:
        return
    counts = ", ".join(f"{n} in {t}" for t, n in spanning.items())
    raise MigrationError(
        f"cannot migrate {database!r}: keys stored in more than one month ({counts}), written "
        "before the duplicate-log-id rule (migration 0011) or by hand; the pending migration "
        "reads each key's versions within its month and would return several of them. "
        "Nothing was applied. Fix: stop the writers, then keep each key's newest version "
        f"only with `python -m warehouse.partition_check <DSN> {database} --fold` "
        "(it removes the versions FINAL never returns) and migrate again."
    )


def migrate(
    client: Client, database: str, *, migrations: Sequence[Migration] | None = None
) -> list[str]:
    """Apply the pending migrations to ``database``, in version order.

    ``migrations`` defaults to the packaged ones (``load_migrations()``). Returns the ids
    (``"0001_refusal_events"``, ...) of the migrations applied by this call: empty when the
    schema is up to date, so re-running is a no-op. Versions recorded in the database but
    unknown here (a newer release migrated it) are left alone.

    Raises ``MigrationError`` when an applied migration's checksum differs from its current
    text, a statement fails (the failed migration is not recorded; fix and re-run), or a
    pending migration needs every key in one partition and some key is not (nothing is
    applied then: :func:`check_keys_in_one_partition`).
    """
    todo = list(load_migrations() if migrations is None else migrations)
    db = quote_identifier(database)
    try:
        client.command(_MIGRATIONS_TABLE_DDL.replace("{db}", db))
    except ClickHouseError as exc:
        raise MigrationError(f"cannot create {database}.schema_migrations: {exc}") from exc
    applied = applied_migrations(client, database)
    pending = [m for m in todo if m.version not in applied]
    if any(m.needs_keys_in_one_partition for m in pending):
        check_keys_in_one_partition(client, database)
    done: list[str] = []
    for migration in sorted(todo, key=lambda m: m.version):
        recorded = applied.get(migration.version)
        if recorded is not None:
            if recorded != migration.checksum:
                raise MigrationError(
                    f"migration {migration.id} was applied with checksum {recorded[:12]}... but "
                    f"its text now has {migration.checksum[:12]}...; applied migrations must "
                    "not change: add a new migration instead"
                )
            continue
        for statement in migration.statements(database):
            try:
                client.command(statement)
            except ClickHouseError as exc:
                raise MigrationError(f"migration {migration.id} failed: {exc}") from exc
        try:
            client.insert(
                "schema_migrations",
                [[migration.version, migration.name, migration.checksum, datetime.now(UTC)]],
                column_names=["version", "name", "checksum", "applied_at"],
                database=database,
            )
        except ClickHouseError as exc:
            raise MigrationError(f"cannot record migration {migration.id}: {exc}") from exc
        done.append(migration.id)
    return done
