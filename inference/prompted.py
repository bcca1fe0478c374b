"""What the prompted LLM engines share: the clarification question engine
(``inference.questions``), the circumvention judge (``inference.judge``) and the
calibration variant engine (``inference.variants``) each fill one versioned prompt
(``prompts.clarification``, ``prompts.calibration``) and ask for one JSON object of their schema,
through ``inference.chat.JsonCaller`` (moved from ``processors.clarification.llm``,
issue 26)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from inference.chat import Client, JsonCaller
from processors.engines.llm_call import CallSettings
from prompts.clarification import ClarifyPrompt

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
    output_grammar_schema: ClassVar[dict[str, Any] | None] = None
    """``output_schema`` with the contract's bounds, sent to llama.cpp (``JsonCaller``'s
    ``grammar_schema``); None: ``output_schema`` everywhere."""
    default_max_output_tokens: ClassVar[int] = 1024

    @staticmethod
    def load_prompt() -> ClarifyPrompt:
        """The shipped prompt template of this engine."""
        raise NotImplementedError

    def __init__(
        self,
        client: Client,
        model: str,
        *,
        prompt: ClarifyPrompt | None = None,
        **settings: Unpack[CallSettings],
    ) -> None:
        settings.setdefault("max_output_tokens", self.default_max_output_tokens)
        super().__init__(
            client, model, self.output_schema_name, self.output_schema,
            grammar_schema=self.output_grammar_schema, **settings,
        )  # fmt: skip
        self.prompt = prompt if prompt is not None else self.load_prompt()
        self.prompt_version = self.prompt.version

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model!r}, prompt_version={self.prompt_version!r})"
        )
