"""Parse a policy bundle (allowed-use policy, product safety policy, taxonomy) from Markdown.

Pure functions: the caller reads the files; nothing here touches the file system.

Clause convention (policy documents)
------------------------------------
A clause is a Markdown ATX heading (any level, ``#`` to ``######``) whose text starts with a
clause number: digits separated by dots, without a trailing dot::

    ## 2 Prohibited uses [stance: prohibit]
    ### 2.1 Violence against real people [area: violence]
    Instructions, planning or encouragement to kill ...
    #### 2.1.1 Glorifying or replicating real attacks
    Praising, justifying or glorifying ...

* The clause **body** is every line after the heading up to the next heading of any kind
  (numbered or not); whitespace is collapsed. ``Clause.text`` is ``"<title>. <body>"`` (or
  just the title when the body is empty): the clause's own text, never its sub-clauses'.
* **Nesting** comes from the number, not the heading level: ``1.1.4`` is a sub-clause of the
  nearest existing ancestor (``1.1``, else ``1``); intermediate numbers may be missing.
* **Tags** at the end of the heading: ``[stance: allow|prohibit|neutral]`` and
  ``[area: <taxonomy code>]`` (the harm area, or another taxonomy code a product rule
  concerns, e.g. ``capability_boundary``). A sub-clause inherits both from its parent unless
  it declares its own. Without any tag up the chain, stance is ``neutral`` and area ``None``.
* Headings without a number (``# Title``, ``## Notes``) and text before the first clause are
  not clauses. Lines inside fenced code blocks (```` ``` ````) are never headings.

Taxonomy convention
-------------------
One Markdown list item per code: ``- `code`: definition`` (``*`` also works as the bullet;
``:``, ``-`` or an em dash may separate code and definition). An item indented deeper than
a previous item is a sub-code of the nearest shallower item above it (``parent``). A
non-bullet line indented deeper than the current item continues its definition. Other lines
are ignored. The taxonomy must contain the top-level codes in ``REQUIRED_CODES``.

Errors are raised as :class:`PolicyParseError` with the line number when there is one.
"""

from __future__ import annotations

import hashlib
import re
from typing import Literal

from schemas.policy import Clause, PolicyBundle, PolicyDocument, TaxonomyCode

REQUIRED_CODES: tuple[str, ...] = (
    "over_refusal",
    "policy_gray_zone",
    "capability_boundary",
    "genuine_safety_refusal",
)
"""Top-level taxonomy codes every bundle must define (the audit engines emit them)."""

VERSION_SEPARATOR = "\n\x1e\n"
"""Joins the three source texts before hashing (ASCII record separator between newlines)."""

