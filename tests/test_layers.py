"""Dependencies point one way (issue 14, point 5; docs/architecture.md, "Layers").

Every module of the repository's packages is parsed with ``ast``; each import, at the top
of the module or inside a function or class, ``if TYPE_CHECKING:`` blocks included, is
mapped to its layer. A module may import its own layer and the layers below it, never one
above; the Kafka side (``streams/``), the warehouse (``warehouse/``) and the LLM calls and
model files (``inference/``) share a layer and do not import each other. Imports of anything
outside these packages (the standard library,
third-party packages) are not checked.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: Layer numbers, top (1) to bottom (5), of the top-level packages.
PACKAGE_LAYERS = {
    "refusal_audit": 2,
    "streams": 3,
    "warehouse": 3,
    "inference": 3,
    "processors": 4,
    "prompts": 4,
    "schemas": 5,
}
LAYER_NAMES = {
    1: "entry points",
    2: "application",
    3: "Kafka side / warehouse / inference",
    4: "pure logic",
    5: "contracts",
}
#: Entry points: the CLI (``refusal_audit.cli``, every room's ``cli`` module and every
#: ``cli_*`` module, see ``is_cli``) and the modules holding a service's run function
#: (nothing in the application layer imports them).
ENTRY_MODULES = frozenset(
    {
        "refusal_audit.cli",
        "refusal_audit.streaming.worker",
        "refusal_audit.review.web.server",
        "refusal_audit.clarification.server",
    }
)
#: The modules allowed directly under ``refusal_audit/``: what every room shares. A feature
#: module goes into its room (a subpackage), never at the root. ``http_serving``: binding and
#: serving an HTTP app bounded against slow and greedy clients, used by the review,
#: clarification and llm servers alike (no room owns it).
SHARED_ROOT_MODULES = frozenset(
    {"__init__", "cli", "cli_common", "config", "secret_files", "bundles", "output", "http_serving"}
)
#: The subpackages of ``refusal_audit/``: one room per capability, and the shipped data.
ROOMS = frozenset(
    {
        "audit",
        "streaming",
        "alerts",
        "review",
        "clarification",
        "calibration",
        "report",
        "dashboards",
        "training",
        "encoders",
        "llm",
    }
)
DATA_PACKAGES = frozenset({"models", "example_policies"})
#: Packages of one layer that must not import each other.
SIDE_BY_SIDE = frozenset({"streams", "warehouse", "inference"})
#: How a failure names each package of layer 3.
SIDE_NAMES = {"streams": "Kafka side", "warehouse": "warehouse", "inference": "inference"}


def layer_of(module: str) -> int | None:
    """The layer of a dotted module name, or None when it is not one of the project's."""
    top = module.split(".")[0]
    if top not in PACKAGE_LAYERS:
        return None
    # ``from refusal_audit.cli import app`` names ``refusal_audit.cli.app``
    if any(module == m or module.startswith(m + ".") for m in ENTRY_MODULES):
        return 1
    if is_cli(module):
        return 1
    return PACKAGE_LAYERS[top]


def is_cli(module: str) -> bool:
    """An application module is a command module (an entry point) when one of its dotted parts
    below ``refusal_audit`` is ``cli`` or starts with ``cli_`` (``refusal_audit.review.cli``,
    ``refusal_audit.calibration.cli_kafka``, ``refusal_audit.cli_common``; an imported name
    ``refusal_audit.review.cli.review_app`` too)."""
    parts = module.split(".")
    if parts[0] != "refusal_audit":
        return False
    return any(part == "cli" or part.startswith("cli_") for part in parts[1:])


def layer_name(module: str, layer: int) -> str:
    """How a failure names a module's layer (layer 3 by its side)."""
    if layer == 3:
        return SIDE_NAMES[module.split(".")[0]]
    return LAYER_NAMES[layer]


