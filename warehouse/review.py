"""Human review in ClickHouse: verdicts (``review_verdicts``, ``current_verdicts``), the review
app's items, accounts (``reviewers``) and saved queues (``review_queues``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from schemas.review import ReviewerAccount, ReviewQueue, Verdict
from warehouse import day_holds
from warehouse.store import Warehouse, to_utc

VERDICT_COLUMNS = (
    "verdict_id", "log_id", "policy_bundle", "assessment_audited_at", "reviewer", "verdict",
    "corrected_category", "corrected_false_positive", "corrected_clause", "note", "model",
    "product", "model_category", "model_false_positive", "model_clause", "engine",
    "engine_model", "engine_version", "prompt_version", "bundle_version", "review_reason",
    "submitted_at", "source",
)  # fmt: skip


def _row(v: Verdict) -> list[Any]:
    values = v.model_dump()
    values["assessment_audited_at"] = to_utc(v.assessment_audited_at)
    values["submitted_at"] = to_utc(v.submitted_at)
    return [values[c] for c in VERDICT_COLUMNS]


def insert_verdicts(store: Warehouse, verdicts: Sequence[Verdict]) -> None:
    """Store verdicts, all in one insert (none or all are written), with their events' days
    marked dirty before and after it (``Warehouse.mark_verdict_days``, retried on transient
    errors): the daily review aggregates of migration 0028 count them from the next
    recompute, and readers compute those days live until then. The mark before keeps the
    days dirty if the process stops or the second mark fails after the insert; the days it
    marks are held (``warehouse.day_holds``) until the mark after is done, so no recompute
    records them without the verdicts meanwhile (a writer that stops before its release
    leaves them dirty until the hold expires). Raises ``WarehouseError``."""
    log_ids = [v.log_id for v in verdicts]
    holder = day_holds.new_holder()
    held = store.mark_verdict_days(log_ids, holder)
    store.insert_rows("review_verdicts", VERDICT_COLUMNS, [_row(v) for v in verdicts])
    store.mark_verdict_days(log_ids)
    store.release_days(held, holder)


def existing_verdict_ids(store: Warehouse, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` are stored already. Raises ``WarehouseError``."""
    if not ids:
        return set()
    rows = store.select(
        "SELECT DISTINCT verdict_id FROM {db:Identifier}.review_verdicts "
        "WHERE verdict_id IN {ids:Array(String)}",
        {"ids": list(ids)},
    )
    return {r["verdict_id"] for r in rows}


def current_verdicts(store: Warehouse) -> list[Verdict]:
    """Every reviewer's newest verdict on every assessment. Raises ``WarehouseError``."""
    rows = store.select(
        "SELECT * FROM {db:Identifier}.current_verdicts ORDER BY policy_bundle, log_id, reviewer"
    )
    return [Verdict.model_validate(row) for row in rows]


def event_times(store: Warehouse, log_ids: Sequence[str]) -> dict[str, datetime]:
    """The event time (UTC) of each of ``log_ids`` that has a stored event. Raises
    ``WarehouseError``."""
    if not log_ids:
        return {}
    rows = store.select(
        "SELECT log_id, event_time FROM {db:Identifier}.refusal_events FINAL "
        "WHERE log_id IN {ids:Array(String)}",
        {"ids": list(log_ids)},
    )
    return {r["log_id"]: to_utc(r["event_time"]) for r in rows}


def open_item_rows(
    store: Warehouse,
    *,
    policy_bundle: str | None,
    model: str | None,
    product: str | None,
    category: str | None,
    since: datetime | None,
    until: datetime | None,
) -> list[dict[str, Any]]:
    """The current assessments in review (flagged or sampled) with their event's stored
    ``request`` and ``response``, oldest event first, of ``policy_bundle``, ``model``,
    ``product`` and ``category`` (None: any) whose event time is in [since, until) (aware;
    None: open). Raises ``WarehouseError``."""
    return store.select(
        "SELECT a.*, e.request AS request, e.response AS response "
        "FROM {db:Identifier}.current_assessments AS a "
        "INNER JOIN (SELECT log_id, request, response FROM {db:Identifier}.refusal_events FINAL)"
        " AS e USING (log_id) "
        "WHERE (a.requires_human_review OR a.sampled_for_review) "
        "AND ({bundle:Nullable(String)} IS NULL OR a.policy_bundle = {bundle:Nullable(String)}) "
        "AND ({model:Nullable(String)} IS NULL OR a.model = {model:Nullable(String)}) "
        "AND ({product:Nullable(String)} IS NULL OR a.product = {product:Nullable(String)}) "
        "AND ({category:Nullable(String)} IS NULL OR a.category = {category:Nullable(String)}) "
        "AND a.event_time >= {since:DateTime64(3, 'UTC')} "
        "AND a.event_time < {until:DateTime64(3, 'UTC')} "
        "ORDER BY a.event_time, a.policy_bundle, a.log_id",
        {
            "bundle": policy_bundle,
            "model": model,
            "product": product,
            "category": category,
            "since": since or datetime(1900, 1, 1, tzinfo=UTC),
            "until": until or datetime(2300, 1, 1, tzinfo=UTC),
        },
    )


