"""A dead letter: input or a batch that could not be processed, kept with its reason."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DeadLetterStage = Literal["decode", "validate", "audit", "store"]


class DeadLetter(BaseModel):
    """A record that failed, with everything needed to replay it once the cause is fixed.

    ``dead_letter_id`` is deterministic (hash of source, location and raw bytes), so the same
    broken record reported twice is stored once. ``reason_code`` is a short machine-readable
    code (``not_json``, ``missing_log_id``, ``bad_timestamp``, ``oversized``, ``wrong_type``,
    ``unknown_field``, ``duplicate_log_id``, ``unknown_policy_bundle``, ``engine_error``, ...);
    ``reason`` the human-readable message.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    dead_letter_id: str
    stage: DeadLetterStage
    reason_code: str
    reason: str
    source: str = Field(description="File path, or topic name for streamed input.")
    location: str = Field(description="'line 12' in a file, or 'partition 0 offset 42'.")
    raw: bytes = Field(description="The original bytes of the record (may be truncated).")
    log_id: str | None = None
    created_at: datetime