def module_name(path: Path) -> str:
    """``refusal_audit/streaming/worker.py`` -> ``refusal_audit.streaming.worker`` (a package's
    ``__init__.py`` is the package)."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@dataclass(frozen=True)
class Import:
    """One imported module: where (file, line) and what (dotted name)."""

    path: Path
    line: int
    module: str


def imports_of(path: Path, source: str | None = None) -> Iterator[Import]:
    """Every module ``path`` imports, anywhere in the file. ``from X import y`` yields
    ``X.y`` (``y`` may be a submodule) and relative imports are resolved."""
    tree = ast.parse(source if source is not None else path.read_text(), str(path))
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(path, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for alias in node.names:
                yield Import(path, node.lineno, f"{base}.{alias.name}")


def violations(path: Path, source: str | None = None) -> list[str]:
    """``file:line: ...`` for each import of ``path`` that goes up a layer or sideways
    between ``streams``, ``warehouse`` and ``inference``."""
    me = module_name(path)
    mine = layer_of(me)
    assert mine is not None, path
    found = []
    for imp in imports_of(path, source):
        theirs = layer_of(imp.module)
        if theirs is None:
            continue
        where = f"{imp.path.relative_to(REPO)}:{imp.line}"
        top, their_top = me.split(".")[0], imp.module.split(".")[0]
        if theirs < mine:
            found.append(
                f"{where}: {me} ({layer_name(me, mine)}) imports {imp.module} "
                f"({layer_name(imp.module, theirs)}, a layer above)"
            )
        elif top != their_top and {top, their_top} <= SIDE_BY_SIDE:
            found.append(
                f"{where}: {me} ({layer_name(me, mine)}) imports {imp.module} "
                f"({layer_name(imp.module, theirs)}): they must not import each other"
            )
    return found


def project_modules() -> list[Path]:
    """Every ``.py`` file of the project's packages."""
    return sorted(p for package in PACKAGE_LAYERS for p in (REPO / package).rglob("*.py"))


def test_every_package_is_layered() -> None:
    """A new top-level package with Python modules must get a layer here."""
    layered = set(PACKAGE_LAYERS)
    others = {"tests", "benchmarks", "examples", "deploy", "docs", "build"}
    packages = {
        p.parent.name
        for p in REPO.glob("*/__init__.py")
        if not p.parent.name.startswith(".") and p.parent.name not in others
    }
    assert packages <= layered, f"packages without a layer: {sorted(packages - layered)}"


def test_no_import_goes_up_a_layer() -> None:
    modules = project_modules()
    assert len(modules) > 100  # the walk found the packages
    found = [v for path in modules for v in violations(path)]
    assert not found, "imports against the layers (docs/architecture.md):\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("module_path", "source", "expected"),
    [
        (
            "processors/redaction.py",
            "def f():\n    from refusal_audit.config import Settings\n",
            "processors/redaction.py:2: processors.redaction (pure logic) imports "
            "refusal_audit.config.Settings (application, a layer above)",
        ),
        (
            "streams/result_writer.py",
            "import warehouse.store\n",
            "streams/result_writer.py:1: streams.result_writer (Kafka side) imports "
            "warehouse.store (warehouse): they must not import each other",
        ),
        (
            "refusal_audit/audit/batch.py",
            "from ..cli import app\n",
            "refusal_audit/audit/batch.py:1: refusal_audit.audit.batch (application) imports "
            "refusal_audit.cli.app (entry points, a layer above)",
        ),
        (
            "refusal_audit/review/service.py",
            "def f():\n    from refusal_audit.calibration.cli_kafka import calibrate_app\n",
            "refusal_audit/review/service.py:2: refusal_audit.review.service (application) "
            "imports refusal_audit.calibration.cli_kafka.calibrate_app "
            "(entry points, a layer above)",
        ),
        (
            "schemas/__init__.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from processors import x\n",
            "schemas/__init__.py:3: schemas (contracts) imports processors.x "
            "(pure logic, a layer above)",
        ),
    ],
)
def test_a_violation_is_reported(module_path: str, source: str, expected: str) -> None:
    """The check finds imports against the layers (in functions, relative, type-only) and
    names file, line and the imported module."""
    assert violations(REPO / module_path, source) == [expected]