def stored_events(store: Warehouse, log_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The stored (redacted) ``refusal_events`` rows of ``log_ids``, in no set order.
    Raises ``WarehouseError``."""
    return store.select(
        "SELECT * FROM {db:Identifier}.refusal_events FINAL WHERE log_id IN {ids:Array(String)}",
        {"ids": list(log_ids)},
    )


# ---- the review app: items, accounts, queues ------------------------------------------

_ITEM_COLUMNS = (
    "policy_bundle, log_id, audited_at, event_time, model, product, category, "
    "is_estimated_false_positive, policy_clause_cited, requires_human_review, review_reason"
)


def review_item_rows(store: Warehouse) -> list[dict[str, Any]]:
    """The current assessments in review (flagged or sampled), oldest event first, with the
    columns ``processors.review_queue.make_item`` reads. Raises ``WarehouseError``."""
    return store.select(
        f"SELECT {_ITEM_COLUMNS} FROM {{db:Identifier}}.current_assessments "
        "WHERE requires_human_review OR sampled_for_review "
        "ORDER BY event_time, policy_bundle, log_id"
    )


def reviewers_per_item(store: Warehouse) -> dict[tuple[str, str, datetime], set[str]]:
    """(policy bundle, log id, assessment audited_at) -> the reviewers with a current verdict
    on that assessment. Raises ``WarehouseError``."""
    rows = store.select(
        "SELECT policy_bundle, log_id, assessment_audited_at, groupUniqArray(reviewer) AS who "
        "FROM {db:Identifier}.current_verdicts "
        "GROUP BY policy_bundle, log_id, assessment_audited_at"
    )
    return {
        (r["policy_bundle"], r["log_id"], r["assessment_audited_at"]): set(r["who"]) for r in rows
    }


def item_detail(store: Warehouse, policy_bundle: str, log_id: str) -> dict[str, Any] | None:
    """The current assessment of ``log_id`` under ``policy_bundle`` with the event's stored
    (redacted) ``request`` and ``response``, or None. Raises ``WarehouseError``."""
    rows = store.select(
        "SELECT a.*, e.request AS request, e.response AS response "
        "FROM (SELECT * FROM {db:Identifier}.current_assessments "
        "      WHERE policy_bundle = {bundle:String} AND log_id = {log_id:String}) AS a "
        "INNER JOIN (SELECT log_id, request, response FROM {db:Identifier}.refusal_events FINAL"
        "            WHERE log_id = {log_id:String}) AS e USING (log_id)",
        {"bundle": policy_bundle, "log_id": log_id},
    )
    return rows[0] if rows else None


def verdicts_on(
    store: Warehouse, policy_bundle: str, log_id: str, reviewer: str | None = None
) -> list[Verdict]:
    """Current verdicts on any assessment of ``log_id`` under ``policy_bundle`` (only
    ``reviewer``'s when given), newest first. Raises ``WarehouseError``."""
    rows = store.select(
        "SELECT * FROM {db:Identifier}.current_verdicts "
        "WHERE policy_bundle = {bundle:String} AND log_id = {log_id:String} "
        "AND ({reviewer:Nullable(String)} IS NULL OR reviewer = {reviewer:Nullable(String)}) "
        "ORDER BY submitted_at DESC",
        {"bundle": policy_bundle, "log_id": log_id, "reviewer": reviewer},
    )
    return [Verdict.model_validate(row) for row in rows]


def verdict_history(store: Warehouse, reviewer: str, limit: int = 200) -> list[Verdict]:
    """``reviewer``'s current verdicts, newest first (at most ``limit``). Raises
    ``WarehouseError``."""
    rows = store.select(
        "SELECT * FROM {db:Identifier}.current_verdicts WHERE reviewer = {reviewer:String} "
        "ORDER BY submitted_at DESC LIMIT {limit:UInt32}",
        {"reviewer": reviewer, "limit": limit},
    )
    return [Verdict.model_validate(row) for row in rows]


_REVIEWER_COLUMNS = ("name", "role", "password_hash", "active", "updated_at")


def reviewer_accounts(store: Warehouse) -> dict[str, ReviewerAccount]:
    """Every review account (active or not) by name. Raises ``WarehouseError``."""
    rows = store.select("SELECT * FROM {db:Identifier}.reviewers FINAL ORDER BY name")
    return {r["name"]: ReviewerAccount.model_validate(r) for r in rows}


def save_reviewer(store: Warehouse, account: ReviewerAccount) -> None:
    """Store a new version of ``account`` (newest ``updated_at`` counts). Raises
    ``WarehouseError``."""
    values = account.model_dump()
    values["updated_at"] = to_utc(account.updated_at)
    store.insert_rows("reviewers", _REVIEWER_COLUMNS, [[values[c] for c in _REVIEWER_COLUMNS]])


_QUEUE_FIELDS = tuple(ReviewQueue.model_fields)
_QUEUE_COLUMNS = (*_QUEUE_FIELDS, "deleted", "updated_by", "updated_at")


def saved_queues(store: Warehouse) -> list[ReviewQueue]:
    """The saved queues (not deleted), by name. Raises ``WarehouseError``."""
    rows = store.select(
        "SELECT * FROM {db:Identifier}.review_queues FINAL WHERE NOT deleted ORDER BY name"
    )
    return [ReviewQueue.model_validate({k: r[k] for k in _QUEUE_FIELDS}) for r in rows]


def save_queue(
    store: Warehouse, queue: ReviewQueue, by: str, at: datetime, deleted: bool = False
) -> None:
    """Store ``queue`` as changed by ``by`` at ``at`` (``deleted`` removes it). Raises
    ``WarehouseError``."""
    values = {**queue.model_dump(), "deleted": deleted, "updated_by": by, "updated_at": to_utc(at)}
    store.insert_rows("review_queues", _QUEUE_COLUMNS, [[values[c] for c in _QUEUE_COLUMNS]])
