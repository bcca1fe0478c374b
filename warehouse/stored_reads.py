"""The warehouse's reads of stored rows (``Warehouse``'s read half): counts, the current
assessments, what a re-run reports as already audited, the newest batches, dead letters and
alerts. A mixin of :class:`warehouse.store.Warehouse`, which provides ``client`` (a
clickhouse-connect client, or the owner channel's) and ``database``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clickhouse_connect.driver.exceptions import ClickHouseError

from schemas import StoredAssessment
from schemas.audit import PolicyGapFlag
from warehouse.client import Client, WarehouseError
from warehouse.rows import ASSESSMENT_COLUMNS, gap_flag


class StoredReads:
    """Reads of the stored rows, each raising ``WarehouseError`` when the query fails."""

    client: Client
    database: str

    # ---- reads ----------------------------------------------------------------------

    def _select(
        self,
        sql: str,
        parameters: dict[str, Any] | None = None,
        column_formats: dict[str, str | dict[str, str]] | None = None,
        *,
        settings: dict[str, Any] | None = None,
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        params = {"db": self.database, **(parameters or {})}
        try:
            result = self.client.query(sql, parameters=params, column_formats=column_formats,
                                       settings=settings)  # fmt: skip
        except ClickHouseError as exc:
            raise WarehouseError(f"query on {self.database} failed: {exc}") from exc
        return list(result.column_names), [tuple(row) for row in result.result_rows]

    def _dicts(
        self,
        sql: str,
        parameters: dict[str, Any] | None = None,
        column_formats: dict[str, str | dict[str, str]] | None = None,
    ) -> list[dict[str, Any]]:
        columns, rows = self._select(sql, parameters, column_formats)
        return [dict(zip(columns, row, strict=True)) for row in rows]

    def count_events(self) -> int:
        """Number of distinct stored events (current rows). Raises ``WarehouseError``."""
        _, rows = self._select("SELECT count() FROM {db:Identifier}.refusal_events FINAL")
        return int(rows[0][0])

    def count_assessments(self) -> int:
        """Number of current assessments. Raises ``WarehouseError``."""
        _, rows = self._select("SELECT count() FROM {db:Identifier}.current_assessments")
        return int(rows[0][0])

    def count_batches(self) -> int:
        """Number of distinct audited batches. Raises ``WarehouseError``."""
        _, rows = self._select("SELECT count() FROM {db:Identifier}.audit_batches FINAL")
        return int(rows[0][0])

    def current_assessments(self, log_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The current assessments (of ``log_ids`` only, when given), one dict per row.

        Keys are the ``assessments`` columns, i.e. the ``StoredAssessment`` field names;
        datetimes are aware UTC. Ordered by (policy_bundle, log_id). Raises ``WarehouseError``.
        """
        if log_ids is not None and not log_ids:
            return []
        where = "" if log_ids is None else "WHERE log_id IN {ids:Array(String)}"
        return self._dicts(
            f"SELECT * FROM {{db:Identifier}}.current_assessments {where} "
            "ORDER BY policy_bundle, log_id",
            {"ids": list(log_ids)} if log_ids is not None else None,
        )

    def assessments_of(self, keys: Sequence[tuple[str, str]]) -> list[StoredAssessment]:
        """The current assessments of ``keys`` = ``(policy_bundle, log_id)`` pairs, in the
        order of ``keys`` (pairs without one are left out). Raises ``WarehouseError``."""
        pairs = list(dict.fromkeys(keys))
        if not pairs:
            return []
        columns = ", ".join(ASSESSMENT_COLUMNS)
        rows = self._dicts(
            f"SELECT {columns} FROM {{db:Identifier}}.current_assessments "
            "WHERE (policy_bundle, log_id) IN {pairs:Array(Tuple(String, String))}",
            {"pairs": pairs},
        )
        found = {(r["policy_bundle"], r["log_id"]): StoredAssessment(**r) for r in rows}
        return [found[p] for p in pairs if p in found]

    def gap_flags_of(self, batch_ids: Sequence[str]) -> list[PolicyGapFlag]:
        """The policy-gap flags of the stored batches ``batch_ids``, in the order of the ids
        (each batch's flags in its order). Raises ``WarehouseError``."""
        ids = list(dict.fromkeys(batch_ids))
        if not ids:
            return []
        _, rows = self._select(
            "SELECT batch_id, policy_gap_flags FROM {db:Identifier}.audit_batches FINAL "
            "WHERE batch_id IN {ids:Array(String)}",
            {"ids": ids},
        )
        flags = {str(r[0]): r[1] for r in rows}
        return [gap_flag(f) for batch_id in ids for f in flags.get(batch_id, [])]

    def assessment_counts_per_log_id(self) -> dict[str, int]:
        """Map log_id -> number of current assessments (1 each when every log_id is audited
        against one bundle). Raises ``WarehouseError``.
        """
        _, rows = self._select(
            "SELECT log_id, count() FROM {db:Identifier}.current_assessments GROUP BY log_id"
        )
        return {str(log_id): int(n) for log_id, n in rows}

    def batches(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` batches (by audited_at), one dict per row; ``policy_gap_flags``
        is a list of ``{"description", "example_log_ids"}`` dicts. Raises ``WarehouseError``.
        """
        return self._dicts(
            "SELECT * FROM {db:Identifier}.audit_batches FINAL "
            "ORDER BY audited_at DESC, batch_id LIMIT {limit:UInt32}",
            {"limit": limit},
        )

    def dead_letters(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` dead letters, one dict per row (``DeadLetter`` field names;
        ``raw`` as bytes). Raises ``WarehouseError``.
        """
        return self._dicts(
            "SELECT * FROM {db:Identifier}.dead_letters FINAL "
            "ORDER BY created_at DESC, dead_letter_id LIMIT {limit:UInt32}",
            {"limit": limit},
            column_formats={"raw": "bytes"},
        )

    def alerts(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` alerts, one dict per row (``ALERT_COLUMNS``; ``payload`` is the
        JSON text). Raises ``WarehouseError``.
        """
        return self._dicts(
            "SELECT * FROM {db:Identifier}.alerts FINAL "
            "ORDER BY created_at DESC, alert_id LIMIT {limit:UInt32}",
            {"limit": limit},
        )
