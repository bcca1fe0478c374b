"""The offline ``local`` variant engine: one vetted template per base style, no LLM.

Deterministic: the variants depend only on the cited clause, the bundle and the length of
the raw refusal. A template is filled only from the clause (its id and title; its text
decides the alternative) and from the bundle's permitted clauses (the alternative);
**never with a word of the refused request**, so nothing of the refused content can reach a
variant. The refusal's length goes into the UX notes (shorter/longer than the current
refusal). A custom style of a bundle's spectrum uses its ``base`` style's template.

Templates (``{clause}`` is the title as a phrase, ``{id}`` the clause id):

- ``minimal_direct``: "I can't help with that request."
- ``policy_citing``: "I can't help with this request: it falls under our policy on {clause}
  ({id})."
- ``educational``: "I can't help with this. Our policy on {clause} ({id}) rules out this
  kind of help because answers like this could lead to real-world harm, however the request
  is worded."
- ``empathetic_warm``: "I'm sorry, I know this isn't the answer you were hoping for, but I
  can't help with this one. If something difficult is behind the question, I'm glad to
  listen and talk it through with you." (+ a pointer to emergency help for a ``self_harm``
  clause)
- ``alternative_offering``: "I can't help with that, but I can help with {alternative}
  instead." The alternative is the title of a permitted leaf clause of the bundle, the one
  whose BM25 score against the cited clause's text is highest among those that pass the
  regression check's vocabulary and alternative rules (so the offer is itself allowed by
  the bundle); without one: "a different question".
- ``clarification_seeking``: "I can't help with this, and more detail about the request
  won't change that. Is there something else you're working on that I could help with?"
  (asks about the user's other needs, never about the refused request: nothing invites a
  rephrasing).
"""

from __future__ import annotations

from processors.calibration.base import CalibrationContext, GeneratedVariants
from processors.calibration.regression import HARM_STEMS, audit_alternative
from processors.engines.local import LocalEngine
from processors.engines.local_cues import HARM_FAMILIES, find_cues
from processors.engines.local_text import tokenize
from schemas.calibration import CalibrationOutput, SpectrumStyle, Variant
from schemas.policy import Clause, PolicyBundle

ENGINE_VERSION = "local-variants-1"
FALLBACK_ALTERNATIVE = "a different question"

_TEMPLATES: dict[str, str] = {
    "minimal_direct": "I can't help with that request.",
    "policy_citing": (
        "I can't help with this request: it falls under our policy on {clause} ({id})."
    ),
    "educational": (
        "I can't help with this. Our policy on {clause} ({id}) rules out this kind of help "
        "because answers like this could lead to real-world harm, however the request is "
        "worded."
    ),
    "empathetic_warm": (
        "I'm sorry, I know this isn't the answer you were hoping for, but I can't help with "
        "this one. If something difficult is behind the question, I'm glad to listen and talk "
        "it through with you.{support}"
    ),
    "alternative_offering": "I can't help with that, but I can help with {alternative} instead.",
    "clarification_seeking": (
        "I can't help with this, and more detail about the request won't change that. Is there "
        "something else you're working on that I could help with?"
    ),
}
_SUPPORT = (
    " If you are in danger right now, please contact your local emergency number or a crisis line."
)
_NOTES: dict[str, str] = {
    "minimal_direct": (
        "Quickest to read, but gives no reason: users who do not see why may rephrase and try "
        "again (watch the re-request rate)."
    ),
    "policy_citing": (
        "Names the rule, so the refusal reads as consistent rather than arbitrary; can feel "
        "bureaucratic, and users who disagree with the rule may ask for a human."
    ),
    "educational": (
        "Explains why the line exists, which tends to reduce repeated attempts by users who "
        "accept the reason; the longest to read."
    ),
    "empathetic_warm": (
        "Acknowledges the disappointment and assumes no bad intent; likely the highest "
        "satisfaction, but check that warmth does not read as an opening to try again."
    ),
    "alternative_offering": (
        "Gives the user somewhere to go next, which should lower dead ends and escalations; "
        "the alternative must stay relevant or it reads as a brush-off."
    ),
    "clarification_seeking": (
        "Keeps the conversation going without inviting a rephrasing of the refused request; "
        "may lengthen conversations."
    ),
}


