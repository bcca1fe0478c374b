"""Versioned prompt templates for LLM audit engines (the ``local`` engine uses none).

``load_template()`` returns the audit prompt (``audit_v1.md``) as an :class:`AuditPrompt`:
``.version`` (content hash), ``.messages(bundle, events)``, ``.overhead_tokens(bundle)``.
See :mod:`prompts.loader` for the template format.
"""

from prompts.loader import (
    BATCH_CLOSE,
    BATCH_OPEN,
    DEFAULT_TEMPLATE,
    SECTION_TITLES,
    AuditPrompt,
    PromptTemplateError,
    count_message_tokens,
    load_template,
    parse_batch,
    prompt_version,
    render_events,
)

__all__ = [
    "BATCH_CLOSE",
    "BATCH_OPEN",
    "DEFAULT_TEMPLATE",
    "SECTION_TITLES",
    "AuditPrompt",
    "PromptTemplateError",
    "count_message_tokens",
    "load_template",
    "parse_batch",
    "prompt_version",
    "render_events",
]
