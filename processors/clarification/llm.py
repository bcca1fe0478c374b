"""What the clarification service's LLM engines share: the question engine
(``processors.clarification.openai_questions``) and the circumvention judge
(``processors.clarification.judge``) each fill one versioned prompt (``prompts.clarify``)
and ask for one JSON object of their schema, through ``processors.engines.llm_call``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import openai

from processors.engines.llm_call import CallSettings, JsonCaller
from prompts.clarify import ClarifyPrompt

if TYPE_CHECKING:  # annotations only (typing.Unpack is Python 3.12+)
    from typing_extensions import Unpack


class PromptedCaller(JsonCaller):
    """A ``JsonCaller`` with a clarification prompt.

    Subclasses set ``output_schema_name``/``output_schema`` (the strict output schema),
    ``default_max_output_tokens`` and ``load_prompt`` (the shipped template). ``client``,
    ``model`` and the call ``settings`` as for ``JsonCaller`` (``CallSettings``; without
    ``max_output_tokens``, the subclass's default); ``prompt`` None loads the shipped
    template. ``prompt_version``
    is the prompt's content hash. Raises ``ValueError`` for out-of-range settings.
    """

    output_schema_name: ClassVar[str]
    output_schema: ClassVar[dict[str, Any]]
    default_max_output_tokens: ClassVar[int] = 1024

    @staticmethod
    def load_prompt() -> ClarifyPrompt:
        """The shipped prompt template of this engine."""
        raise NotImplementedError

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        *,
        prompt: ClarifyPrompt | None = None,
        **settings: Unpack[CallSettings],
    ) -> None:
        settings.setdefault("max_output_tokens", self.default_max_output_tokens)
        super().__init__(client, model, self.output_schema_name, self.output_schema, **settings)
        self.prompt = prompt if prompt is not None else self.load_prompt()
        self.prompt_version = self.prompt.version

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model!r}, prompt_version={self.prompt_version!r})"
        )
