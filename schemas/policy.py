"""The policy bundle: a team's allowed-use policy, product safety policy and refusal taxonomy."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PolicyDocument = Literal["allowed_use", "product_safety"]


class Clause(BaseModel):
    """A numbered, citable clause of a policy document.

    ``clause_id`` is the document prefix plus the clause number, e.g. ``"AUP-2.3"`` for
    clause 2.3 of the allowed-use policy or ``"PSP-1.1.4"`` for the product safety policy,
    so clause ids are unique across the bundle. ``stance`` says whether the clause permits
    (``allow``) or prohibits (``prohibit``) what it describes, or is neither (``neutral``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    clause_id: str
    document: PolicyDocument
    number: str = Field(description="The clause number as written, e.g. '2.3'.")
    title: str = ""
    text: str
    stance: Literal["allow", "prohibit", "neutral"] = "neutral"
    harm_area: str | None = Field(
        default=None, description="Taxonomy code of the harm area the clause concerns, if any."
    )


class TaxonomyCode(BaseModel):
    """One refusal reason code of the taxonomy; ``parent`` is set for harm-area sub-codes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str
    definition: str
    parent: str | None = None


class PolicyBundle(BaseModel):
    """Everything an audit needs to judge a refusal: clauses and taxonomy codes.

    ``version`` is a content hash of the three source documents (sha256, first 16 hex digits),
    stored with every assessment so a policy change is visible in the warehouse.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str
    allowed_use_markdown: str
    product_safety_markdown: str
    taxonomy_markdown: str
    clauses: tuple[Clause, ...]
    taxonomy: tuple[TaxonomyCode, ...]

    def clause(self, clause_id: str) -> Clause | None:
        """Return the clause with this id, or None."""
        return next((c for c in self.clauses if c.clause_id == clause_id), None)

    def category_codes(self) -> frozenset[str]:
        """All valid category codes (reason codes and harm-area sub-codes)."""
        return frozenset(t.code for t in self.taxonomy)

    def top_level(self, code: str) -> str:
        """The top-level reason code of ``code`` (itself when it has no parent)."""
        by_code = {t.code: t for t in self.taxonomy}
        current = by_code.get(code)
        while current is not None and current.parent is not None:
            current = by_code.get(current.parent)
        return current.code if current is not None else code