def test_allowed_imports_pass() -> None:
    """Own layer, layers below, and anything outside the project are fine."""
    below = "import orjson\nfrom schemas.events import RefusalEvent\nfrom prompts.loader import x\n"
    assert violations(REPO / "processors" / "intake.py", below) == []
    application = below + "import streams.producer\nfrom warehouse.store import Warehouse\n"
    assert violations(REPO / "refusal_audit" / "audit" / "batch.py", application) == []
    entry = "from refusal_audit.streaming.worker import run_worker\n"
    assert violations(REPO / "refusal_audit" / "cli.py", entry) == []
    assert violations(REPO / "refusal_audit" / "clarification" / "server.py", entry) == []
    room_cli = "from refusal_audit.review.service import ReviewService\n"
    assert violations(REPO / "refusal_audit" / "review" / "cli.py", room_cli) == []


def test_only_shared_modules_at_the_root() -> None:
    """``refusal_audit/`` holds only what the rooms share; each capability has its room
    (issue 26): a new feature module cannot land at the root."""
    root = REPO / "refusal_audit"
    modules = {p.stem for p in root.glob("*.py")}
    assert modules <= SHARED_ROOT_MODULES, (
        f"modules at the root of refusal_audit/ that belong in a room: "
        f"{sorted(modules - SHARED_ROOT_MODULES)}"
    )
    packages = {p.parent.name for p in root.glob("*/__init__.py")}
    strays = sorted(packages - ROOMS - DATA_PACKAGES)
    assert not strays, f"subpackages of refusal_audit/ that are not a room: {strays}"
    assert packages >= ROOMS, f"rooms without a package: {sorted(ROOMS - packages)}"


# ---- SQL only in warehouse/ (issue 26) ------------------------------------------------

#: SQL statement text: a SELECT followed by what it selects (so the CLI's help "(SELECT,
#: ...)" is prose), or the head of an INSERT, UPDATE, DELETE, ALTER TABLE or CREATE TABLE.
#: Upper case only, as the project writes SQL (prose says "select").
SQL_STATEMENT = re.compile(
    r"\bSELECT\s+[^\s,.)]|\b(?:INSERT INTO|DELETE FROM|ALTER TABLE|CREATE TABLE)\s"
    r"|\bUPDATE\s+\w+\s+SET\b"
)
#: The application modules allowed to hold SQL text: the dashboards render SQL for Grafana's
#: panels (their product; a query that also exists in warehouse/ is imported from there).
SQL_ALLOWED = ("refusal_audit/dashboards/",)


