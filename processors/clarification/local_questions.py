"""The ``local`` question engine: vetted templates, filled only with words of the request.

Deterministic and offline. For each ambiguity found in the request
(``processors.clarification.ambiguity.find_ambiguities``, in its order) one template of
:data:`TEMPLATES` is filled with the ambiguity's span (words of the request, lower-cased,
at most four) or, when it has none, its span-free variant (also used when the span is too
long, or names a harmful operation: harm vocabulary is never quoted back,
``processors.clarification.circumvention.quoted_harm``); at most
``LOCAL_MAX_QUESTIONS`` questions, and a scope question is added when only one kind was
found, so a set always has two to three questions. The templates are open questions about
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
from processors.clarification.circumvention import check_question_set, quoted_harm
from schemas.clarification import ClarificationQuestion, QuestionSet

ENGINE_VERSION = "local-questions-1"
MAX_SPAN_CHARS = 60
"""A longer span (long words, a URL) is not quoted: the span-free variant is asked."""
LOCAL_MAX_QUESTIONS = 3
"""The local engine asks at most three questions (the schema allows four): fewer questions
are answered more often."""


@dataclass(frozen=True)
class Template:
    """A vetted question: ``with_span`` holds ``{span}``; ``without_span`` is used when the
    ambiguity has no span; ``guardrail`` is its ``safety_guardrail``."""

    with_span: str
    without_span: str
    guardrail: str


TEMPLATES: dict[AmbiguityKind, Template] = {
    AmbiguityKind.whose_data: Template(
        'When you mention "{span}", whose information is this, and how are you connected '
        "to that person?",
        "Whose information is this about, and how are you connected to that person?",
        "Asks about the relationship to the person concerned, not how to obtain anything; "
        "open-ended, so it suggests no answer.",
    ),
    AmbiguityKind.authorisation: Template(
        "What is your role with respect to the {span} you mention, and who manages it?",
        "What is your role with respect to what you mention, and who manages it?",
        "Asks for the requester's role and the responsible party, not for a claim of "
        "permission or a way in; open-ended, offers no role to pick.",
    ),
    AmbiguityKind.who_is_asking: Template(
        'In what role or setting are you asking about "{span}"?',
        "In what role or setting are you asking this?",
        "Asks who is asking without listing roles, so it offers no answer to copy.",
    ),
    AmbiguityKind.scope: Template(
        'What exactly should the answer about "{span}" cover?',
        "What exactly should the answer cover?",
        "Asks what the request is about, not about methods or how much detail; names no content.",
    ),
    AmbiguityKind.purpose: Template(
        'What is the situation that led you to ask about "{span}"?',
        "What is the situation that led you to ask this?",
        "Asks for intent and context in the user's own words; suggests no purpose.",
    ),
}


def question_for(ambiguity: Ambiguity) -> ClarificationQuestion:
    """The filled template of one ambiguity (span-free when the span is too long or quotes
    harm vocabulary)."""
    template = TEMPLATES[ambiguity.kind]
    span = ambiguity.span.replace('"', "").strip()
    text = template.with_span.format(span=span) if span else template.without_span
    if len(span) > MAX_SPAN_CHARS or quoted_harm(span):
        text = template.without_span
    return ClarificationQuestion(
        question_text=text,
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

    def generate_sync(self, context: QuestionContext) -> GeneratedQuestions:
        """The questions for ``context``, synchronously (no I/O)."""
        questions = local_question_set(context.ambiguities)
        check = check_question_set(questions, context.request, context.refusal)
        if not check.ok:
            return GeneratedQuestions(None, "circumvention", (check.describe(),))
        return GeneratedQuestions(questions)

    async def generate(self, context: QuestionContext) -> GeneratedQuestions:
        """See :meth:`generate_sync`."""
        return self.generate_sync(context)
