"""The settings of drift and policy-gap alerts: windows, baselines, thresholds and the gap
grouping: one group of :class:`refusal_audit.config.Settings`, which composes every group (the
field names are the config keys; the environment variables are ``REFUSAL_AUDIT_`` plus the name
in capitals; docs/configuration.md lists them all).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field, model_validator


class AlertSettings(BaseModel):
    """Drift and policy-gap alerts: windows, baselines, thresholds and the gap grouping: fields
    only (validated and read through :class:`refusal_audit.config.Settings`)."""

    # drift detectors and policy-gap alerts
    alerts_window_seconds: int = Field(
        default=3600,
        ge=60,
        le=31 * 86400,
        description="Tumbling event-time window of the drift detectors (60 s to 31 days).",
    )
    alerts_grace_seconds: int = Field(
        default=300,
        ge=0,
        le=366 * 86400,
        description="Late events arriving within this after a window ends still count in it.",
    )
    alerts_baseline_windows: int = Field(
        default=24, ge=1, le=10_000, description="Trailing windows pooled as the baseline."
    )
    alerts_baseline_start: datetime | None = Field(
        default=None, description="Pinned reference period start (UTC); needs the end too."
    )
    alerts_baseline_end: datetime | None = Field(
        default=None, description="Pinned reference period end (UTC, exclusive)."
    )
    alerts_min_events: int = Field(
        default=300,
        ge=1,
        description=(
            "Refusals per period a baseline needs before a resolution is tested (the coarsest:"
            " in the whole baseline)."
        ),
    )
    alerts_resolutions: list[int] = Field(
        default=[1, 6, 24, 168],
        min_length=1,
        description=(
            "Periods the detectors may test, in windows (1 h, 6 h, 1 day, 1 week): each scope"
            " at the finest whose baseline holds alerts_min_events per period."
        ),
    )
    alerts_false_alarms: float = Field(
        default=0.5,
        gt=0,
        description=(
            "Expected false alerts per scope and detector in 28 days that set each test's"
            " level (alpha = this x window / 28 days)."
        ),
    )
    alerts_fdr: float = Field(
        default=0.05, gt=0, lt=1, description="Benjamini-Hochberg false-discovery rate."
    )
    alerts_js_threshold: float = Field(
        default=0.1, ge=0, le=1, description="Min Jensen-Shannon distance of a category-mix alert."
    )
    alerts_rate_shift_pp: float = Field(
        default=5.0, ge=0, le=100, description="Min rate change (percentage points) to alert."
    )
    alerts_volume_ratio: float = Field(
        default=1.5, ge=1, description="Min refusal-volume ratio (or its inverse) to alert."
    )
    alerts_new_category_min: int = Field(
        default=20, ge=1, description="Refusals a category absent from the baseline needs."
    )
    alerts_lookback_windows: int = Field(
        default=3, ge=1, le=1000, description="Closed windows re-evaluated at each detector run."
    )
    alerts_interval_seconds: float = Field(
        default=60.0, gt=0, description="How often the worker runs the detectors."
    )
    gaps_similarity: float = Field(
        default=0.3, gt=0, le=1, description="Cosine similarity for two gap flags to be one gap."
    )
    gaps_cooldown_seconds: int = Field(
        default=86400, ge=1, description="A growing policy gap re-alerts at most once per this."
    )
    gaps_reread_margin_seconds: int = Field(
        default=3600, ge=0, description="Batches re-read before the newest gap sighting."
    )

    @model_validator(mode="after")
    def _resolutions(self) -> AlertSettings:
        if any(r < 1 or r > 10_000 for r in self.alerts_resolutions):
            raise ValueError("alerts_resolutions are window counts between 1 and 10,000")
        return self

    @model_validator(mode="after")
    def _pinned_baseline(self) -> AlertSettings:
        start, end = self.alerts_baseline_start, self.alerts_baseline_end
        if (start is None) != (end is None):
            raise ValueError("alerts_baseline_start and alerts_baseline_end go together")
        if start is not None and end is not None:
            if start.tzinfo is None or end.tzinfo is None:
                raise ValueError("alerts_baseline_start/end need a UTC offset, e.g. ...Z")
            if end <= start:
                raise ValueError("alerts_baseline_end must be after alerts_baseline_start")
        return self
