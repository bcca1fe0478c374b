"""The ``local`` question engine: vetted fixed questions, one per kind of ambiguity.

Deterministic and offline. For each ambiguity found in the request
(``processors.clarification.ambiguity.find_ambiguities``, in its order) the fixed question
of :data:`TEMPLATES` for its kind is asked; **no word of the request is ever quoted** (a
quoted span may be harm vocabulary, issue 23); at most ``LOCAL_MAX_QUESTIONS`` questions,
and a scope question is added when only one kind was found, so a set always has two to
three questions. The templates are open questions about
intent and context: no examples, no suggested wording, no yes/no choice that offers an
answer, no method, no depth of detail, no policy words and no harm vocabulary; every
filled set is still run through the circumvention check, and a set that fails it (a
request whose own words trip a rule, e.g. one quoting a policy) is returned as a
``circumvention`` failure, never surfaced.
"""

from __future__ import annotations

from dataclasses import dataclass

from processors.clarification.ambiguity import KIND_DESCRIPTIONS, Ambiguity, AmbiguityKind
from processors.clarification.base import GeneratedQuestions, QuestionContext
from processors.clarification.circumvention_model import RULES_CHECK, CircumventionCheck
from schemas.clarification import ClarificationQuestion, QuestionSet

ENGINE_VERSION = "local-questions-2"
LOCAL_MAX_QUESTIONS = 3
"""The local engine asks at most three questions (the schema allows four): fewer questions
are answered more often."""


@dataclass(frozen=True)
class Template:
    """A vetted question: ``text`` (fixed: no words of the request are inserted) and
    ``guardrail``, its ``safety_guardrail``."""

    text: str
    guardrail: str


TEMPLATES: dict[AmbiguityKind, Template] = {
    AmbiguityKind.whose_data: Template(
        "Whose information is this about, and how are you connected to that person?",
        "Asks about the relationship to the person concerned, not how to obtain anything; "
        "open-ended, so it suggests no answer.",
    ),
    AmbiguityKind.authorisation: Template(
        "What is your role with respect to what you mention, and who manages it?",
        "Asks for the requester's role and the responsible party, not for a claim of "
        "permission or a way in; open-ended, offers no role to pick.",
    ),
    AmbiguityKind.who_is_asking: Template(
        "In what role or setting are you asking this?",
        "Asks who is asking without listing roles, so it offers no answer to copy.",
    ),
    AmbiguityKind.scope: Template(
        "What exactly should the answer cover?",
        "Asks what the request is about, not about methods or how much detail; names no content.",
    ),
    AmbiguityKind.purpose: Template(
        "What is the situation that led you to ask this?",
        "Asks for intent and context in the user's own words; suggests no purpose.",
    ),
}
"""One fixed question per kind of ambiguity. **No template quotes the request**: a quoted
word of the request may be harm vocabulary ("... ask about \"toxic gas\"?"), and echoing
the harmful object back as the question's topic tells its author what the service took the
request to be about (tests/test_clarification_screen.py checks every template)."""


def question_for(ambiguity: Ambiguity) -> ClarificationQuestion:
    """The template question of one ambiguity (its span is not used: nothing is quoted)."""
    template = TEMPLATES[ambiguity.kind]
    return ClarificationQuestion(
        question_text=template.text,
        target_ambiguity=KIND_DESCRIPTIONS[ambiguity.kind],
        safety_guardrail=template.guardrail,
    )


def local_question_set(ambiguities: tuple[Ambiguity, ...] | list[Ambiguity]) -> QuestionSet:
    """The question set for ``ambiguities`` (module docstring). Raises ``ValueError`` when
    ``ambiguities`` is empty (``find_ambiguities`` always returns a purpose ambiguity)."""
    if not ambiguities:
        raise ValueError("no ambiguity to ask about")
    chosen = list(ambiguities[:LOCAL_MAX_QUESTIONS])
    if AmbiguityKind.purpose not in {a.kind for a in chosen}:
        purpose = next((a for a in ambiguities if a.kind == AmbiguityKind.purpose), None)
        if purpose is not None:
            chosen[-1] = purpose  # intent and context are always asked about
    if len(chosen) == 1:
        chosen.insert(0, Ambiguity(AmbiguityKind.scope, chosen[0].span))
    return QuestionSet(questions=[question_for(a) for a in chosen])


class LocalQuestionEngine:
    """The ``local`` question engine (module docstring); satisfies
    ``processors.clarification.base.QuestionEngine``."""

    name = "local"
    model = "templates"
    version = ENGINE_VERSION
    prompt_version = "none"
    check: CircumventionCheck = RULES_CHECK
    """The circumvention check (the application sets the trained one)."""

    def generate_sync(self, context: QuestionContext) -> GeneratedQuestions:
        """The questions for ``context``, synchronously (no I/O)."""
        questions = local_question_set(context.ambiguities)
        check = self.check.check_question_set(questions, context.request, context.refusal)
        if not check.ok:
            return GeneratedQuestions(
                None, "circumvention", (check.describe(),), reasons=tuple(check.reasons)
            )
        return GeneratedQuestions(questions)

    async def generate(self, context: QuestionContext) -> GeneratedQuestions:
        """See :meth:`generate_sync`."""
        return self.generate_sync(context)
