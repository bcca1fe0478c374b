"""Load the configured policy bundles from their Markdown files (the file-reading edge)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path

from processors.policy import PolicyParseError, parse_bundle
from refusal_audit.audit.settings import (
    EXAMPLE_POLICIES_DIR,
    PolicyBundlePaths,
)
from refusal_audit.audit.settings import (
    example_bundle_paths as example_bundle_paths,  # re-exported: the shipped example bundle
)
from refusal_audit.config import ConfigError
from schemas.policy import PolicyBundle

log = logging.getLogger("refusal_audit.bundles")


def load_bundle(name: str, paths: PolicyBundlePaths) -> PolicyBundle:
    """Read and parse one bundle. Raises ``ConfigError`` for a missing file or a parse error."""
    texts: list[str] = []
    for label, path in (
        ("allowed_use", paths.allowed_use),
        ("product_safety", paths.product_safety),
        ("taxonomy", paths.taxonomy),
    ):
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(
                f"policy bundle {name!r}: cannot read {label} file {path}: {exc}"
            ) from exc
    try:
        return parse_bundle(name, *texts)
    except PolicyParseError as exc:
        raise ConfigError(f"policy bundle {name!r}: {exc}") from exc


EXAMPLE_NOTICE_MARKER = ".example-bundle-noticed"
"""File in ``data_dir`` whose presence means the example-bundle notice was shown there."""

_noticed: set[str] = set()  # bundle names noticed in this process


def _notice_example(name: str, data_dir: Path | None) -> None:
    """Warn that bundle ``name`` is the shipped example: once per process and, when
    ``data_dir`` is an existing directory, once per data directory (a marker file there; later
    runs log it at DEBUG only)."""
    marker = data_dir / EXAMPLE_NOTICE_MARKER if data_dir is not None else None
    seen = name in _noticed or (marker is not None and marker.exists())
    _noticed.add(name)
    level = logging.DEBUG if seen else logging.WARNING
    log.log(
        level,
        "policy bundle %r is the example bundle shipped with refusal-audit (%s); "
        "set policy_bundles to audit against your own policies",
        name,
        EXAMPLE_POLICIES_DIR,
    )
    if not seen and marker is not None and marker.parent.is_dir():
        with contextlib.suppress(OSError):  # shown again next time: harmless
            marker.touch()


def load_bundles(
    bundles: Mapping[str, PolicyBundlePaths], data_dir: Path | None = None
) -> dict[str, PolicyBundle]:
    """Load every configured bundle by name. Raises ``ConfigError`` when none is configured.

    A bundle that is the shipped example is noticed once per process and, with
    ``data_dir`` (the settings' ``data_dir``), once per data directory (``_notice_example``).
    """
    if not bundles:
        raise ConfigError("no policy bundle configured (setting policy_bundles)")
    example = example_bundle_paths()
    for name, paths in bundles.items():
        if paths == example:
            _notice_example(name, data_dir)
    return {name: load_bundle(name, paths) for name, paths in bundles.items()}
