"""``refusal-audit review import`` and ``review stats``: reviewer verdicts from files, and the
agreement of reviewers with the model (issue 10, the part without the web app).

Import reads CSV (header row) or JSON Lines, checks each row (``processors.review``) against
the log id's current assessment and its policy bundle, and stores the good rows in one
insert; bad rows are reported with their line and reason and nothing of them is stored.
Verdict ids are deterministic, so importing the same file again changes nothing.
"""

from __future__ import annotations

import csv
import io
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from processors.agreement import DEFAULT_MIN_ITEMS, Agreement, agreement, event_week
from processors.csv_cells import neutralise_cell, restore_cell
from processors.review import (
    CONTEXT_COLUMNS,
    IMPORT_COLUMNS,
    OPTIONAL_COLUMNS,
    RowError,
    make_verdict,
    parse_row,
)
from processors.review_queue import reasons_of
from processors.stats import wilson_interval
from schemas.policy import PolicyBundle
from schemas.review import Verdict, VerdictInput
from warehouse.private import private_opener
from warehouse.review import (
    current_verdicts,
    event_times,
    existing_verdict_ids,
    insert_verdicts,
    open_item_rows,
    stored_events,
)
from warehouse.store import Warehouse


@dataclass
class ImportReport:
    """What an import did: ``rows`` read, ``imported`` verdicts stored (``already_stored``
    of them identical to verdicts stored before, which change nothing), ``errors`` as
    ``(line, reason)`` for every row left out."""

    rows: int = 0
    imported: int = 0
    already_stored: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)


def read_rows(path: Path) -> Iterator[tuple[int, Mapping[str, Any] | RowError]]:
    """``(line, fields)`` per data row of a CSV (``.csv``) or JSON Lines file; a row that
    cannot be read comes as ``(line, RowError)``. CSV cells are read back through
    ``processors.csv_cells.restore_cell`` (the quote ``write_items`` puts before a cell
    starting like a formula is removed). Raises ``OSError``."""
    data = path.read_bytes()
    if path.suffix.lower() == ".csv":
        text = data.decode("utf-8-sig", errors="surrogateescape")
        reader = csv.DictReader(io.StringIO(text, newline=""))
        for row in reader:
            line = reader.line_num
            if None in row or any(v is None for v in row.values()):
                yield line, RowError("wrong number of cells for the header")
            else:  # undo the export's quote against formula injection
                yield line, {k: restore_cell(v) for k, v in row.items()}
        return
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            yield number, RowError(f"not JSON ({exc})")
            continue
        yield number, doc if isinstance(doc, dict) else RowError("not a JSON object")


def import_verdicts(
    store: Warehouse,
    bundles: Mapping[str, PolicyBundle],
    path: Path,
    now: datetime | None = None,
) -> ImportReport:
    """Check every row of ``path`` and store the good ones as verdicts (one insert).

    A row is refused when it cannot be parsed, names a log id without a current assessment
    (or one assessed under several bundles without a ``policy_bundle`` column), a category
    or clause its bundle lacks, or repeats an earlier row's log id and reviewer. Raises
    ``OSError`` (unreadable file) and ``WarehouseError`` (nothing stored then).
    """
    submitted_at = now or datetime.now(UTC)
    report = ImportReport()
    parsed: list[tuple[int, VerdictInput, str | None]] = []
    for line, fields in read_rows(path):
        report.rows += 1
        try:
            if isinstance(fields, RowError):
                raise fields
            bundle_name = fields.get("policy_bundle") or None
            parsed.append((line, parse_row(fields), bundle_name))
        except RowError as exc:
            report.errors.append((line, str(exc)))
    by_log: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in store.current_assessments(sorted({item.log_id for _, item, _ in parsed})):
        by_log[row["log_id"]].append(row)
    verdicts: list[Verdict] = []
    seen: set[tuple[str, str, str]] = set()
    for line, item, bundle_name in parsed:
        try:
            assessment = _assessment_of(item.log_id, bundle_name, by_log)
            key = (assessment["policy_bundle"], item.log_id, item.reviewer)
            if key in seen:
                raise RowError(f"a second row for log_id {item.log_id!r} by {item.reviewer!r}")
            seen.add(key)
            bundle = bundles.get(assessment["policy_bundle"])
            if bundle is None:
                raise RowError(f"policy bundle {assessment['policy_bundle']!r} is not configured")
            verdicts.append(
                make_verdict(item, assessment, bundle, submitted_at, f"import:{path.name}")
            )
        except RowError as exc:
            report.errors.append((line, str(exc)))
    stored = existing_verdict_ids(store, [v.verdict_id for v in verdicts])
    insert_verdicts(store, verdicts)
    report.imported = len(verdicts)
    report.already_stored = sum(v.verdict_id in stored for v in verdicts)
    report.errors.sort()
    return report


