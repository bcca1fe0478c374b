"""Tests of the policy bundle parser on the example bundle and on inline Markdown."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from processors.policy import (
    REQUIRED_CODES,
    VERSION_SEPARATOR,
    PolicyParseError,
    bundle_version,
    parse_bundle,
    parse_clauses,
    parse_taxonomy,
)
from schemas.policy import PolicyBundle

REPO_ROOT = Path(__file__).resolve().parents[1]
POLICIES = REPO_ROOT / "refusal_audit" / "example_policies"

TAXONOMY = """\
- `over_refusal`: Refused a compliant request.
- `policy_gray_zone`: Unclear.
- `capability_boundary`: Cannot do it.
- `clarification_needed`: Needs more detail.
- `genuine_safety_refusal`: Correct refusal.
  - `violence`: Violence.
  - `privacy`: Privacy.
"""


def _read(name: str) -> str:
    return (POLICIES / name).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def bundle(example_bundle: PolicyBundle) -> PolicyBundle:
    return example_bundle


# --- the example bundle -----------------------------------------------------------------------
def test_example_bundle_parses_with_unique_prefixed_ids(bundle: PolicyBundle) -> None:
    ids = [c.clause_id for c in bundle.clauses]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"(AUP|PSP)-\d+(\.\d+)*", i) for i in ids)
    assert {c.document for c in bundle.clauses if c.clause_id.startswith("AUP")} == {
        "allowed_use"
    }
    assert {c.document for c in bundle.clauses if c.clause_id.startswith("PSP")} == {
        "product_safety"
    }
    assert bundle.name == "wren"


def test_example_bundle_stances_and_areas(bundle: PolicyBundle) -> None:
    permitted = [c for c in bundle.clauses if c.stance == "allow"]
    prohibited = [c for c in bundle.clauses if c.stance == "prohibit"]
    assert len(permitted) >= 10 and len(prohibited) >= 10
    violence = bundle.clause("AUP-2.1")
    assert violence is not None
    assert (violence.stance, violence.harm_area) == ("prohibit", "violence")
    # sub-clauses inherit stance and area from their parent
    replicate = bundle.clause("AUP-2.1.1")
    assert replicate is not None
    assert (replicate.stance, replicate.harm_area) == ("prohibit", "violence")
    homonyms = bundle.clause("AUP-1.7")
    assert homonyms is not None and homonyms.stance == "allow" and homonyms.harm_area is None
    browsing = bundle.clause("PSP-1.1")
    assert browsing is not None
    assert (browsing.stance, browsing.harm_area) == ("neutral", "capability_boundary")
    # every prohibited harm area is a sub-code of genuine_safety_refusal
    for clause in prohibited:
        if clause.harm_area is not None:
            assert bundle.top_level(clause.harm_area) == "genuine_safety_refusal"


def test_example_clause_text_is_own_text_only(bundle: PolicyBundle) -> None:
    parent = bundle.clause("AUP-2.1")
    child = bundle.clause("AUP-2.1.1")
    assert parent is not None and child is not None
    assert parent.title == "Violence against real people"
    assert parent.text.startswith("Violence against real people. ")
    assert "[area:" not in parent.text and "[area:" not in parent.title
    assert "Praising" in child.text and "Praising" not in parent.text


def test_example_taxonomy(bundle: PolicyBundle) -> None:
    codes = bundle.category_codes()
    assert set(REQUIRED_CODES) | {"clarification_needed"} <= codes
    subs = {t.code for t in bundle.taxonomy if t.parent == "genuine_safety_refusal"}
    assert {
        "violence", "weapons", "drugs", "self_harm", "hate_harassment", "sexual_minors",
        "privacy", "cyber", "fraud", "misinformation", "intellectual_property",
    } <= subs
    over = next(t for t in bundle.taxonomy if t.code == "over_refusal")
    assert over.parent is None and "false positive" in over.definition  # continuation joined


def test_bundle_version_is_content_hash(bundle: PolicyBundle) -> None:
    texts = (
        _read("allowed_use_policy.md"),
        _read("product_safety_policy.md"),
        _read("refusal_taxonomy.md"),
    )
    expected = hashlib.sha256(VERSION_SEPARATOR.join(texts).encode()).hexdigest()[:16]
    assert bundle.version == expected == bundle_version(*texts)
    assert re.fullmatch(r"[0-9a-f]{16}", bundle.version)
    changed = parse_bundle("wren", texts[0] + "\n", texts[1], texts[2])
    assert changed.version != bundle.version
    assert parse_bundle("other-name", *texts).version == bundle.version


# --- inline Markdown --------------------------------------------------------------------------
def test_nesting_inheritance_and_own_text() -> None:
    md = """\
# A policy
Intro text is not a clause.

## 1 Permitted uses [stance: allow]
Section intro.

### 1.1 Fiction. [area: violence]
Stories with violence.

#### 1.1.4 Villains
Villain monologues.

