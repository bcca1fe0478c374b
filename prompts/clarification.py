"""Load and render the clarification prompts: the question prompt (``prompts/clarify_v1.md``)
and the circumvention judge's prompt (``prompts/clarify_judge_v1.md``).

Same file format as the audit prompt (``prompts.loader``): maintainer notes, a static system
part after ``<!-- system -->``, a user part after ``<!-- user -->``. The user part holds each
of the template's placeholders exactly once (:data:`PLACEHOLDERS` for the question prompt,
``{{USER_INPUT}}`` ...; :data:`JUDGE_PLACEHOLDERS` for the judge's) and the system part none,
so the system message is byte-identical across requests. Filled-in text has every ``</``
written ``<\\/``, so a request cannot close the prompt's tags; placeholders are filled in a
single pass. The version is the sha256 of the file's bytes, first 12 hex digits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from prompts.loader import PromptTemplateError, split_template, template_version

DEFAULT_CLARIFY_TEMPLATE = Path(__file__).resolve().with_name("clarify_v1.md")
"""The clarification prompt template shipped with the package."""
DEFAULT_JUDGE_TEMPLATE = Path(__file__).resolve().with_name("clarify_judge_v1.md")
"""The circumvention judge's prompt template shipped with the package."""

PLACEHOLDERS = frozenset(
    {
        "USER_INPUT",
        "REFUSAL_REASON",
        "AMBIGUITY_DESCRIPTION",
        "POLICY_CONTEXT",
        "SAFE_INTERPRETATION_CRITERIA",
    }
)
JUDGE_PLACEHOLDERS = frozenset({"USER_INPUT", "REFUSAL_REASON", "QUESTIONS"})
"""The judge prompt's placeholders: the request, the refusal, the question set to judge."""
_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")
_SCHEMA_LINE = re.compile(r'^\{"type":\s*"object".*\}$', re.MULTILINE)


@dataclass(frozen=True)
class ClarifyPrompt:
    """A loaded clarification prompt: ``version`` (content hash), the static ``system``
    message and the ``user_template`` with its ``placeholders``; ``schema`` is the JSON
    Schema the system part shows."""

    version: str
    system: str
    user_template: str
    schema: dict[str, Any]
    placeholders: frozenset[str] = PLACEHOLDERS

    def messages(self, values: Mapping[str, str]) -> list[dict[str, str]]:
        """Chat messages for one refusal; ``values`` maps every placeholder to its text.
        Raises ``KeyError`` for a missing placeholder value."""
        missing = self.placeholders - set(values)
        if missing:
            raise KeyError(f"no value for placeholders {sorted(missing)}")
        user = _PLACEHOLDER.sub(
            lambda m: values[m.group(1)].strip().replace("</", "<\\/"), self.user_template
        )
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]


def parse_clarify_template(
    text: str, version: str, placeholders: frozenset[str] = PLACEHOLDERS
) -> ClarifyPrompt:
    """Check and split template ``text``; raises ``PromptTemplateError`` when malformed
    (markers, placeholders other than ``placeholders`` once each in the user part, or no
    single-line output schema in the system part)."""
    system, user = split_template(text)
    if _PLACEHOLDER.search(system):
        raise PromptTemplateError("the system part must hold no placeholder")
    used = _PLACEHOLDER.findall(user)
    if sorted(used) != sorted(placeholders):
        raise PromptTemplateError(
            f"user placeholders {sorted(used)}, expected each of {sorted(placeholders)} once"
        )
    schemas = _SCHEMA_LINE.findall(system)
    if len(schemas) != 1:
        raise PromptTemplateError("the system part must show the output schema once, one line")
    return ClarifyPrompt(version, system, user, json.loads(schemas[0]), placeholders)


@lru_cache(maxsize=8)
def _parse_cached(text: str, version: str, placeholders: frozenset[str]) -> ClarifyPrompt:
    return parse_clarify_template(text, version, placeholders)


def _load(path: Path, placeholders: frozenset[str]) -> ClarifyPrompt:
    data = path.read_bytes()
    return _parse_cached(data.decode("utf-8"), template_version(data), placeholders)


def load_clarify_template(path: Path | str | None = None) -> ClarifyPrompt:
    """Load the clarification prompt (default :data:`DEFAULT_CLARIFY_TEMPLATE`). Raises
    ``OSError`` (unreadable), ``UnicodeDecodeError`` (not UTF-8) or ``PromptTemplateError``."""
    return _load(Path(path) if path is not None else DEFAULT_CLARIFY_TEMPLATE, PLACEHOLDERS)


def load_judge_template(path: Path | str | None = None) -> ClarifyPrompt:
    """Load the circumvention judge's prompt (default :data:`DEFAULT_JUDGE_TEMPLATE`,
    placeholders :data:`JUDGE_PLACEHOLDERS`). Raises as :func:`load_clarify_template`."""
    return _load(Path(path) if path is not None else DEFAULT_JUDGE_TEMPLATE, JUDGE_PLACEHOLDERS)
