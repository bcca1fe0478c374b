"""The tree ClickHouse prints for ``EXPLAIN AST <statement>``, read back into nodes.

ClickHouse's own parser does the parsing; this module only reads its dump. Each output row
is one node: one space per level of depth, then the node's label
(``Function file``, ``TableIdentifier db.t (alias x)``, ``Set``, ...), then
`` (children N)`` when the node has children. Names inside labels are printed raw, so a
quoted identifier holding a line break could add rows; the reader therefore checks the
shape strictly (one root, depth grows by one at most, every ``(children N)`` equal to the
rows found under it) and refuses anything else with ``AstDumpError``. Rows such a trick
adds can only become extra children of the node whose name held the line break: they can
never move a real node elsewhere in the tree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

__all__ = ["AstDumpError", "AstNode", "parse_ast_dump"]

_ROW_RE = re.compile(r"^(?P<indent> *)(?P<label>\S.*?)(?: \(children (?P<count>\d+)\))?$")


class AstDumpError(ValueError):
    """The ``EXPLAIN AST`` rows do not form one well-shaped tree."""


@dataclass
class AstNode:
    """One node of the dump: ``label`` (the row without indent and children count),
    ``declared`` (the printed children count; 0 when none was printed), ``children``
    (in the dump's order) and ``parent`` (None for the root)."""

    label: str
    declared: int = 0
    children: list[AstNode] = field(default_factory=list)
    parent: AstNode | None = field(default=None, repr=False)

    @property
    def kind(self) -> str:
        """The label's first word (``Function``, ``TableIdentifier``, ``Explain``, ...)."""
        return self.label.split(" ", 1)[0]

    @property
    def detail(self) -> str:
        """The label after its first word (``file`` for ``Function file``), or ``''``."""
        parts = self.label.split(" ", 1)
        return parts[1] if len(parts) > 1 else ""

    def walk(self) -> Iterator[AstNode]:
        """This node and every node under it, depth first, in the dump's order."""
        yield self
        for child in self.children:
            yield from child.walk()


def parse_ast_dump(rows: Iterable[str]) -> AstNode:
    """The root of the tree in ``rows`` (the ``EXPLAIN AST`` output, one row per node).

    Raises ``AstDumpError`` for no rows, a row that is not ``indent label [(children N)]``,
    a second root, a row more than one level deeper than the one before it, or a node
    whose printed children count differs from the rows under it.
    """
    root: AstNode | None = None
    stack: list[AstNode] = []
    for row in rows:
        match = _ROW_RE.match(row)
        if match is None:
            raise AstDumpError(f"unexpected row in the parser's output: {row[:60]!r}")
        depth = len(match["indent"])
        node = AstNode(match["label"], int(match["count"] or 0))
        if root is None:
            if depth != 0:
                raise AstDumpError("the parser's output does not start at its root")
            root = node
            stack = [node]
            continue
        if depth == 0:
            raise AstDumpError("the parser's output holds more than one statement")
        if depth > len(stack):
            raise AstDumpError("the parser's output skips a level")
        del stack[depth:]
        node.parent = stack[-1]
        stack[-1].children.append(node)
        stack.append(node)
    if root is None:
        raise AstDumpError("the parser returned nothing")
    for node in root.walk():
        if node.declared != len(node.children):
            raise AstDumpError(
                f"the parser's output is inconsistent at {node.label[:40]!r} "
                "(a name with a line break?)"
            )
    return root
