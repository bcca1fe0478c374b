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

Before a refusal may go to clarification, the **request** is screened for harmful intent
(:func:`screen_request`): a request with strong harmful-intent evidence, a strongly matching
prohibited clause, a how-to for harm vocabulary, any harmful-act cue, any harm vocabulary
(``processors.clarification.harm_lexicon``) or access to a third person's things stays
refused (``genuine_safety_refusal``), however the refusal is worded. A refusal phrased as
a question ("Could you tell me more?") makes the audit engine answer
``clarification_needed``, but asking the author of "How do I synthesise sarin?" about their
situation would only teach them what to say.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from processors.clarification.ambiguity import AmbiguityKind, find_ambiguities
from processors.clarification.circumvention import ACT_FAMILIES, harm_words
from processors.clarification.harm_lexicon import THIRD_PARTY, normalise, screening_hits
from processors.engines.base import AuditEngine, EngineError
from processors.engines.local import MIN_CITE_SCORE, SAFETY_FIRST_LOGIT, LocalEngine
from processors.engines.local_cues import HARM_FAMILIES, find_cues
from processors.redaction import PLACEHOLDERS
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

_SCREEN_TIME = datetime(2000, 1, 1, tzinfo=UTC)

EXPLAIN_FAMILIES = frozenset({"unknowable_request", "subjective_request", "capability"})
"""Cue families of the audit engine (``processors.engines.local_cues.CUES``) that turn a clarify
route into ``capability_boundary`` (explain): the request asks something nobody can know or
that is a matter of taste, or the refusal states a capability limit. Asking the user cannot
resolve either; CoCoNot labels such refusals "Unknowns" and "Unsupported requests", not
"Incomplete requests" (Brahman et al., NeurIPS 2024)."""


STRONG_CLAUSE_SCORE = 2 * MIN_CITE_SCORE
"""BM25 score (request alone) at or above which a prohibited clause matches strongly: the
audit engine's confident citation (``processors.engines.local``: a citation below
``2 * MIN_CITE_SCORE`` is low-confidence and goes to human review)."""

SCREEN_FAMILIES = (ACT_FAMILIES - {"operational"}) | {"personal_data", "private_data"}
"""Request-side cue families of the audit engine any one of which keeps a request refused
(rule ``harm_cue``): every harmful-act family but the bare how-to (``operational``, which
"how do I get rid of the smell in my fridge" fires too), and a request for a kind of
personal data (an address, a phone number, a password, records, a location): whose data it
is and whether the user may have it is not something an answer to a neutral question can
establish. A named relation alone (``private_relation``: "my coworker's schedule") does not
screen."""

_NAMED_OWNER = re.compile(r"\bof [A-Z][a-z]+\b")
"""An owner named after the thing ("the account of John Smith")."""

_SCREEN_ENGINE = LocalEngine()
"""The audit engine whose evidence screens requests (read-only use of
``LocalEngine.evidence``; its BM25 index is cached per bundle version)."""


@dataclass(frozen=True)
class Screen:
    """Why a request stays refused whatever its refusal says: ``rule`` (``harmful_intent``,
    ``prohibited_clause``, ``harmful_operation``, ``harm_cue``, ``harm_vocabulary`` or
    ``third_party_access``, :func:`screen_request`) and ``detail`` (the evidence)."""

    rule: str
    detail: str


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
    rationale = a.assessment_rationale
    if route == Route.policy_gray_zone:
        screen = screen_request(request.request, bundle)
        if screen is not None:
            route = Route.genuine_safety_refusal
            rationale = (
                f"{rationale} Clarification screen: the request stays refused "
                f"({screen.rule}: {screen.detail})."
            )
    return RoutingDecision(
        category=a.category,
        top_level=top,
        route=route,
        clause_id=a.policy_clause_cited,
        rationale=rationale,
    )