def _string_texts(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, text) of every string constant of ``tree`` that is not a docstring; an
    f-string is one text with ``{}`` for each replacement field."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skip.add(id(body[0].value))
        elif isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            yield node.lineno, str(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.lineno, node.value


def sql_violations(path: Path, source: str | None = None) -> list[str]:
    """``file:line: ...`` for each string of an application module (outside
    ``SQL_ALLOWED``) that holds SQL statement text (``SQL_STATEMENT``); docstrings are
    prose and not checked."""
    where = path.relative_to(REPO).as_posix()
    if not where.startswith("refusal_audit/") or where.startswith(SQL_ALLOWED):
        return []
    tree = ast.parse(source if source is not None else path.read_text(), str(path))
    found = []
    for line, text in sorted(_string_texts(tree)):
        match = SQL_STATEMENT.search(text)
        if match:
            statement = " ".join(text[match.start() :].split())
            found.append(f"{where}:{line}: SQL outside warehouse/: {statement[:40]!r}")
    return found


def test_sql_lives_in_the_warehouse() -> None:
    """No application module but the dashboards holds SQL statements: queries are functions
    of a ``warehouse/`` module (docs/architecture.md)."""
    modules = sorted((REPO / "refusal_audit").rglob("*.py"))
    assert len(modules) > 50
    found = [v for path in modules for v in sql_violations(path)]
    assert not found, "SQL outside warehouse/:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("module_path", "source", "expected"),
    [
        (
            "refusal_audit/alerts/gaps.py",
            'def f(c):\n    return c.query(\n        "SELECT max(seen_at) "\n'
            '        "FROM {db:Identifier}.policy_gap_sightings"\n    )\n',
            "refusal_audit/alerts/gaps.py:3: SQL outside warehouse/: "
            "'SELECT max(seen_at) FROM {db:Identifier}'",
        ),
        (
            "refusal_audit/review/service.py",
            'def f(c, t):\n    c.query(f"SELECT {t} FROM x")\n',
            "refusal_audit/review/service.py:2: SQL outside warehouse/: 'SELECT {} FROM x'",
        ),
        (
            "refusal_audit/clarification/store.py",
            'SCHEMA = """\nCREATE TABLE IF NOT EXISTS conversations (id TEXT)\n"""\n',
            "refusal_audit/clarification/store.py:1: SQL outside warehouse/: "
            "'CREATE TABLE IF NOT EXISTS conversations'",
        ),
        (
            "refusal_audit/cli.py",
            'def f(db):\n    db.execute("INSERT INTO t VALUES (?)", (1,))\n',
            "refusal_audit/cli.py:2: SQL outside warehouse/: 'INSERT INTO t VALUES (?)'",
        ),
    ],
)
def test_sql_outside_the_warehouse_is_reported(
    module_path: str, source: str, expected: str
) -> None:
    """A statement in a plain string, an f-string or a multi-line constant is found, with
    its file and line."""
    assert sql_violations(REPO / module_path, source) == [expected]


def test_sql_prose_and_the_dashboards_pass() -> None:
    """Docstrings, help texts naming a keyword and the dashboards' panel SQL are not
    reported; warehouse/ is not checked."""
    prose = (
        'def f():\n    """Runs SELECT 1 on the warehouse."""\n'
        '    return "A single read-only statement (SELECT, ...)."\n'
    )
    assert sql_violations(REPO / "refusal_audit" / "cli.py", prose) == []
    panel = 'SQL = "SELECT count() FROM current_assessments"\n'
    assert sql_violations(REPO / "refusal_audit" / "dashboards" / "audit_panels.py", panel) == []
    assert sql_violations(REPO / "warehouse" / "gaps.py", panel) == []


#: Third-party I/O clients and the folders that may import them (issue 26): Kafka clients
#: on the Kafka side, ClickHouse clients in the warehouse, the LLM client in inference/
#: (the engines' calls; the application builds engines through ``inference.chat``).
IO_LIBRARIES = {
    "confluent_kafka": ("streams/",),
    "aiokafka": ("streams/",),
    "faust": ("streams/", "refusal_audit/streaming/worker.py"),
    "clickhouse_connect": ("warehouse/",),
    "chdb": ("warehouse/",),
    "openai": ("inference/",),
}
#: Where the rule is broken today, named so no new place joins them (struck off as it is
#: paid): nothing left - the rooms' Kafka clients and consumer loops moved to
#: ``streams.clients`` and ``streams.consumer_loop``, the LLM calls to ``inference/``.
IO_DEBT: frozenset[tuple[str, str]] = frozenset()


def io_library_imports(path: Path, source: str | None = None) -> list[tuple[str, int]]:
    """``(library, line)`` of each import of an :data:`IO_LIBRARIES` package in ``path``."""
    found = []
    for imp in imports_of(path, source):
        top = imp.module.split(".")[0]
        if top in IO_LIBRARIES:
            found.append((top, imp.line))
    return found


