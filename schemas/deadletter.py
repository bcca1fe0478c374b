"""A dead letter: input or a batch that could not be processed, kept with its reason."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DeadLetterStage = Literal["decode", "validate", "audit", "store"]


class DeadLetter(BaseModel):
    """A record that failed, with everything needed to replay it once the cause is fixed.

    ``dead_letter_id`` is deterministic (hash of source, location and raw bytes), so the same
    broken record reported twice is stored once. ``reason_code`` is a short machine-readable
    code (``not_json``, ``missing_log_id``, ``bad_timestamp``, ``oversized``, ``wrong_type``,
    ``unknown_field``, ``duplicate_log_id``, ``unknown_policy_bundle``, ``tombstone``,
    ``engine_error``, ...); ``reason`` the human-readable message.

    ``raw`` holds the record's value (PII redacted) whole up to the configured
    ``dead_letter_max_raw_bytes``; beyond it only its first bytes, with ``raw_truncated``
    set. ``raw_length`` and ``raw_sha256`` always describe the whole original value (before
    redaction and truncation), and ``source`` + ``location`` say where it was (topic and
    ``partition P offset O``, or file and line), so a cut record can still be found and
    verified. When not given, they are computed from ``raw`` (a value kept whole). One
    exception: the warehouse sink's ``duplicate_log_id`` letters keep in ``raw`` the refused
    event as decoded and redacted (JSON), not the record's bytes, while ``raw_length``,
    ``raw_sha256``, ``source`` and ``location`` describe the input record
    (``refusal_audit.streaming.sink_rules``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    dead_letter_id: str
    stage: DeadLetterStage
    reason_code: str
    reason: str
    source: str = Field(description="File path, or topic name for streamed input.")
    location: str = Field(description="'line 12' in a file, or 'partition 0 offset 42'.")
    raw: bytes = Field(
        description="The record's bytes, PII redacted; whole up to dead_letter_max_raw_bytes, "
        "else the first bytes (raw_truncated)."
    )
    raw_length: int = Field(
        default=-1, ge=-1, description="Length in bytes of the whole original value."
    )
    raw_sha256: str = Field(
        default="", description="SHA-256 (hex) of the whole original value, before redaction."
    )
    raw_truncated: bool = Field(
        default=False, description="True when raw holds only the first bytes of the value."
    )
    log_id: str | None = None
    created_at: datetime

    @model_validator(mode="before")
    @classmethod
    def _describe_whole_raw(cls, data: Any) -> Any:
        """Fill ``raw_length``/``raw_sha256`` from ``raw`` when the caller kept it whole."""
        if not isinstance(data, dict) or not isinstance(data.get("raw"), bytes | bytearray):
            return data
        raw = bytes(data["raw"])
        if data.get("raw_length", -1) == -1:
            data = {**data, "raw_length": len(raw)}
        if not data.get("raw_sha256"):
            data = {**data, "raw_sha256": hashlib.sha256(raw).hexdigest()}
        return data
