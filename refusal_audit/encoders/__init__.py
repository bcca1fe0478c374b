"""Sentence encoders run offline: the pinned catalogue, the install-time fetch, the ONNX
runtime and the ``refusal-audit encoders`` commands
(docs/encoders.md). Pure logic sees them only as ``processors.text_encoder.TextEncoder``.
"""

from refusal_audit.encoders.catalog import (
    CATALOG,
    DEFAULT_ENCODERS,
    EncoderError,
    EncoderSpec,
    fetch_command,
    spec_of,
)
from refusal_audit.encoders.store import EncoderCorrupt, EncoderNotInstalled, installed_state

__all__ = [
    "CATALOG",
    "DEFAULT_ENCODERS",
    "EncoderCorrupt",
    "EncoderError",
    "EncoderNotInstalled",
    "EncoderSpec",
    "fetch_command",
    "installed_state",
    "spec_of",
]