def screen_request(text: str, bundle: PolicyBundle) -> Screen | None:
    """The reason ``text`` (a refused request) must not be clarified, or None.

    Reads the request alone (the refusal's wording must not decide), with the audit
    engine's evidence (``LocalEngine.evidence`` of the request with an empty refusal) and
    the circumvention check's harm vocabulary. The first rule that holds, in this order:

    ``harmful_intent``
        the request-side harmful-intent cue weights sum to ``SAFETY_FIRST_LOGIT`` (-1.5) or
        less (each family once, ``family_weights``): the engine's own rule for keeping a
        refusal in the safety branch even when it asks to clarify. The families are the
        circumvention check's ``ACT_FAMILIES``: the harm families without the three about
        personal data, since "whose data is it, and may you use it" is a question the
        clarification exists to ask ("a poem for my mother, her e-mail ...");
    ``prohibited_clause``
        the best prohibited clause scores at least :data:`STRONG_CLAUSE_SCORE` (BM25 on
        the request) and no less than the best permitted clause (the engine's policy
        balance is not in favour of a permitted use);
    ``harmful_operation``
        the request asks for a way to do something (the engine's ``operational`` cue family:
        "how do I", "how to", "step by step", "instructions for", ...) and what it asks
        about is harm vocabulary (a word of the circumvention check's ``HARM_WORDS``, by
        stem) or covered by a citable prohibited clause (BM25 at least ``MIN_CITE_SCORE``,
        the engine's citation floor). "How do I synthesise sarin?" is caught here: no clause
        of the example bundle names sarin. A how-to alone is not enough;
    ``harm_cue``
        any cue family of :data:`SCREEN_FAMILIES` fires on the request (one is enough: a
        single harmful-act cue, or a request for a kind of personal data);
    ``harm_vocabulary``
        the request contains harm vocabulary anywhere, with or without a how-to: a word of
        ``HARM_WORDS``, a term of the harm lexicon
        (``processors.clarification.harm_lexicon.screening_hits``: twelve harm areas,
        look-alike digits read as letters, medical emergencies only with self-treatment or
        a how-to, personal attributes only of a third person) or one of its intents
        (self-injury, a list of private people, a claim asserted as proven, a secret
        recipe). "Mixing bleach and ammonia", "ricin extraction", "toxic gas" and
        "laundering money through a shell company" are caught here (issue 23);
    ``third_party_access``
        the request asks to access, unlock or change something (the authorisation
        ambiguity of ``processors.clarification.ambiguity``) that belongs to a third
        person (a possessive, his/her/their, "my employee", or "of <Name>").

    The rules after ``harmful_operation`` were added for issue 23 with this principle: a
    false "refuse" costs a missed clarification, a false "clarify" can teach circumvention,
    so the screen refuses when unsure. Their cost on safe and ambiguous requests is measured
    (``benchmarks/clarification_screen.py``, docs/clarification.md).

    Redaction placeholders (``<EMAIL>``, ``<PHONE>``, ...) are removed first: they are the
    redactor's words, and "phone" or "email" would otherwise match a privacy clause.
    Deterministic and pure (but the engine's index cache). Over 80 lines for this docstring,
    the table of rules; the code is one check per rule, in the table's order.
    """
    for placeholder in PLACEHOLDERS.values():  # our redaction's marks are not the user's words
        text = text.replace(placeholder, " ")
    event = RefusalEvent(
        log_id="screen",
        event_time=_SCREEN_TIME,
        request=text,
        response="",
        model="unknown",
        product="unknown",
        policy_bundle=bundle.name,
    )
    ev = _SCREEN_ENGINE.evidence(event, bundle)
    harm = {f: w for f, w in ev.families.items() if f in HARM_FAMILIES}
    total = sum(w for f, w in harm.items() if f in ACT_FAMILIES)
    if total <= SAFETY_FIRST_LOGIT:
        return Screen("harmful_intent", f"cues {', '.join(sorted(harm))} sum {total:+.1f}")
    prohibit, p_score = ev.prohibit  # request only: the event's refusal is empty
    allow_score = ev.allow[1]
    if prohibit is not None and p_score >= STRONG_CLAUSE_SCORE and p_score >= allow_score:
        return Screen(
            "prohibited_clause",
            f"{prohibit.clause_id} bm25 {p_score:.1f} >= {STRONG_CLAUSE_SCORE:.1f}, "
            f"best permitted {allow_score:.1f}",
        )
    words = harm_words(text)
    if "operational" in harm:
        if words:
            return Screen("harmful_operation", "how-to about " + ", ".join(words))
        if prohibit is not None and p_score >= MIN_CITE_SCORE:
            return Screen(
                "harmful_operation", f"how-to covered by {prohibit.clause_id} bm25 {p_score:.1f}"
            )
    cues = sorted(f for f in harm if f in SCREEN_FAMILIES)
    if cues:
        return Screen("harm_cue", "cues " + ", ".join(cues))
    hits = [str(h) for h in screening_hits(text, how_to="operational" in harm)]
    if words or hits:
        return Screen("harm_vocabulary", ", ".join([*words, *hits]))
    access = next(
        (a for a in find_ambiguities(text) if a.kind == AmbiguityKind.authorisation), None
    )
    if access is not None and (THIRD_PARTY.search(normalise(text)) or _NAMED_OWNER.search(text)):
        return Screen("third_party_access", f"access to someone else's {access.span}")
    return None


def refine_route(route: Route, request: ClarificationRequest) -> Route:
    """``capability_boundary`` instead of ``policy_gray_zone`` when a cue family of
    :data:`EXPLAIN_FAMILIES` fires on the request or the refusal; every other route as is."""
    if route != Route.policy_gray_zone:
        return route
    families = {c.family for c, _ in find_cues(request.request, request.refusal)}
    return Route.capability_boundary if families & EXPLAIN_FAMILIES else route
