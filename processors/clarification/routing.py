"""Classify, then route: a refusal's taxonomy category decides whether to ask at all.

The classifier is an audit engine (``processors.engines.base.AuditEngine``: the offline
``LocalEngine`` or the ``openai`` engine, possibly with a cheaper model than the question
generator). It audits a one-event batch built from the clarification request; the
assessment's category is lifted to the bundle taxonomy's top-level code
(``PolicyBundle.top_level``) and mapped to a :class:`schemas.clarification.Route` by
:data:`ROUTES`. A top-level code outside that table routes to
``genuine_safety_refusal``: an unknown kind of refusal is never clarified. A clarify route
whose request is unknowable or subjective, or whose refusal states a capability limit,
becomes ``capability_boundary`` (:func:`refine_route`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from processors.engines.base import AuditEngine, EngineError
from processors.engines.local import find_cues
from schemas.clarification import ClarificationRequest, Route
from schemas.events import RefusalEvent
from schemas.policy import PolicyBundle

ROUTES: dict[str, Route] = {
    "over_refusal": Route.over_refusal,
    "policy_gray_zone": Route.policy_gray_zone,
    # the example taxonomy's "incomplete, underspecified, unknowable" code: the right response
    # is a clarifying question (refusal_audit/example_policies/refusal_taxonomy.md)
    "clarification_needed": Route.policy_gray_zone,
    "capability_boundary": Route.capability_boundary,
    "genuine_safety_refusal": Route.genuine_safety_refusal,
}
"""Top-level taxonomy code -> route; every other code routes to ``genuine_safety_refusal``."""

EXPLAIN_FAMILIES = frozenset({"unknowable_request", "subjective_request", "capability"})
"""Cue families of the audit engine (``processors.engines.local.CUES``) that turn a clarify
route into ``capability_boundary`` (explain): the request asks something nobody can know or
that is a matter of taste, or the refusal states a capability limit. Asking the user cannot
resolve either; CoCoNot labels such refusals "Unknowns" and "Unsupported requests", not
"Incomplete requests" (Brahman et al., NeurIPS 2024)."""


class ClassificationError(RuntimeError):
    """The classifier engine gave no usable category for the refusal (caller escalates)."""


@dataclass(frozen=True)
class RoutingDecision:
    """The classifier's call: ``category`` (taxonomy code), its ``top_level`` code, the
    ``route``, the cited clause id (or None) and the engine's rationale."""

    category: str
    top_level: str
    route: Route
    clause_id: str | None
    rationale: str


def request_hash(text: str) -> str:
    """The sha256 hex digest of a request text (UTF-8), as ``ConversationState`` keeps it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def route_for(category: str, bundle: PolicyBundle) -> Route:
    """The route of taxonomy code ``category`` under ``bundle`` (module docstring)."""
    return ROUTES.get(bundle.top_level(category), Route.genuine_safety_refusal)


def as_event(request: ClarificationRequest) -> RefusalEvent:
    """The one-event audit batch of a clarification request (same ids, texts and bundle)."""
    return RefusalEvent(
        log_id=request.log_id,
        event_time=request.event_time,
        request=request.request,
        response=request.refusal,
        model=request.model or "unknown",
        product=request.product or "unknown",
        policy_bundle=request.policy_bundle,
        conversation_id=request.conversation_id,
    )


async def classify(
    request: ClarificationRequest, bundle: PolicyBundle, engine: AuditEngine
) -> RoutingDecision:
    """Classify the refusal with ``engine`` and route it.

    Raises :class:`ClassificationError` when the engine fails (``EngineError``) or leaves
    the event unresolved. Deterministic for the ``local`` engine.
    """
    try:
        output = await engine.audit([as_event(request)], bundle)
    except EngineError as exc:
        raise ClassificationError(f"classifier {engine.name} failed: {exc}") from exc
    assessments = [a for a in output.result.individual_assessments if a.log_id == request.log_id]
    if len(assessments) != 1:
        reason = output.unresolved.get(request.log_id, "no assessment returned")
        raise ClassificationError(f"classifier {engine.name} left the refusal unresolved: {reason}")
    a = assessments[0]
    top = bundle.top_level(a.category)
    route = refine_route(ROUTES.get(top, Route.genuine_safety_refusal), request)
    return RoutingDecision(
        category=a.category,
        top_level=top,
        route=route,
        clause_id=a.policy_clause_cited,
        rationale=a.assessment_rationale,
    )


def refine_route(route: Route, request: ClarificationRequest) -> Route:
    """``capability_boundary`` instead of ``policy_gray_zone`` when a cue family of
    :data:`EXPLAIN_FAMILIES` fires on the request or the refusal; every other route as is."""
    if route != Route.policy_gray_zone:
        return route
    families = {c.family for c, _ in find_cues(request.request, request.refusal)}
    return Route.capability_boundary if families & EXPLAIN_FAMILIES else route
