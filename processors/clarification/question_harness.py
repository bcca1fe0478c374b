"""The ``openai`` question engine's harness: an LLM writes the questions, this checks them.

One refusal, one chat completion (``inference.chat`` and ``processors.engines.llm_call``,
shared with the audit engine: the same client handling, usage counting, JSON decoding, retry
turn and API-key masking). The engine, ``inference.questions.OpenAIQuestionEngine``, makes
the calls; this module holds what needs no network (:class:`QuestionHarness`: the prompt
values, the check of an answer) and the schema:

1. The prompt is ``prompts/clarify_v1.md`` (``prompts.clarification``), filled with the request
   (USER_INPUT), the refusal and its category (REFUSAL_REASON), the ambiguities found in
   the request (AMBIGUITY_DESCRIPTION), the bundle's clauses most relevant to the request
   (POLICY_CONTEXT: the cited clause and the best BM25 matches of the audit engine's clause
   index, ``processors.engines.clause_index.ClauseIndex``) and its permitted clauses among them
   (SAFE_INTERPRETATION_CRITERIA).
2. ``response_format`` is strict ``json_schema`` (:data:`QUESTIONS_JSON_SCHEMA`) or
   ``json_object``. The answer must decode to a JSON object that validates as
   ``schemas.clarification.QuestionSet`` (2..4 questions, every field, bounded lengths) and
   pass the circumvention check (``processors.clarification.circumvention``).
3. On any failure, ONE retry in the same conversation, with a stronger constraint and the
   validation errors (or the check's findings) appended.
4. If the retry fails too, no question is returned: ``GeneratedQuestions.failure`` is
   ``invalid_questions`` (schema, refusal, truncation) or ``circumvention`` (the last set
   was schema-valid but failed the check), and the caller escalates. An unvalidated
   question is never returned. An API failure, or the request's time budget
   (``deadline_seconds``, setting ``openai_request_deadline_seconds``) running out, is
   ``invalid_questions`` with the error.

``raw_output`` is a JSON array with one ``{"kind", "finish_reason", "content", "refusal"}``
object per call (kinds ``questions``, ``retry``), API key masked.

The prompt's maintainer notes still call this module ``openai_questions`` (its name before issue
26): the prompt version is the hash of the whole file, so editing them would make a new
prompt version.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

import orjson
from pydantic import ValidationError

from processors.clarification.ambiguity import describe_ambiguities
from processors.clarification.base import QuestionContext
from processors.clarification.circumvention_model import RULES_CHECK, CircumventionCheck
from processors.engines.clause_index import ClauseIndex
from processors.engines.llm_call import ChatAnswer, cut, decode_json_object, describe_error
from processors.engines.local_text import tokenize
from schemas.clarification import (
    MAX_QUESTIONS,
    MIN_QUESTIONS,
    NOTE_MAX_CHARS,
    QUESTION_MAX_CHARS,
    QUESTION_MIN_CHARS,
    QuestionSet,
)
from schemas.policy import Clause, PolicyBundle

ENGINE_VERSION = "openai-questions-1"
QUESTIONS_SCHEMA_NAME = "clarification_questions"

QUESTIONS_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "questions": {
            "type": "array",
            "description": "Two to four clarification questions.",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "question_text": {
                        "type": "string",
                        "description": "The question the user sees (10 to 300 characters).",
                    },
                    "target_ambiguity": {
                        "type": "string",
                        "description": "What the question disambiguates.",
                    },
                    "safety_guardrail": {
                        "type": "string",
                        "description": "Why the question does not guide the user toward an "
                        "unsafe rephrasing.",
                    },
                },
                "required": ["question_text", "target_ambiguity", "safety_guardrail"],
            },
        }
    },
    "required": ["questions"],
}
"""The strict-mode wire schema of a question set (bounds are checked by pydantic)."""


def _questions_grammar_schema() -> dict[str, Any]:
    schema = copy.deepcopy(QUESTIONS_JSON_SCHEMA)
    questions = schema["properties"]["questions"]
    questions |= {"minItems": MIN_QUESTIONS, "maxItems": MAX_QUESTIONS}
    fields = questions["items"]["properties"]
    fields["question_text"] |= {"minLength": QUESTION_MIN_CHARS, "maxLength": QUESTION_MAX_CHARS}
    fields["target_ambiguity"] |= {"minLength": 3, "maxLength": NOTE_MAX_CHARS}
    fields["safety_guardrail"] |= {"minLength": 10, "maxLength": NOTE_MAX_CHARS}
    return schema


QUESTIONS_GRAMMAR_SCHEMA = _questions_grammar_schema()
""":data:`QUESTIONS_JSON_SCHEMA` with ``schemas.clarification.QuestionSet``'s bounds (2-4
questions, each text's length), sent to llama.cpp, which compiles it into a decoding
grammar: a small model cannot fill a string to the output cap (SmolLM2-135M wrote 1,010
tokens per answer on average without it, docs/llm-engine.md). Not sent to OpenAI, whose
strict mode documents a smaller subset; pydantic checks the same bounds for every server."""

POLICY_CONTEXT_CLAUSES = 4
"""Clauses of the bundle shown as POLICY_CONTEXT (the cited one first, then the best BM25
matches of the request): enough to show both sides of a gray zone, few enough to keep the
prompt short."""

RETRY_CONSTRAINT = (
    'Answer again with ONLY one JSON object of the output schema: {"questions": [...]} with '
    "at least 2 and at most 4 questions, each with a non-empty question_text (10 to 300 "
    "characters), target_ambiguity and safety_guardrail. Ask only open questions about intent "
    "and context. No examples, no suggested wording, no methods, no policy or safety words, "
    "no leading or yes/no questions offering a purpose or role, no request to promise or "
    "confirm harmless intent, and no harm words the request does not use."
)


def _clause_line(clause: Clause) -> str:
    text = " ".join(clause.text.split())
    return f"{clause.clause_id} [{clause.stance}] {cut(text, 400)}"


class QuestionHarness:
    """The network-free steps of the ``openai`` question engine
    (``inference.questions.OpenAIQuestionEngine``, which sets ``max_output_tokens``): the
    prompt's placeholder values (:meth:`values`, with the clause index of the bundle) and
    the check of one answer (schema, then :attr:`check`)."""

    max_output_tokens: int
    check: CircumventionCheck = RULES_CHECK
    """The circumvention check (the application sets the trained one)."""

    _indexes: OrderedDict[str, ClauseIndex] | None = None
    """The clause indexes of the last bundles seen (by version), made on first use."""

    # -- the prompt ----------------------------------------------------------------------------
    def _index(self, bundle: PolicyBundle) -> ClauseIndex:
        if self._indexes is None:
            self._indexes = OrderedDict()
        idx = self._indexes.get(bundle.version)
        if idx is None:
            idx = ClauseIndex(bundle)
            self._indexes[bundle.version] = idx
            while len(self._indexes) > 8:
                self._indexes.popitem(last=False)
        return idx

    def relevant_clauses(self, context: QuestionContext) -> list[Clause]:
        """The cited clause, then the clauses with the best BM25 score for the request (score
        > 0), ``POLICY_CONTEXT_CLAUSES`` at most, in that order."""
        bundle = context.bundle
        chosen: list[Clause] = []
        cited = bundle.clause(context.clause_id) if context.clause_id else None
        if cited is not None:
            chosen.append(cited)
        idx = self._index(bundle)
        scores = idx.scores(tokenize(context.request))
        for i in sorted(range(len(idx.clauses)), key=lambda j: (-scores[j], j)):
            if len(chosen) >= POLICY_CONTEXT_CLAUSES or scores[i] <= 0:
                break
            if idx.clauses[i] not in chosen:
                chosen.append(idx.clauses[i])
        return chosen

    def values(self, context: QuestionContext) -> dict[str, str]:
        """The five placeholder values for ``context`` (module docstring, step 1)."""
        clauses = self.relevant_clauses(context)
        allowed = [c for c in clauses if c.stance == "allow"]
        cited = f"; cited clause {context.clause_id}" if context.clause_id else ""
        return {
            "USER_INPUT": context.request,
            "REFUSAL_REASON": f"{context.refusal}\n(category: {context.category}{cited})",
            "AMBIGUITY_DESCRIPTION": describe_ambiguities(list(context.ambiguities)),
            "POLICY_CONTEXT": "\n".join(_clause_line(c) for c in clauses) or "(no clause matches)",
            "SAFE_INTERPRETATION_CRITERIA": "\n".join(
                ["The request may be fulfilled when the answers show it falls under:"]
                + [f"- {_clause_line(c)}" for c in allowed]
                if allowed
                else ["No permitted clause matches; ask what the request is for and about whom."]
            ),
        }

    def _check(
        self, answer: ChatAnswer, context: QuestionContext
    ) -> tuple[QuestionSet | None, str | None, list[str]]:
        data, code, message = decode_json_object(
            answer, self.max_output_tokens, "writing clarification questions"
        )
        if data is None:
            return None, "invalid_questions", [f"{code}: {message}"]
        try:
            questions = QuestionSet.model_validate_json(orjson.dumps(data))
        except ValidationError as exc:
            return None, "invalid_questions", [describe_error(e) for e in exc.errors()]
        check = self.check.check_question_set(questions, context.request, context.refusal)
        if not check.ok:  # sent back in the retry turn: codes and matched text, never the
            # trained check's score (a model must not be coached to its threshold)
            return (
                None,
                "circumvention",
                [
                    f"{f.code}: question {f.question + 1 if f.question is not None else '-'}: "
                    f"{f.detail}"
                    for f in check.findings
                ],
            )
        return questions, None, []
