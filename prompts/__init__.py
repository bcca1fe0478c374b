"""Versioned prompt templates of the LLM paths (the ``local`` engines use none): the audit
(``audit_v1.md``, :mod:`prompts.loader`), the clarification questions and judge
(``clarify_v1.md``, ``clarify_judge_v1.md``, :mod:`prompts.clarification`) and the
calibration variants (``calibrate_v1.md``, :mod:`prompts.calibration`).

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
