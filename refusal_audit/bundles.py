"""Load the configured policy bundles from their Markdown files (the file-reading edge)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from processors.policy import PolicyParseError, parse_bundle
from refusal_audit.config import (
    EXAMPLE_POLICIES_DIR,
    ConfigError,
    PolicyBundlePaths,
    example_bundle_paths,
)
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


def load_bundles(bundles: Mapping[str, PolicyBundlePaths]) -> dict[str, PolicyBundle]:
    """Load every configured bundle by name. Raises ``ConfigError`` when none is configured."""
    if not bundles:
        raise ConfigError("no policy bundle configured (setting policy_bundles)")
    example = example_bundle_paths()
    for name, paths in bundles.items():
        if paths == example:
            log.warning(
                "policy bundle %r is the example bundle shipped with refusal-audit (%s); "
                "set policy_bundles to audit against your own policies",
                name,
                EXAMPLE_POLICIES_DIR,
            )
    return {name: load_bundle(name, paths) for name, paths in bundles.items()}
