"""The alert contract: what drift and policy-gap alerts carry on their topics and in ClickHouse.

One model, ``Alert``, for every kind. Alerting consumers subscribe to the drift topic
(``kind`` other than ``policy_gap``) and the policy-gap topic (``kind == "policy_gap"``);
records are keyed by the scope (``Scope.key``) and their value is ``Alert`` as JSON. The
published JSON Schema is ``schemas/json/alert.schema.json``.

``alert_id`` is deterministic (``alert_id``): a hash of the kind, the scope and the
window (for policy gaps: the gap and its cooldown period), so an alert recomputed after a
restart has the same id and is recognised as already emitted.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

ALERT_SCHEMA_VERSION: Literal["1"] = "1"

ALL = "all"
"""The scope value that stands for every model, product or policy bundle."""

DriftKind = Literal[
    "category_mix_drift",
    "false_positive_rate_shift",
    "policy_gap_rate_shift",
    "review_rate_shift",
    "volume_anomaly",
    "new_category",
    "classification_drift",
]
AlertKind = Literal[DriftKind, "policy_gap"]
DRIFT_KINDS: tuple[DriftKind, ...] = get_args(DriftKind)
Severity = Literal["warning", "critical"]


class Scope(BaseModel):
    """The slice of traffic an alert is about; any field may be ``"all"``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy_bundle: str = Field(min_length=1)
    model: str = Field(min_length=1)
    product: str = Field(min_length=1)

    @property
    def key(self) -> str:
        """The Kafka record key: ``bundle/model/product``."""
        return f"{self.policy_bundle}/{self.model}/{self.product}"


class TimeWindow(BaseModel):
    """A half-open event-time interval ``[start, end)`` (UTC)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start: datetime
    end: datetime


class Statistic(BaseModel):
    """The test behind an alert.

    ``name`` is the statistic (``chi2``, ``fisher_exact``, ``two_proportion_chi2``,
    ``poisson_rate_ratio``, ``count``, ``distinct_log_ids``); ``value`` its value and
    ``threshold`` the level it had to cross (for tested statistics: the significance level
    ``alpha`` the adjusted p-value was compared with). ``p_value`` is the raw p-value and
    ``q_value`` the Benjamini-Hochberg adjusted one (None where there is no test).
    ``effect_size`` is named by ``effect_size_name`` (``jensen_shannon_distance``,
    ``rate_difference_pp``, ``rate_ratio``, ...) and had to reach ``effect_size_threshold``
    in absolute value.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    value: float
    threshold: float
    p_value: float | None = Field(default=None, ge=0.0, le=1.0)
    q_value: float | None = Field(default=None, ge=0.0, le=1.0)
    effect_size: float
    effect_size_name: str
    effect_size_threshold: float


class RateEstimate(BaseModel):
    """A rate with its Wilson 95% interval (``low``, ``high``); ``successes / trials``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    successes: NonNegativeInt
    trials: NonNegativeInt
    rate: float = Field(ge=0.0, le=1.0)
    low: float = Field(ge=0.0, le=1.0)
    high: float = Field(ge=0.0, le=1.0)


class Alert(BaseModel):
    """A drift or policy-gap alert (schema version ``ALERT_SCHEMA_VERSION``).

    ``window`` is the evaluated window and ``baseline`` the period it was compared with
    (for a policy gap: ``window`` is the current cooldown period, counted from the gap's first
    sighting, and ``baseline`` runs from the first sighting to that period's start).
    ``current_counts`` and ``baseline_counts`` are the counts each test used (e.g.
    ``{"refusals": 412, "false_positives": 170}`` or category counts); ``current_rate`` and
    ``baseline_rate`` the rate the alert is about, with Wilson 95% intervals, where there is
    one. ``moved`` names what changed (categories for a mix drift, the new category).
    ``late_events`` counts events of the window that arrived after the grace period (they are
    counted in the window they arrived in).
    ``summary`` is one human-readable paragraph that ends with ``evidence_query``: the SQL
    that reproduces the counts from ClickHouse.
    ``evidence_window`` (drift alerts; None in alerts made before it existed and in
    policy-gap alerts) is the period whose counts were tested: ``window`` itself, or the
    trailing period of ``resolution_seconds`` that ends with ``window`` when a low-volume
    scope needed a longer period to hold enough refusals; ``baseline`` is then that
    period's baseline.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal["1"] = ALERT_SCHEMA_VERSION
    alert_id: str = Field(min_length=1)
    kind: AlertKind
    severity: Severity
    scope: Scope
    window: TimeWindow
    baseline: TimeWindow
    statistic: Statistic
    current_counts: dict[str, NonNegativeInt]
    baseline_counts: dict[str, NonNegativeInt]
    current_rate: RateEstimate | None = None
    baseline_rate: RateEstimate | None = None
    moved: list[str] = Field(default_factory=list)
    late_events: NonNegativeInt = 0
    example_log_ids: list[str] = Field(default_factory=list, max_length=20)
    gap_id: str | None = None
    gap_description: str | None = None
    summary: str = Field(min_length=1)
    evidence_query: str = Field(min_length=1)
    created_at: datetime
    evidence_window: TimeWindow | None = None
    resolution_seconds: int | None = Field(default=None, ge=1)


def alert_id(kind: str, scope: Scope, *period: object) -> str:
    """Deterministic alert id: sha256 of kind, scope and the period parts, 24 hex chars.

    ``period`` is the window start and end for drift alerts, or the gap id and cooldown
    period index for policy-gap alerts. Datetimes are rendered in ISO 8601.
    """
    parts = [kind, scope.policy_bundle, scope.model, scope.product]
    parts += [p.isoformat() if isinstance(p, datetime) else str(p) for p in period]
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:24]
