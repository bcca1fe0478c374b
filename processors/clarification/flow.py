"""Opening a conversation: classify, route, ask or not, check, judge, in one place.

:class:`Clarifier` is what both interfaces (the HTTP service, later the Kafka service) call
for a new refusal; the rest of the loop is the pure state machine of
``processors.clarification.conversation``. The only I/O is the engines' (none for the
``local`` engines).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from processors.clarification.ambiguity import find_ambiguities
from processors.clarification.base import GeneratedQuestions, QuestionContext, QuestionEngine
from processors.clarification.circumvention_model import RULES_CHECK, CircumventionCheck
from processors.clarification.conversation import (
    EngineIdentity,
    open_asking,
    open_escalated,
    open_not_asked,
)
from processors.clarification.judge import CircumventionJudge, JudgeResult
from processors.clarification.routing import ClassificationError, RoutingDecision, classify
from processors.engines.base import AuditEngine, EngineError
from schemas.clarification import (
    ClarificationRequest,
    ConversationState,
    EscalationReason,
    Route,
)
from schemas.policy import PolicyBundle


class UnknownBundleError(LookupError):
    """The request names a policy bundle that is not configured."""


@dataclass(frozen=True)
class Opened:
    """A new conversation's ``state``, the routing ``decision`` (None when the classifier
    failed), the question engine's ``generated`` result (None when nothing was asked) and
    the LLM judge's run (``judged``, None when it did not run), for the audit trail."""

    state: ConversationState
    decision: RoutingDecision | None
    generated: GeneratedQuestions | None
    judged: JudgeResult | None = None


@dataclass
class Clarifier:
    """Classifier engine + question engine + bundles (by name) + the optional LLM judge.

    ``classifier`` is an audit engine (``local`` or ``openai``, possibly a cheaper model);
    ``questions`` a question engine; ``judge`` (None: off) the second stage of the
    circumvention check, asked only about a set the deterministic rules passed. ``open``
    never surfaces a question that did not pass the schema, the rules and (when on) the
    judge. The texts it is given are sent to the engines as they are: the service redacts
    them first (``refusal_audit.clarification.service``).
    """

    classifier: AuditEngine
    questions: QuestionEngine
    bundles: Mapping[str, PolicyBundle]
    judge: CircumventionJudge | None = None
    check: CircumventionCheck = RULES_CHECK
    """The circumvention check every set must pass (the application passes the trained one,
    ``refusal_audit.clarification.circumvention_check``; default the strict rules)."""

    def bundle(self, name: str) -> PolicyBundle:
        """The bundle ``name``. Raises :class:`UnknownBundleError`."""
        bundle = self.bundles.get(name)
        if bundle is None:
            raise UnknownBundleError(
                f"policy bundle {name!r} is not configured (configured: {sorted(self.bundles)})"
            )
        return bundle

    @property
    def identity(self) -> EngineIdentity:
        """The question engine's identity, as the state keeps it."""
        q = self.questions
        return EngineIdentity(q.name, q.model, q.prompt_version)

    async def open(self, request: ClarificationRequest, now: datetime) -> Opened:
        """Classify ``request``'s refusal, route it and, for ``policy_gray_zone``, ask.

        Outcomes: ``not_asked`` (another route), ``asking`` (checked questions) or
        ``escalated`` (``classification_failed``, ``invalid_questions`` -- also when the
        question engine's API failed --, ``circumvention`` -- the rules, or the judge,
        rejected the set -- or ``judge_failed``). Raises
        :class:`UnknownBundleError` for an unconfigured bundle.
        """
        bundle = self.bundle(request.policy_bundle)
        try:
            decision = await classify(request, bundle, self.classifier)
        except ClassificationError as exc:
            state = open_escalated(
                request, None, EscalationReason.classification_failed, str(exc),
                EngineIdentity(), now,
            )  # fmt: skip
            return Opened(state, None, None)
        if decision.route != Route.policy_gray_zone:
            return Opened(open_not_asked(request, decision, now), decision, None)
        context = QuestionContext(
            request=request.request,
            refusal=request.refusal,
            category=decision.category,
            route=decision.route,
            bundle=bundle,
            ambiguities=tuple(find_ambiguities(request.request)),
            clause_id=decision.clause_id,
        )
        try:
            generated = await self.questions.generate(context)
        except EngineError as exc:
            generated = GeneratedQuestions(None, "invalid_questions", (f"engine_error: {exc}",))
        if generated.questions is None:
            reason = (
                EscalationReason.circumvention
                if generated.failure == "circumvention"
                else EscalationReason.invalid_questions
            )
            detail = "; ".join(generated.errors) or reason.value
            state = open_escalated(
                request, decision, reason, detail, self.identity, now,
                circumvention_reasons=generated.reasons,
            )  # fmt: skip
            return Opened(state, decision, generated)
        check = self.check.check_question_set(generated.questions, request.request, request.refusal)
        if not check.ok:  # an engine must not return an unchecked set; never surface one
            state = open_escalated(
                request, decision, EscalationReason.circumvention, check.describe(),
                self.identity, now, circumvention_reasons=check.reasons,
            )  # fmt: skip
            return Opened(state, decision, generated)
        if self.judge is None:
            state = open_asking(request, decision, generated.questions, self.identity, now)
            return Opened(state, decision, generated)
        judged = await self.judge.judge(generated.questions, request.request, request.refusal)
        if judged.passed:
            state = open_asking(
                request, decision, generated.questions, self.identity, now, judged.verdict
            )
            return Opened(state, decision, generated, judged)
        reason = (
            EscalationReason.circumvention
            if judged.verdict.verdict == "reject"
            else EscalationReason.judge_failed
        )
        state = open_escalated(
            request, decision, reason, judged.describe(), self.identity, now, judged.verdict
        )
        return Opened(state, decision, generated, judged)
