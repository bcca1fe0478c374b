"""The settings of the HTML report: one group of :class:`refusal_audit.config.Settings`, which
composes every group (the field names are the config keys; the environment variables are
``REFUSAL_AUDIT_`` plus the name in capitals; docs/configuration.md lists them all).
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class ReportSettings(BaseModel):
    """The HTML report: fields only (validated and read through
    :class:`refusal_audit.config.Settings`)."""

    report_max_interval_width: float = Field(
        default=0.2,
        gt=0,
        le=1,
        description="`refusal-audit report` notes a rate whose Wilson 95% interval is wider "
        "than this (0.2 = 20 percentage points) as resting on too few events.",
    )
