"""What ``refusal-audit report`` shows, read from the warehouse in one place.

``collect`` runs the named trend queries (``warehouse.queries``: the same SQL and numbers as
``refusal-audit query``) and the period queries of ``warehouse.report_queries`` for one
``ReportFilter`` and returns a ``PeriodData``: plain rows, no formatting. The minimum-sample
notes (``processors.sample_notes``) are derived here from the same counts the charts use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from processors.sample_notes import ThinRate, thin_rate
from refusal_audit.report.html.buckets import (
    Bucket,
    bucket_label,
    bucket_size,
    category_buckets,
    fp_buckets,
)
from schemas.alerts import Alert
from warehouse.client import Client
from warehouse.disagreement_listing import newest_disagreements
from warehouse.queries import listing_params, run_named
from warehouse.report_queries import (
    ReportFilter,
    audit_configurations,
    false_positives_by_model,
    period_alerts,
    period_counts,
    top_gap_flags,
)

FP_WHAT = "The estimated false-positive (over-refusal) rate"


@dataclass(frozen=True)
class PeriodData:
    """Everything the report renders for one period and slice.

    ``bucket`` is the trend charts' time bucket (``buckets.bucket_size``: day, week or
    month); ``fp_series`` and ``category_series`` are the ``false_positive_rate`` and
    ``category_mix`` named queries summed per bucket (``buckets.fp_buckets``,
    ``buckets.category_buckets``). Other rows are ``{column: value}`` dicts in the named
    queries' shapes: ``agreement``
    (``review_agreement``), ``verified`` (``verified_false_positive_rate``),
    ``dead_letters`` (``dead_letters``, day of recording); ``fp_by_model`` is
    ``warehouse.report_queries.false_positives_by_model`` (with ``rate``, ``low``, ``high``).
    ``thin_model`` and ``thin_series`` (per model and bucket, the widest first) are the
    notes on rates whose interval is wider than ``max_width``. ``disagreements`` sums the
    ``refusal_disagreements`` named query over the period (``classifier_verdicts``,
    ``compared``, ``disagreements`` and one count per direction) and
    ``disagreement_events`` holds the newest ``MAX_LISTED`` ``refusal_disagreement_events``
    rows, newest first, of the ``disagreement_total`` the period holds.
    """

    slice: ReportFilter
    generated_at: datetime
    warehouse: str
    max_width: float
    counts: dict[str, int]
    configurations: list[dict[str, Any]]
    fp_by_model: list[dict[str, Any]]
    bucket: Bucket
    fp_series: list[dict[str, Any]]
    category_series: list[dict[str, Any]]
    gaps: list[dict[str, Any]]
    alerts: list[Alert]
    agreement: list[dict[str, Any]]
    verified: list[dict[str, Any]]
    dead_letters: list[dict[str, Any]]
    thin_model: list[ThinRate] = field(default_factory=list)
    thin_series: list[ThinRate] = field(default_factory=list)
    disagreements: dict[str, int] = field(default_factory=dict)
    disagreement_events: list[dict[str, Any]] = field(default_factory=list)
    disagreement_total: int = 0

    @property
    def empty(self) -> bool:
        """True when the period holds no current assessment."""
        return self.counts.get("audited", 0) == 0


def _named(client: Client, database: str, name: str, s: ReportFilter) -> list[dict[str, Any]]:
    if name == "dead_letters":
        return run_named(client, database, name, since=s.since, until=s.until).as_dicts()
    return run_named(client, database, name, since=s.since, until=s.until, model=s.model,
                     product=s.product).as_dicts()  # fmt: skip


def _thin(
    rows: list[dict[str, Any]], label: Callable[[dict[str, Any]], str], max_width: float
) -> list[ThinRate]:
    notes = (
        thin_rate(
            label(r), FP_WHAT, int(r["estimated_false_positives"]), int(r["audited"]),
            max_width, "audited refusal(s)",
        )
        for r in rows
    )
    return [note for note in notes if note is not None]


#: Rows of a listing the report shows (thin-rate notes, disagreements); it counts the rest.
MAX_LISTED = 100

DISAGREEMENT_COUNTS = (
    "classifier_verdicts",
    "compared",
    "disagreements",
    "classifier_refusal_detector_not",
    "detector_refusal_classifier_not",
)


def _disagreement_totals(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {k: sum(int(r[k]) for r in rows) for k in DISAGREEMENT_COUNTS}


def collect(
    client: Client,
    database: str,
    slice_: ReportFilter,
    *,
    warehouse: str,
    max_width: float,
    now: datetime | None = None,
) -> PeriodData:
    """Read the period ``slice_`` from ``database``.

    ``warehouse``: how the report names the store (a DSN without secrets); ``max_width``:
    the widest Wilson 95% interval (proportion) read without a note; ``now``: the generation
    time (default: now, UTC). Raises ``WarehouseError`` when a query fails.
    """
    by_model = false_positives_by_model(client, database, slice_).as_dicts()
    size = bucket_size(slice_.since, slice_.until)
    series = fp_buckets(_named(client, database, "false_positive_rate", slice_), size)
    thin_model = _thin(by_model, lambda r: str(r["model"]), max_width)
    thin_series = _thin(
        series, lambda r: f"{r['model']}, {bucket_label(r['start'], size)}", max_width
    )
    thin_series.sort(key=lambda n: (-n.width, n.label))
    listed = newest_disagreements(client, database, listing_params(
        database, since=slice_.since, until=slice_.until, model=slice_.model,
        product=slice_.product), MAX_LISTED)  # fmt: skip
    return PeriodData(
        slice=slice_,
        generated_at=now or datetime.now(UTC),
        warehouse=warehouse,
        max_width=max_width,
        counts=period_counts(client, database, slice_),
        configurations=audit_configurations(client, database, slice_).as_dicts(),
        fp_by_model=by_model,
        bucket=size,
        fp_series=series,
        category_series=category_buckets(_named(client, database, "category_mix", slice_), size),
        gaps=top_gap_flags(client, database, slice_).as_dicts(),
        alerts=period_alerts(client, database, slice_),
        agreement=_named(client, database, "review_agreement", slice_),
        verified=_named(client, database, "verified_false_positive_rate", slice_),
        dead_letters=_named(client, database, "dead_letters", slice_),
        thin_model=thin_model,
        thin_series=thin_series,
        disagreements=_disagreement_totals(
            _named(client, database, "refusal_disagreements", slice_)
        ),
        disagreement_events=listed.rows.as_dicts(),
        disagreement_total=listed.total,
    )
