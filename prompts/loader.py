"""Load and render the audit prompt template (``prompts/audit_v1.md``).

The template file holds maintainer notes, then a system part after the line
``<!-- system -->`` and a user part after the line ``<!-- user -->``. The system message
carries everything static (role, the bundle's policies and taxonomy, output schema,
constraints, success criteria); the user message carries only the batch, last, between
``<refusal_events>`` and ``</refusal_events>``. For one policy bundle the system message is
byte-identical across batches, so providers' prompt caching covers it.

The batch is a JSON array, one compact object per line, of ``processors.batching.prompt_view``
of each (already redacted) event. Inside it every ``</`` is written ``<\\/`` (the JSON escape
of ``/``: the array still decodes to the same strings), so no event text can close the
``refusal_events`` tag or any other tag of the prompt. Placeholders are filled in a single
pass, so text filled in (policies, events) is never searched for placeholders again.

The prompt version is the sha256 of the template file's bytes, first 12 hex digits.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson

from processors.batching import prompt_view
from processors.tokens import count_tokens
from schemas.events import RefusalEvent
from schemas.policy import PolicyBundle
from schemas.wire import WIRE_JSON_SCHEMA

DEFAULT_TEMPLATE = Path(__file__).resolve().with_name("audit_v1.md")
"""The audit prompt template shipped with the package."""

SYSTEM_MARKER = "<!-- system -->"
USER_MARKER = "<!-- user -->"
BATCH_OPEN = "<refusal_events>"
BATCH_CLOSE = "</refusal_events>"

SECTION_TITLES: tuple[str, ...] = (
    "Role",
    "Allowed-use policy",
    "Product safety policy",
    "Refusal taxonomy",
    "Output schema",
    "Constraints",
    "Success criteria",
)
"""The system message's ``# `` sections, in the order the template must have them."""

SYSTEM_PLACEHOLDERS = frozenset(
    {"allowed_use_policy", "product_safety_policy", "refusal_taxonomy", "clause_index"}
)
USER_PLACEHOLDERS = frozenset({"event_count", "events_json"})

CHAT_TOKENS_PER_MESSAGE = 3
"""Chat-format tokens around each message (role and separators), as OpenAI counts them."""
CHAT_TOKENS_PER_REPLY = 3
"""Chat-format tokens that prime the assistant's reply."""

_PLACEHOLDER = re.compile(r"\{\{([a-z_]+)\}\}")
_SCHEMA_LINE = re.compile(r'^\{"type":\s*"object".*\}$', re.MULTILINE)


class PromptTemplateError(ValueError):
    """The template file does not follow the format described in the module docstring."""


def render_events(events: Sequence[RefusalEvent]) -> str:
    """The batch as it appears in the prompt: a JSON array, one event per line, ``</`` escaped."""
    if not events:
        return "[]"
    lines = [orjson.dumps(prompt_view(e)).decode().replace("</", "<\\/") for e in events]
    return "[\n" + ",\n".join(lines) + "\n]"


def parse_batch(user_message: str) -> list[dict[str, Any]]:
    """The events of a rendered user message (inverse of the batch rendering).

    Raises ``ValueError`` when the message holds no delimited JSON array.
    """
    start = user_message.find(BATCH_OPEN)
    end = user_message.rfind(BATCH_CLOSE)
    if start < 0 or end < start:
        raise ValueError("no refusal_events block in the message")
    data = json.loads(user_message[start + len(BATCH_OPEN) : end])
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise ValueError("the refusal_events block is not a JSON array of objects")
    return data


def clause_index(bundle: PolicyBundle) -> str:
    """One line per citable clause: ``AUP-2.3 [prohibit] Title``."""
    return "\n".join(f"{c.clause_id} [{c.stance}] {c.title}".rstrip() for c in bundle.clauses)


