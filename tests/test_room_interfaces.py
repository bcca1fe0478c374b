"""Rooms talk through named interfaces (issue 26; docs/architecture.md, "Where each capability
lives").

Each capability's room under ``refusal_audit/`` (see ``tests/test_layers.py`` ``ROOMS``) names
the modules other rooms may import: :data:`ROOM_INTERFACES`. Every room's ``settings`` module
(composed by ``refusal_audit.config``) and its command modules (``cli``, ``cli_*``, registered
on the root app) are open to the root modules only. Any other import of a module of another
room fails the test: a new dependency between rooms is a decision, written into the table
(and the architecture page), not a side effect of an edit.
"""

from __future__ import annotations

from pathlib import Path

from test_layers import REPO, ROOMS, imports_of, module_name

#: For each room, the modules of it that another room may import, and why (what they offer).
ROOM_INTERFACES: dict[str, dict[str, str]] = {
    "audit": {
        "pipeline": "the one audit orchestrator (the streaming worker runs it per window)",
        "batch": "running a batch of events, baselines of a window (worker, produce)",
        "engine_setup": "engine choice, LLM client options, the configured redactor",
        "prefilter_model": "loading the shipped pre-filter and category models (training)",
        "prefilter_cascade": "the cascade's encoder head (training)",
    },
    "alerts": {
        "drift": "drift detection over stored windows (worker, batch baselines)",
        "gaps": "policy-gap tracking and listing (gaps command, report)",
        "publisher": "publishing alerts to their topics (worker)",
    },
    "encoders": {
        "catalog": "which encoder, where its files are",
        "runtime": "an ONNX sentence encoder",
    },
    "llm": {},
    "review": {
        "accounts": "review-app accounts: who may start or approve (calibration)",
        "api_tokens": "API tokens of review-app accounts (calibration starters)",
    },
    "streaming": {"owner": "the embedded store's owner channel and its route in each server"},
    "clarification": {
        "pages": "its pages in the review app (routes)",
        "verdict_labels": "reviewers' clarification verdicts as labelled sets (review export)",
        "circumvention_check": "the circumvention check (training)",
    },
    "calibration": {"pages": "its approval pages in the review app (routes)"},
    "report": {},
    "dashboards": {},
    "training": {},
}

ROOT_ONLY = ("settings", "cli")
"""Module names (or prefixes: ``cli_*``) that only the root modules import (config composes
the settings groups; the root app registers the commands)."""


def room_of(module: str) -> tuple[str, str] | None:
    """``refusal_audit.audit.engine_setup.make_engine`` -> ``("audit", "engine_setup")``; None
    for a module outside the rooms (the root modules, other packages)."""
    parts = module.split(".")
    if len(parts) < 3 or parts[0] != "refusal_audit" or parts[1] not in ROOMS:
        return None
    return parts[1], parts[2]


def interface_violations(path: Path, source: str | None = None) -> list[str]:
    """``file:line: ...`` for each import in ``path`` of another room's module that is not in
    that room's interface (root modules may also import ``settings`` and ``cli*``)."""
    me = room_of(module_name(path) + ".x")
    found = []
    for imp in imports_of(path, source):
        target = room_of(imp.module)
        if target is None or (me is not None and target[0] == me[0]):
            continue
        room, module = target
        if module in ROOM_INTERFACES[room]:
            continue
        if me is None and module.startswith(ROOT_ONLY):
            continue
        found.append(
            f"{imp.path.relative_to(REPO)}:{imp.line}: imports refusal_audit.{room}.{module}, "
            f"not in the {room} room's interface (ROOM_INTERFACES)"
        )
    return found


def test_every_room_has_an_interface_entry() -> None:
    """The table names every room, and every module it names exists."""
    assert set(ROOM_INTERFACES) == set(ROOMS - {"models", "example_policies"})
    missing = [
        f"refusal_audit/{room}/{module}"
        for room, modules in ROOM_INTERFACES.items()
        for module in modules
        if not (REPO / "refusal_audit" / room / f"{module}.py").is_file()
        and not (REPO / "refusal_audit" / room / module / "__init__.py").is_file()
    ]
    assert not missing, f"interface modules that do not exist: {missing}"


def test_rooms_import_each_other_only_through_their_interfaces() -> None:
    found = []
    for path in sorted((REPO / "refusal_audit").rglob("*.py")):
        found += interface_violations(path)
    assert not found, "\n".join(found)


def test_every_interface_module_is_used() -> None:
    """An entry nobody imports any more is struck off (the table stays what rooms use)."""
    used = set()
    for path in sorted((REPO / "refusal_audit").rglob("*.py")):
        me = room_of(module_name(path) + ".x")
        for imp in imports_of(path):
            target = room_of(imp.module)
            if target is not None and (me is None or target[0] != me[0]):
                used.add(target)
    unused = [
        f"{room}.{module}"
        for room, modules in ROOM_INTERFACES.items()
        for module in modules
        if (room, module) not in used
    ]
    assert not unused, f"interface entries no other room imports: {unused}"


def test_an_import_outside_the_interface_is_reported() -> None:
    path = REPO / "refusal_audit" / "calibration" / "runs.py"
    source = (
        "from refusal_audit.review.service import ReviewService\n"
        "from refusal_audit.review.accounts import Accounts\n"
        "from refusal_audit.calibration.store import CalibrationStore\n"
        "from refusal_audit.streaming.settings import StreamingSettings\n"
    )
    found = interface_violations(path, source)
    assert len(found) == 2, found
    assert "refusal_audit.review.service" in found[0]
    assert "refusal_audit.streaming.settings" in found[1]


def test_root_modules_may_import_settings_and_commands() -> None:
    path = REPO / "refusal_audit" / "config.py"
    source = (
        "from refusal_audit.audit.settings import AuditSettings\n"
        "from refusal_audit.review.cli_tokens import token_app\n"
        "from refusal_audit.review.service import ReviewService\n"
    )
    found = interface_violations(path, source)
    assert len(found) == 1 and "refusal_audit.review.service" in found[0], found