def test_io_clients_stay_in_their_layer() -> None:
    """Kafka, ClickHouse and LLM client libraries are imported only where their layer is
    (:data:`IO_LIBRARIES`), apart from the named debt (:data:`IO_DEBT`), which must not grow
    and is struck off as it is paid."""
    wrong, seen = [], set()
    for path in project_modules():
        where = path.relative_to(REPO).as_posix()
        for library, line in io_library_imports(path):
            if where.startswith(IO_LIBRARIES[library]):
                continue
            seen.add((library, where))
            if (library, where) not in IO_DEBT:
                wrong.append(
                    f"{where}:{line}: imports {library} (belongs in {IO_LIBRARIES[library]})"
                )
    assert not wrong, "\n".join(wrong)
    assert seen >= IO_DEBT, f"paid, strike it from IO_DEBT: {sorted(IO_DEBT - seen)}"


def test_an_io_client_outside_its_layer_is_reported() -> None:
    source = "def f():\n    from confluent_kafka import Consumer\n"
    assert io_library_imports(REPO / "processors" / "intake.py", source) == [("confluent_kafka", 2)]
    assert not "processors/intake.py".startswith(IO_LIBRARIES["confluent_kafka"])


# ---- the pure layers do no I/O (issue 26) ----------------------------------------------

#: The folders of pure logic and contracts: no network client, no file read or write (the
#: LLM calls and the trained models' files are ``inference/``).
PURE_FOLDERS = ("processors/", "prompts/", "schemas/")
#: Network libraries (beyond :data:`IO_LIBRARIES`) a pure module never imports.
NETWORK_LIBRARIES = frozenset(
    {"httpx", "requests", "urllib3", "aiohttp", "socket", "urllib.request", "http.client"}
)
#: Calls that read or write files: ``open(...)`` by name; these method names on any object
#: (``Path.read_text``, ``np.savez``, ``runpy.run_path``, ...); and these functions of a module.
FILE_IO_NAMES = frozenset({"open"})
FILE_IO_METHODS = frozenset(
    {
        "read_text",
        "read_bytes",
        "write_text",
        "write_bytes",
        "mkdir",
        "unlink",
        "rmdir",
        "touch",
        "iterdir",
        "rglob",
        "savez",
        "savez_compressed",
        "savetxt",
        "loadtxt",
        "fromfile",
        "tofile",
        "run_path",
    }
)
FILE_IO_FUNCTIONS = {
    "np": {"load", "save"},
    "numpy": {"load", "save"},
    "json": {"load", "dump"},
    "pickle": {"load", "dump"},
    "os": {"remove", "rename", "listdir", "makedirs", "scandir"},
    "shutil": {"copy", "copyfile", "copytree", "move", "rmtree"},
}
#: The pure modules allowed to touch a file, and why: ``prompts/`` reads the templates shipped
#: beside it; ``processors/stopwords.py`` executes scikit-learn's stop-word list from the
#: installed package (an import without the package's start-up cost); ``schemas/export.py``
#: is the maintainers' command that writes the package's own ``schemas/json/`` files.
FILE_IO_ALLOWED = frozenset(
    {
        "prompts/loader.py",
        "prompts/clarification.py",
        "prompts/calibration.py",
        "processors/stopwords.py",
        "schemas/export.py",
    }
)


def pure_io(path: Path, source: str | None = None) -> list[str]:
    """``file:line: ...`` for each network-library import (:data:`IO_LIBRARIES`,
    :data:`NETWORK_LIBRARIES`) and each file read or write call (``FILE_IO_*``) of a module
    of :data:`PURE_FOLDERS` (file calls pass in :data:`FILE_IO_ALLOWED`)."""
    where = path.relative_to(REPO).as_posix()
    if not where.startswith(PURE_FOLDERS):
        return []
    found = []
    for imp in imports_of(path, source):
        parts = imp.module.split(".")
        if parts[0] in IO_LIBRARIES or {parts[0], ".".join(parts[:2])} & NETWORK_LIBRARIES:
            found.append(f"{where}:{imp.line}: imports {imp.module} (network: inference/)")
    if where in FILE_IO_ALLOWED:
        return found
    tree = ast.parse(source if source is not None else path.read_text(), str(path))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func, call = node.func, None
        if isinstance(func, ast.Name) and func.id in FILE_IO_NAMES:
            call = func.id
        elif isinstance(func, ast.Attribute):
            owner = func.value.id if isinstance(func.value, ast.Name) else None
            if func.attr in FILE_IO_METHODS or func.attr in FILE_IO_FUNCTIONS.get(owner or "", ()):
                call = f"{owner or '...'}.{func.attr}"
        if call is not None:
            found.append(f"{where}:{node.lineno}: calls {call}() (file I/O: inference/)")
    return found


