"""The settings of the offline sentence encoders: where they are cached, where they are fetched
from, threads: one group of :class:`refusal_audit.config.Settings`, which composes every group
(the field names are the config keys; the environment variables are ``REFUSAL_AUDIT_`` plus the
name in capitals; docs/configuration.md lists them all).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class EncoderSettings(BaseModel):
    """The offline sentence encoders: where they are cached, where they are fetched from, threads:
    fields only (validated and read through :class:`refusal_audit.config.Settings`)."""

    # sentence encoders (refusal-audit encoders; docs/encoders.md)
    encoder_dir: Path | None = Field(
        default=None,
        description="Private cache of the fetched sentence encoders (ONNX model, tokenizer, "
        "manifest; dirs 0700, files 0600); unset: <data_dir>/encoders.",
    )
    encoder_repository_url: str = Field(
        default="https://repo1.maven.org/maven2/",
        pattern=r"^https?://",
        description="Maven repository (Central or a mirror) `encoders fetch` downloads the "
        "pinned jars from; only fetching uses it, never loading.",
    )
    encoder_fetch_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Connect/read timeout of one encoder jar download attempt (4 attempts "
        "on transient errors).",
    )
    encoder_threads: int = Field(
        default=1,
        ge=1,
        le=64,
        description="onnxruntime intra-op threads of one loaded encoder.",
    )