Stance = Literal["allow", "prohibit", "neutral"]
_STANCES: dict[str, Stance] = {"allow": "allow", "prohibit": "prohibit", "neutral": "neutral"}
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_NUMBERED = re.compile(r"^(\d+(?:\.\d+)*)(?:\s+(.*))?$")
_TAG = re.compile(r"\[\s*([A-Za-z_]+)\s*:\s*([^\]]*?)\s*\]\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_TAX_ITEM = re.compile(r"^(\s*)[-*+]\s+`([^`]+)`\s*(?::|-|\u2014|\u2013)?\s*(.*)$")


class PolicyParseError(ValueError):
    """A policy or taxonomy document does not follow the bundle's Markdown conventions."""


def _split_tags(heading: str, lineno: int) -> tuple[str, dict[str, str]]:
    """Strip trailing ``[key: value]`` tags from a heading; return (rest, tags)."""
    tags: dict[str, str] = {}
    rest = heading
    while True:
        m = _TAG.search(rest)
        if m is None:
            break
        key, value = m.group(1).lower(), m.group(2).strip()
        if key not in ("stance", "area"):
            raise PolicyParseError(f"line {lineno}: unknown tag [{key}: ...]; use stance or area")
        if key in tags:
            raise PolicyParseError(f"line {lineno}: tag [{key}: ...] given twice")
        if not value:
            raise PolicyParseError(f"line {lineno}: empty value in tag [{key}: ]")
        tags[key] = value
        rest = rest[: m.start()].rstrip()
    return rest, tags


# (number, title, own stance, own area, body lines, line number)
_RawClause = tuple[str, str, str | None, str | None, list[str], int]


def _scan_clauses(markdown: str) -> list[_RawClause]:
    """The numbered clause headings of ``markdown`` in order, each with its own tags and body
    lines (``parse_clauses`` resolves the inherited stance and area). Raises
    :class:`PolicyParseError` as ``parse_clauses`` documents."""
    raw: list[_RawClause] = []
    current_body: list[str] | None = None
    in_fence = False
    for lineno, line in enumerate(markdown.splitlines(), start=1):
        if _FENCE.match(line):
            in_fence = not in_fence
            if current_body is not None:
                current_body.append(line)
            continue
        heading = None if in_fence else _HEADING.match(line)
        if heading is None:
            if current_body is not None:
                current_body.append(line)
            continue
        numbered = _NUMBERED.match(heading.group(2))
        if numbered is None:
            current_body = None  # an unnumbered heading ends the current clause
            continue
        number = numbered.group(1)
        title, tags = _split_tags(numbered.group(2) or "", lineno)
        title = title.strip().rstrip(".").strip()
        if not title:
            raise PolicyParseError(f"line {lineno}: clause {number} has no title")
        stance = tags.get("stance")
        if stance is not None and stance not in _STANCES:
            raise PolicyParseError(
                f"line {lineno}: clause {number}: stance {stance!r} is not one of "
                f"{sorted(_STANCES)}"
            )
        area = tags.get("area")
        if area is not None and not _CODE_RE.match(area):
            raise PolicyParseError(
                f"line {lineno}: clause {number}: area {area!r} is not a lower_snake_case code"
            )
        if any(r[0] == number for r in raw):
            raise PolicyParseError(f"line {lineno}: duplicate clause number {number}")
        current_body = []
        raw.append((number, title, stance, area, current_body, lineno))
    return raw


def parse_clauses(markdown: str, document: PolicyDocument, prefix: str) -> list[Clause]:
    """Parse the numbered clauses of one policy document (see the module docstring).

    ``prefix`` (e.g. ``"AUP"`` or ``"PSP"``) makes ``clause_id = f"{prefix}-{number}"``.
    Returns the clauses in document order.

    Raises :class:`PolicyParseError` when no clause is found, a number occurs twice, a
    heading has a number but no title, a tag is unknown/duplicated/empty, a stance is not
    ``allow``/``prohibit``/``neutral`` or an area is not a lower_snake_case code.
    """
    if not prefix or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", prefix):
        raise PolicyParseError(f"invalid clause prefix {prefix!r}")
    raw = _scan_clauses(markdown)
    if not raw:
        raise PolicyParseError(
            f"no clauses found in the {document} document (expected headings like '### 1.2 Title')"
        )

    resolved: dict[str, tuple[Stance, str | None]] = {}
    clauses: list[Clause] = []
    for number, title, stance, area, body_lines, _ in raw:
        parent_stance: Stance = "neutral"
        parent_area: str | None = None
        parts = number.split(".")
        for depth in range(len(parts) - 1, 0, -1):
            ancestor = ".".join(parts[:depth])
            if ancestor in resolved:
                parent_stance, parent_area = resolved[ancestor]
                break
        own_stance = _STANCES[stance] if stance is not None else parent_stance
        own_area = area if area is not None else parent_area
        resolved[number] = (own_stance, own_area)
        body = " ".join(" ".join(body_lines).split())
        text = f"{title}. {body}" if body else title
        clauses.append(
            Clause(
                clause_id=f"{prefix}-{number}",
                document=document,
                number=number,
                title=title,
                text=text,
                stance=own_stance,
                harm_area=own_area,
            )
        )
    return clauses


def parse_taxonomy(markdown: str) -> list[TaxonomyCode]:
    """Parse the refusal taxonomy (see the module docstring) into codes in document order.

    Raises :class:`PolicyParseError` when a code is not lower_snake_case, occurs twice, has
    an empty definition, is indented with no shallower item above it (unknown parent), or
    when one of ``REQUIRED_CODES`` is missing or not top-level.
    """
    # stack of (indent, code) of the open items, shallowest first
    stack: list[tuple[int, str]] = []
    entries: list[tuple[str, list[str], str | None, int]] = []
    in_fence = False
    for lineno, raw_line in enumerate(markdown.splitlines(), start=1):
        line = raw_line.expandtabs(4)
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        item = _TAX_ITEM.match(line)
        if item is None:
            stripped = line.strip()
            indent = len(line) - len(line.lstrip())
            if stripped and entries and stack and indent > stack[-1][0]:
                entries[-1][1].append(stripped)  # continuation of the last definition
            elif stripped and indent == 0:
                stack.clear()  # a top-level paragraph or heading closes the list
            continue
        indent = len(item.group(1))
        code = item.group(2).strip()
        if not _CODE_RE.match(code):
            raise PolicyParseError(f"line {lineno}: taxonomy code {code!r} is not lower_snake_case")
        if any(e[0] == code for e in entries):
            raise PolicyParseError(f"line {lineno}: duplicate taxonomy code {code!r}")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if indent > 0 and not stack:
            raise PolicyParseError(
                f"line {lineno}: taxonomy code {code!r} is indented but has no parent item above it"
            )
        parent = stack[-1][1] if stack else None
        stack.append((indent, code))
        entries.append((code, [item.group(3).strip()], parent, lineno))

    codes: list[TaxonomyCode] = []
    for code, parts, parent, lineno in entries:
        definition = " ".join(" ".join(parts).split())
        if not definition:
            raise PolicyParseError(f"line {lineno}: taxonomy code {code!r} has no definition")
        codes.append(TaxonomyCode(code=code, definition=definition, parent=parent))
    by_code = {c.code: c for c in codes}
    missing = [c for c in REQUIRED_CODES if c not in by_code]
    if missing:
        raise PolicyParseError(f"taxonomy is missing required code(s): {', '.join(missing)}")
    nested = [c for c in REQUIRED_CODES if by_code[c].parent is not None]
    if nested:
        raise PolicyParseError(f"required code(s) must be top-level: {', '.join(nested)}")
    return codes


def bundle_version(allowed_use_md: str, product_safety_md: str, taxonomy_md: str) -> str:
    """Content hash of a bundle: sha256 over the three texts joined by ``VERSION_SEPARATOR``
    (UTF-8), first 16 hex digits."""
    joined = VERSION_SEPARATOR.join((allowed_use_md, product_safety_md, taxonomy_md))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()[:16]


def parse_bundle(
    name: str, allowed_use_md: str, product_safety_md: str, taxonomy_md: str
) -> PolicyBundle:
    """Build a :class:`PolicyBundle` from the three Markdown texts.

    Allowed-use clauses get prefix ``AUP``, product-safety clauses ``PSP``. ``version`` is
    :func:`bundle_version` of the three texts. Raises :class:`PolicyParseError` for any
    error of :func:`parse_clauses` / :func:`parse_taxonomy`, an empty ``name``, or a clause
    ``[area: ...]`` that is not a code of the taxonomy.
    """
    if not name.strip():
        raise PolicyParseError("bundle name must not be empty")
    try:
        aup = parse_clauses(allowed_use_md, "allowed_use", "AUP")
    except PolicyParseError as exc:
        raise PolicyParseError(f"allowed-use policy: {exc}") from exc
    try:
        psp = parse_clauses(product_safety_md, "product_safety", "PSP")
    except PolicyParseError as exc:
        raise PolicyParseError(f"product safety policy: {exc}") from exc
    try:
        taxonomy = parse_taxonomy(taxonomy_md)
    except PolicyParseError as exc:
        raise PolicyParseError(f"taxonomy: {exc}") from exc
    codes = {t.code for t in taxonomy}
    for clause in (*aup, *psp):
        if clause.harm_area is not None and clause.harm_area not in codes:
            raise PolicyParseError(
                f"clause {clause.clause_id}: area {clause.harm_area!r} is not a taxonomy code"
            )
    return PolicyBundle(
        name=name,
        version=bundle_version(allowed_use_md, product_safety_md, taxonomy_md),
        allowed_use_markdown=allowed_use_md,
        product_safety_markdown=product_safety_md,
        taxonomy_markdown=taxonomy_md,
        clauses=(*aup, *psp),
        taxonomy=tuple(taxonomy),
    )