def _fill(template: str, values: Mapping[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


@dataclass(frozen=True)
class AuditPrompt:
    """A loaded audit prompt template.

    ``version`` is the template file's content hash; ``system_template`` and
    ``user_template`` are the two parts with their placeholders. Use ``messages`` to render
    a batch and ``overhead_tokens`` / ``prompt_tokens`` for offline (o200k_base) token counts.
    """

    version: str
    system_template: str
    user_template: str
    path: Path | None = None
    _system_cache: dict[tuple[str, str], str] = field(
        default_factory=dict, compare=False, repr=False
    )

    def system_message(self, bundle: PolicyBundle) -> str:
        """The static system message for ``bundle`` (cached per bundle name and version)."""
        key = (bundle.name, bundle.version)
        text = self._system_cache.get(key)
        if text is None:
            text = _fill(
                self.system_template,
                {
                    "allowed_use_policy": bundle.allowed_use_markdown.strip(),
                    "product_safety_policy": bundle.product_safety_markdown.strip(),
                    "refusal_taxonomy": bundle.taxonomy_markdown.strip(),
                    "clause_index": clause_index(bundle),
                },
            )
            if len(self._system_cache) >= 16:
                self._system_cache.clear()
            self._system_cache[key] = text
        return text

    def user_message(self, events: Sequence[RefusalEvent]) -> str:
        """The user message: a short preamble, then the delimited batch, last."""
        return _fill(
            self.user_template,
            {"event_count": str(len(events)), "events_json": render_events(events)},
        )

    def messages(
        self, bundle: PolicyBundle, events: Sequence[RefusalEvent]
    ) -> list[dict[str, str]]:
        """Chat messages for one batch: ``[{"role": "system", ...}, {"role": "user", ...}]``."""
        return [
            {"role": "system", "content": self.system_message(bundle)},
            {"role": "user", "content": self.user_message(events)},
        ]

    def overhead_tokens(self, bundle: PolicyBundle) -> int:
        """Prompt tokens of everything but the events: the system message, the user
        message's preamble and delimiters (with an empty batch) and the chat framing."""
        return count_message_tokens(self.messages(bundle, []))

    def prompt_tokens(self, bundle: PolicyBundle, events: Sequence[RefusalEvent]) -> int:
        """Prompt tokens of the whole request for this batch (see ``count_message_tokens``)."""
        return count_message_tokens(self.messages(bundle, events))


def count_message_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """o200k_base tokens of chat messages: their contents plus ``CHAT_TOKENS_PER_MESSAGE``
    per message and ``CHAT_TOKENS_PER_REPLY``. An estimate for models with other
    tokenizers."""
    total = CHAT_TOKENS_PER_REPLY
    for message in messages:
        content = message.get("content")
        total += CHAT_TOKENS_PER_MESSAGE + count_tokens(content if isinstance(content, str) else "")
    return total


def split_template(text: str) -> tuple[str, str]:
    """The system and user parts of a template ``text`` (the lines after the system marker
    and after the user marker). Raises ``PromptTemplateError`` when the markers are missing,
    repeated or out of order."""
    lines = text.splitlines(keepends=True)
    stripped = [line.strip() for line in lines]
    if stripped.count(SYSTEM_MARKER) != 1 or stripped.count(USER_MARKER) != 1:
        raise PromptTemplateError(
            f"the template needs exactly one {SYSTEM_MARKER!r} line and one {USER_MARKER!r} line"
        )
    s, u = stripped.index(SYSTEM_MARKER), stripped.index(USER_MARKER)
    if u < s:
        raise PromptTemplateError("the user part must come after the system part")
    return "".join(lines[s + 1 : u]).strip(), "".join(lines[u + 1 :]).strip()


def _check(system: str, user: str) -> None:
    used_system = set(_PLACEHOLDER.findall(system))
    used_user = set(_PLACEHOLDER.findall(user))
    if used_system != SYSTEM_PLACEHOLDERS:
        raise PromptTemplateError(
            f"system placeholders {sorted(used_system)}, expected {sorted(SYSTEM_PLACEHOLDERS)}"
        )
    if used_user != USER_PLACEHOLDERS:
        raise PromptTemplateError(
            f"user placeholders {sorted(used_user)}, expected {sorted(USER_PLACEHOLDERS)}"
        )
    if not user.endswith(f"{BATCH_OPEN}\n{{{{events_json}}}}\n{BATCH_CLOSE}"):
        raise PromptTemplateError(
            f"the user part must end with the batch: {BATCH_OPEN}, the events, {BATCH_CLOSE}"
        )
    if user.count(BATCH_OPEN) != 1 or user.count(BATCH_CLOSE) != 1 or BATCH_OPEN in system:
        raise PromptTemplateError("the batch delimiters must appear once, in the user part")
    headings = [line[2:].strip() for line in system.splitlines() if line.startswith("# ")]
    if headings != list(SECTION_TITLES):
        raise PromptTemplateError(f"system sections {headings}, expected {list(SECTION_TITLES)}")
    schemas = _SCHEMA_LINE.findall(system)
    if len(schemas) != 1 or json.loads(schemas[0]) != WIRE_JSON_SCHEMA:
        raise PromptTemplateError(
            "the system part must show schemas.wire.WIRE_JSON_SCHEMA once, as one JSON line"
        )


def parse_template(text: str, version: str, path: Path | None = None) -> AuditPrompt:
    """Check and split template ``text``; raises ``PromptTemplateError`` when malformed."""
    system, user = split_template(text)
    _check(system, user)
    return AuditPrompt(version=version, system_template=system, user_template=user, path=path)


def template_version(data: bytes) -> str:
    """The version of a template with content ``data``: sha256, first 12 hex digits."""
    return hashlib.sha256(data).hexdigest()[:12]


@lru_cache(maxsize=8)
def _parse_cached(text: str, version: str, path: Path) -> AuditPrompt:
    return parse_template(text, version, path)


def load_template(path: Path | str | None = None) -> AuditPrompt:
    """Load the audit prompt template (default: ``DEFAULT_TEMPLATE``).

    Reads the file on every call (it is small) and returns the same ``AuditPrompt`` while its
    content is unchanged. Raises ``OSError`` when the file cannot be read,
    ``UnicodeDecodeError`` when it is not UTF-8 and ``PromptTemplateError`` when malformed.
    """
    p = (Path(path) if path is not None else DEFAULT_TEMPLATE).resolve()
    data = p.read_bytes()
    return _parse_cached(data.decode("utf-8"), template_version(data), p)


def prompt_version(path: Path | str | None = None) -> str:
    """The version (content hash) of the template at ``path`` (default: the shipped one)."""
    return load_template(path).version