def _assessment_of(
    log_id: str, bundle: str | None, by_log: Mapping[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    rows = [r for r in by_log.get(log_id, []) if bundle is None or r["policy_bundle"] == bundle]
    if not rows:
        where = f" under bundle {bundle!r}" if bundle else ""
        raise RowError(f"log_id {log_id!r} has no current assessment{where}")
    if len(rows) > 1:
        raise RowError(f"log_id {log_id!r} is assessed under several bundles: add policy_bundle")
    return rows[0]


@dataclass(frozen=True)
class GroupStats:
    """Agreement of reviewers with the model in one group of verdicts.

    ``key`` = (model, policy bundle, engine, prompt version, event week): the week is the
    Monday (UTC, ``YYYY-MM-DD``) of the ISO week of the judged event's time
    (``processors.agreement.event_week``), the week the ``review_agreement`` query and the
    report group by; ``false_positive`` and ``category`` (top-level codes) are
    ``processors.agreement`` results over the group's current verdicts; ``verified_fp`` is
    the reviewers' share of false positives among the randomly sampled items
    (``successes, trials, low, high``): the sample is drawn from the assessments nobody
    flagged, so it estimates the over-refusals the model missed, without the bias of the
    flagged items (every estimated false positive is flagged). Items sampled for
    ``uncertainty`` (chosen by their score) are never part of it.
    """

    key: tuple[str, str, str, str, str]
    false_positive: Agreement
    category: Agreement
    verified_fp: tuple[int, int, float, float]


NO_EVENT_WEEK = "event not stored"
"""The week of a verdict whose event is not in the warehouse (events are never deleted, so
only a store edited by hand has one)."""


def review_stats(
    verdicts: Sequence[Verdict],
    bundles: Mapping[str, PolicyBundle],
    event_times: Mapping[str, datetime],
    min_items: int = DEFAULT_MIN_ITEMS,
) -> list[GroupStats]:
    """Agreement per (model, bundle, engine, prompt version, event week), plus one roll-up
    per (bundle, engine, prompt version) over all models and weeks (``all`` in the key).
    ``event_times`` maps each log id to its event time (a log id missing there is grouped
    under ``NO_EVENT_WEEK``). Categories are compared at the taxonomy's top level of each
    bundle."""
    groups: dict[tuple[str, str, str, str, str], list[Verdict]] = defaultdict(list)
    for v in verdicts:
        when = event_times.get(v.log_id)
        week = NO_EVENT_WEEK if when is None else event_week(when).isoformat()
        groups[(v.model, v.policy_bundle, v.engine, v.prompt_version, week)].append(v)
        groups[("all", v.policy_bundle, v.engine, v.prompt_version, "all")].append(v)
    out = []
    for key, items in sorted(groups.items()):
        bundle = bundles.get(key[1])

        def top(code: str, bundle: PolicyBundle | None = bundle) -> str:
            return bundle.top_level(code) if bundle is not None else code

        fp = agreement(
            [(str(v.model_false_positive), str(v.human_false_positive)) for v in items],
            min_items,
        )
        cat = agreement([(top(v.model_category), top(v.human_category)) for v in items], min_items)
        sample = [v for v in items if v.review_reason == "random_sample"]
        human = sum(v.human_false_positive for v in sample)
        low, high = wilson_interval(human, len(sample))
        out.append(GroupStats(key, fp, cat, (human, len(sample), low, high)))
    return out


def stats_from_store(
    store: Warehouse, bundles: Mapping[str, PolicyBundle], min_items: int = DEFAULT_MIN_ITEMS
) -> list[GroupStats]:
    """``review_stats`` over the warehouse's current verdicts, grouped by the time of the
    events they judge. Raises ``WarehouseError``."""
    verdicts = current_verdicts(store)
    times = event_times(store, sorted({v.log_id for v in verdicts}))
    return review_stats(verdicts, bundles, times, min_items)


@dataclass(frozen=True)
class ItemFilter:
    """Which review items to take: every field None means "any". ``since``/``until`` bound
    the event time (UTC, ``until`` exclusive)."""

    policy_bundle: str | None = None
    model: str | None = None
    product: str | None = None
    category: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def open_items(
    store: Warehouse,
    where: ItemFilter,
    reviews_per_item: int,
    bundles: Mapping[str, PolicyBundle] | None = None,
) -> list[dict[str, Any]]:
    """Review items (current assessments flagged for review or sampled) with fewer than
    ``reviews_per_item`` reviewers' verdicts, oldest event first, as export rows
    (``IMPORT_COLUMNS`` empty for the reviewer, ``policy_bundle`` and ``CONTEXT_COLUMNS``;
    ``review_reasons`` are the refined reasons of ``processors.review_queue``, with
    categories mapped to their top level by ``bundles``). Raises ``WarehouseError``."""
    items = open_item_rows(
        store,
        policy_bundle=where.policy_bundle,
        model=where.model,
        product=where.product,
        category=where.category,
        since=where.since,
        until=where.until,
    )
    done: dict[tuple[str, str, datetime], int] = defaultdict(int)
    for v in current_verdicts(store):
        done[(v.policy_bundle, v.log_id, v.assessment_audited_at)] += 1
    rows = []
    for a in items:
        if done[(a["policy_bundle"], a["log_id"], a["audited_at"])] >= reviews_per_item:
            continue
        row: dict[str, Any] = dict.fromkeys(IMPORT_COLUMNS, "")
        row["log_id"] = a["log_id"]
        row.update(
            policy_bundle=a["policy_bundle"],
            model=a["model"],
            product=a["product"],
            event_time=a["event_time"].isoformat(),
            request=a["request"],
            response=a["response"],
            model_category=a["category"],
            model_false_positive=str(a["is_estimated_false_positive"]).lower(),
            false_positive_score=a["false_positive_score"],
            model_clause=a["policy_clause_cited"] or "",
            rationale=a["assessment_rationale"],
            review_reason=a["review_reason"],
            review_reasons=" ".join(reasons_of(a, _top(bundles, a))),
            engine=a["engine"],
            prompt_version=a["prompt_version"],
            audited_at=a["audited_at"].isoformat(),
        )
        rows.append(row)
    return rows


def _top(bundles: Mapping[str, PolicyBundle] | None, row: Mapping[str, Any]) -> str:
    bundle = (bundles or {}).get(row["policy_bundle"])
    return bundle.top_level(row["category"]) if bundle is not None else str(row["category"])


EXPORT_COLUMNS = (*IMPORT_COLUMNS, *OPTIONAL_COLUMNS, *CONTEXT_COLUMNS)


def write_items(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Write export rows as CSV (``.csv``) or JSON Lines (any other suffix), mode 0600
    whether the file is new or not (it holds the logged texts). CSV cells that a spreadsheet
    would run as a formula get a leading single quote (``processors.csv_cells``;
    ``read_rows`` removes it again); JSON Lines are written as they are. Raises ``OSError``."""
    if path.suffix.lower() == ".csv":
        with open(path, "w", encoding="utf-8", newline="", opener=private_opener) as f:
            writer = csv.DictWriter(f, fieldnames=EXPORT_COLUMNS)
            writer.writeheader()
            for row in rows:
                cells = {k: "" if row[k] is None else str(row[k]) for k in EXPORT_COLUMNS}
                writer.writerow({k: neutralise_cell(v) for k, v in cells.items()})
        return
    with open(path, "wb", opener=private_opener) as f:
        for row in rows:
            f.write(orjson.dumps({k: row[k] for k in EXPORT_COLUMNS}) + b"\n")


def labelled_events(store: Warehouse, bundles: Mapping[str, PolicyBundle]) -> list[bytes]:
    """The reviewed events as native ``RefusalEvent`` JSON lines labelled with the
    reviewers' judgement, for ``refusal-audit eval``: attribute ``label`` = ``safe`` when
    the reviewers hold the refusal a false positive (the request should have been
    fulfilled), else ``unsafe``; ``expected_category`` = their top-level category;
    ``is_refusal`` = ``true`` (reviewed items are refusals). An assessment several
    reviewers judged goes by the majority (ties: the model's verdict stands). Texts are the
    stored, redacted ones. Raises ``WarehouseError``."""
    votes: dict[tuple[str, str], list[Verdict]] = defaultdict(list)
    for v in current_verdicts(store):
        votes[(v.policy_bundle, v.log_id)].append(v)
    if not votes:
        return []
    events = {
        row["log_id"]: row for row in stored_events(store, sorted({log_id for _, log_id in votes}))
    }
    lines = []
    for (bundle_name, log_id), verdicts in sorted(votes.items()):
        event = events.get(log_id)
        if event is None:
            continue
        newest = max(v.assessment_audited_at for v in verdicts)
        judged = [v for v in verdicts if v.assessment_audited_at == newest]
        fp_votes = sum(v.human_false_positive for v in judged)
        false_positive = (
            judged[0].model_false_positive
            if 2 * fp_votes == len(judged)
            else 2 * fp_votes > len(judged)
        )
        bundle = bundles.get(bundle_name)
        categories = Counter(
            bundle.top_level(v.human_category) if bundle else v.human_category for v in judged
        )
        category = categories.most_common(1)[0][0]
        attributes = {
            **event["attributes"],
            "label": "safe" if false_positive else "unsafe",
            "expected_category": category,
            "is_refusal": "true",
            "reviewers": str(len(judged)),
        }
        doc = {
            "log_id": log_id,
            "event_time": event["event_time"].isoformat(),
            "request": event["request"],
            "response": event["response"],
            "model": event["model"],
            "product": event["product"],
            "policy_bundle": bundle_name,
            "conversation_id": event["conversation_id"],
            # eval reads XSTest's own labels before ours: drop them, the reviewers decide
            "attributes": {k: v for k, v in attributes.items() if k not in ("type", "final_label")},
        }
        lines.append(orjson.dumps(doc))
    return lines