def test_pure_layers_do_no_io() -> None:
    """``processors/``, ``prompts/`` and ``schemas/`` import no network client and read or
    write no file (``prompts/`` its own templates apart): the LLM calls and the trained
    models' files are ``inference/`` (docs/architecture.md)."""
    modules = [
        p for p in project_modules() if p.relative_to(REPO).as_posix().startswith(PURE_FOLDERS)
    ]
    assert len(modules) > 50
    found = [v for path in modules for v in pure_io(path)]
    assert not found, "I/O in the pure layers:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("module_path", "source", "expected"),
    [
        (
            "processors/refusal_model.py",
            "import numpy as np\ndef f(p):\n    return np.load(p, allow_pickle=False)\n",
            "processors/refusal_model.py:3: calls np.load() (file I/O: inference/)",
        ),
        (
            "processors/category_model.py",
            "def f(stem, text):\n    stem.with_suffix('.json').write_text(text)\n",
            "processors/category_model.py:2: calls ....write_text() (file I/O: inference/)",
        ),
        (
            "processors/engines/local.py",
            "def f():\n    import openai\n",
            "processors/engines/local.py:2: imports openai (network: inference/)",
        ),
        (
            "prompts/loader.py",
            "from urllib.request import urlopen\n",
            "prompts/loader.py:1: imports urllib.request.urlopen (network: inference/)",
        ),
    ],
)
def test_io_in_a_pure_layer_is_reported(module_path: str, source: str, expected: str) -> None:
    """A numpy load, a ``Path`` write, an LLM client or a network import in a pure module is
    found, with its file and line; prompts/ reading its templates is not a finding."""
    assert pure_io(REPO / module_path, source) == [expected]


def test_pure_io_passes_templates_and_calls_named_like_io() -> None:
    template = "from pathlib import Path\ndef f(p):\n    return Path(p).read_bytes()\n"
    assert pure_io(REPO / "prompts" / "clarification.py", template) == []
    assert pure_io(REPO / "inference" / "model_files.py", template) == []
    opened = "def f(flow, request, now):\n    return flow.open(request, now)\n"
    assert pure_io(REPO / "processors" / "clarification" / "flow.py", opened) == []


#: Import cycles between modules that exist today (each an issue 26 item left; none since the
#: pre-filter's cue reading, the circumvention corpus and ``warehouse.connect`` became their
#: own modules): a new cycle, or a module joining one of these, fails
#: :func:`test_no_new_import_cycles`.
CYCLE_DEBT: tuple[frozenset[str], ...] = ()


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (anywhere in the file; ``from x import y``
    counts as importing the module ``x.y`` when it is one, else ``x``)."""
    modules = {module_name(p): p for p in project_modules()}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for imp in imports_of(path):
            target = imp.module
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                graph[name].add(target)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_no_new_import_cycles() -> None:
    """No import cycle between modules beyond the named debt (:data:`CYCLE_DEBT`), which is
    struck off as it is paid."""
    cycles = import_cycles(import_graph())
    new = [sorted(c) for c in cycles if c not in CYCLE_DEBT]
    assert not new, f"new import cycles: {new}"
    assert set(cycles) >= set(CYCLE_DEBT), "a cycle of CYCLE_DEBT is gone: strike it off"


def test_a_cycle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [frozenset({"a", "b", "c"})]
