"""Load the configured policy bundles from their Markdown files (the file-reading edge)."""

from __future__ import annotations

from collections.abc import Mapping

from processors.policy import PolicyParseError, parse_bundle
from refusal_audit.config import ConfigError, PolicyBundlePaths
from schemas.policy import PolicyBundle


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
    return {name: load_bundle(name, paths) for name, paths in bundles.items()}