## 2 Prohibited uses [stance: prohibit]
### 2.1 Doxxing [area: privacy]
Exposing addresses.
#### 2.1.1 Public officials [stance: neutral]
Official residences.
"""
    clauses = parse_clauses(md, "allowed_use", "AUP")
    by_id = {c.clause_id: c for c in clauses}
    assert list(by_id) == ["AUP-1", "AUP-1.1", "AUP-1.1.4", "AUP-2", "AUP-2.1", "AUP-2.1.1"]
    assert by_id["AUP-1"].text == "Permitted uses. Section intro."
    assert by_id["AUP-1.1"].title == "Fiction"
    assert by_id["AUP-1.1"].text == "Fiction. Stories with violence."
    assert by_id["AUP-1.1.4"].text == "Villains. Villain monologues."
    assert by_id["AUP-1.1.4"].number == "1.1.4"
    assert (by_id["AUP-1.1.4"].stance, by_id["AUP-1.1.4"].harm_area) == ("allow", "violence")
    assert (by_id["AUP-2.1"].stance, by_id["AUP-2.1"].harm_area) == ("prohibit", "privacy")
    assert (by_id["AUP-2.1.1"].stance, by_id["AUP-2.1.1"].harm_area) == ("neutral", "privacy")


def test_missing_intermediate_number_inherits_from_nearest_ancestor() -> None:
    md = "## 3 Rules [stance: prohibit]\n#### 3.2.7 Deep rule\nText.\n"
    clauses = parse_clauses(md, "product_safety", "PSP")
    assert [c.clause_id for c in clauses] == ["PSP-3", "PSP-3.2.7"]
    assert clauses[1].stance == "prohibit"


def test_untagged_clauses_are_neutral_and_unnumbered_headings_end_bodies() -> None:
    md = "## 1 Rule\nBody one.\n## Notes\nNot part of the clause.\n```\n## 9 Not a clause\n```\n"
    (clause,) = parse_clauses(md, "product_safety", "PSP")
    assert (clause.stance, clause.harm_area) == ("neutral", None)
    assert clause.text == "Rule. Body one."


def test_duplicate_clause_number_is_an_error() -> None:
    md = "## 1 First\nA.\n## 1 Again\nB.\n"
    with pytest.raises(PolicyParseError, match=r"duplicate clause number 1"):
        parse_clauses(md, "allowed_use", "AUP")


@pytest.mark.parametrize(
    ("md", "message"),
    [
        ("# Title\nJust prose.\n1. a list item\n", "no clauses found"),
        ("## 1 Rule [stance: maybe]\n", "stance 'maybe'"),
        ("## 1 Rule [colour: red]\n", "unknown tag"),
        ("## 1 Rule [area: Not A Code]\n", "lower_snake_case"),
        ("## 1 [stance: allow]\n", "has no title"),
    ],
)
def test_clause_errors(md: str, message: str) -> None:
    with pytest.raises(PolicyParseError, match=message):
        parse_clauses(md, "allowed_use", "AUP")


def test_taxonomy_parsing_with_nesting() -> None:
    codes = parse_taxonomy("# Taxonomy\n\n" + TAXONOMY)
    assert [c.code for c in codes] == [
        "over_refusal", "policy_gray_zone", "capability_boundary", "clarification_needed",
        "genuine_safety_refusal", "violence", "privacy",
    ]
    violence = next(c for c in codes if c.code == "violence")
    assert (violence.parent, violence.definition) == ("genuine_safety_refusal", "Violence.")


def test_taxonomy_missing_required_codes_is_an_error() -> None:
    md = "- `over_refusal`: x\n- `policy_gray_zone`: y\n"
    with pytest.raises(PolicyParseError, match="capability_boundary, genuine_safety_refusal"):
        parse_taxonomy(md)


@pytest.mark.parametrize(
    ("md", "message"),
    [
        ("  - `violence`: orphan\n" + TAXONOMY, "no parent item"),
        (TAXONOMY + "- `violence`: again\n", "duplicate taxonomy code 'violence'"),
        (TAXONOMY + "- `Bad-Code`: x\n", "not lower_snake_case"),
        (TAXONOMY + "- `empty`:\n", "has no definition"),
        (
            "- `genuine_safety_refusal`: a\n  - `over_refusal`: b\n- `policy_gray_zone`: c\n"
            "- `capability_boundary`: d\n",
            "must be top-level: over_refusal",
        ),
    ],
)
def test_taxonomy_errors(md: str, message: str) -> None:
    with pytest.raises(PolicyParseError, match=message):
        parse_taxonomy(md)


def test_bundle_rejects_area_not_in_taxonomy() -> None:
    aup = "## 2 Prohibited [stance: prohibit]\n### 2.1 Weapons [area: weapons]\nBombs.\n"
    psp = "## 1 Limits\nNo browsing.\n"
    with pytest.raises(PolicyParseError, match=r"AUP-2.1: area 'weapons' is not a taxonomy code"):
        parse_bundle("b", aup, psp, TAXONOMY)


def test_bundle_errors_name_the_document() -> None:
    with pytest.raises(PolicyParseError, match=r"^product safety policy: no clauses found"):
        parse_bundle("b", "## 1 Rule\n", "no clauses here\n", TAXONOMY)
    with pytest.raises(PolicyParseError, match=r"^taxonomy: "):
        parse_bundle("b", "## 1 Rule\n", "## 1 Rule\n", "- `x`: y\n")
