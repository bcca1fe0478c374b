"""Load the refusal-calibration prompt (``prompts/calibrate_v1.md``).

Same file format and loader as the clarification prompts (``prompts.clarification``: maintainer
notes, a static system part after ``<!-- system -->``, a user part after ``<!-- user -->``
holding each of :data:`PLACEHOLDERS` exactly once; filled-in text has every ``</`` written
``<\\/``). The version is the sha256 of the file's bytes, first 12 hex digits.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from prompts.clarification import ClarifyPrompt, parse_clarify_template
from prompts.loader import template_version

DEFAULT_CALIBRATE_TEMPLATE = Path(__file__).resolve().with_name("calibrate_v1.md")
"""The calibration prompt template shipped with the package."""

PLACEHOLDERS = frozenset({"REQUEST", "REFUSAL", "POLICY_CLAUSE", "SPECTRUM"})
"""The request, the raw refusal, the triggered policy clause, the spectrum of styles."""


@lru_cache(maxsize=8)
def _parse_cached(text: str, version: str) -> ClarifyPrompt:
    return parse_clarify_template(text, version, PLACEHOLDERS)


def load_calibrate_template(path: Path | str | None = None) -> ClarifyPrompt:
    """Load the calibration prompt (default :data:`DEFAULT_CALIBRATE_TEMPLATE`). Raises
    ``OSError`` (unreadable), ``UnicodeDecodeError`` (not UTF-8) or
    ``prompts.loader.PromptTemplateError`` (malformed)."""
    data = Path(path if path is not None else DEFAULT_CALIBRATE_TEMPLATE).read_bytes()
    return _parse_cached(data.decode("utf-8"), template_version(data))