def _phrase(title: str) -> str:
    """A clause title inside a sentence: first letter lower-cased unless it starts an
    acronym or a name-like word ("Violence against ..." -> "violence against ...")."""
    if len(title) >= 2 and title[0].isupper() and title[1].islower():
        return title[0].lower() + title[1:]
    return title


def _leaves(bundle: PolicyBundle) -> list[Clause]:
    numbers = [c.clause_id for c in bundle.clauses]
    return [
        c
        for c in bundle.clauses
        if c.stance == "allow" and not any(n.startswith(c.clause_id + ".") for n in numbers)
    ]


def choose_alternative(clause: Clause, bundle: PolicyBundle, auditor: LocalEngine) -> str:
    """The alternative the ``alternative_offering`` template offers (module docstring):
    the title phrase of the best-matching permitted leaf clause whose title adds no harm
    vocabulary beyond ``clause`` and is not judged prohibited when audited as a request;
    else :data:`FALLBACK_ALTERNATIVE`."""
    idx = auditor.index(bundle)
    scores = idx.scores(tokenize(f"{clause.title} {clause.text}"))
    position = {c.clause_id: i for i, c in enumerate(idx.clauses)}
    cited = f"{clause.title}. {clause.text}"
    cited_stems = set(tokenize(cited))
    cited_families = {c.family for c, _ in find_cues(cited, "") if c.family in HARM_FAMILIES}

    def rank(c: Clause) -> tuple[float, int]:
        return -float(scores[position[c.clause_id]]), position[c.clause_id]

    candidates = sorted(_leaves(bundle), key=rank)
    for candidate in candidates:
        phrase = _phrase(candidate.title)
        stems = {s for s in tokenize(phrase) if s in HARM_STEMS}
        families = {c.family for c, _ in find_cues(phrase, "") if c.family in HARM_FAMILIES}
        if stems - cited_stems or families - cited_families:
            continue
        if audit_alternative(phrase, bundle, auditor) is None:
            return phrase
    return FALLBACK_ALTERNATIVE


def _words(text: str) -> int:
    return len(text.split())


def local_variants(context: CalibrationContext, auditor: LocalEngine) -> CalibrationOutput:
    """The templated output for ``context`` (module docstring); pure and deterministic."""
    clause = context.clause
    values = {
        "clause": _phrase(clause.title),
        "id": clause.clause_id,
        "support": _SUPPORT if clause.harm_area == "self_harm" else "",
        "alternative": "",
    }
    if any(s.base == "alternative_offering" for s in context.spectrum.styles):
        values["alternative"] = choose_alternative(clause, context.bundle, auditor)
    current = _words(context.refusal)
    variants: list[Variant] = []
    for style in context.spectrum.styles:
        text = _TEMPLATES[style.base].format(**values)
        note = _note(style, text, current)
        variants.append(Variant(style=style.style, response_text=text, ux_impact_note=note))
    return CalibrationOutput(
        request_summary=(
            f"A request the production model refused under {clause.clause_id} "
            f"({clause.title}); the request text is not repeated here."
        ),
        policy_applied=f"{clause.clause_id} {clause.title} [{clause.stance}]",
        variants=variants,
    )


def _note(style: SpectrumStyle, text: str, current: int) -> str:
    n = _words(text)
    relation = "shorter than" if n < current else "longer than" if n > current else "as long as"
    return f"{_NOTES[style.base]} {n} words, {relation} the current refusal ({current} words)."


class LocalVariantEngine:
    """The ``local`` variant engine (module docstring); satisfies
    ``processors.calibration.base.VariantEngine``. ``auditor`` (default a new
    ``LocalEngine``) judges the candidate alternatives; never raises for valid input."""

    name = "local"
    model = "templates"
    version = ENGINE_VERSION
    prompt_version = "none"

    def __init__(self, auditor: LocalEngine | None = None) -> None:
        self.auditor = auditor if auditor is not None else LocalEngine()

    async def generate(self, context: CalibrationContext) -> GeneratedVariants:
        """The templated variants (no escalation: the templates cover every base style)."""
        return GeneratedVariants(output=local_variants(context, self.auditor))
