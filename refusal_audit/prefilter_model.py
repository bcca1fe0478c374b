"""The shipped refusal pre-filter model: where it lives and how the application loads it."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from processors.refusal_model import ModelArtifactError, RefusalModel, load_model
from refusal_audit.config import ConfigError

#: Stem of the artifact shipped in the package (``.npz`` arrays, ``.json`` metadata, ``.md``
#: model card), rebuilt by ``refusal-audit train``.
SHIPPED_STEM = Path(__file__).resolve().parent / "models" / "refusal_prefilter"


@lru_cache(maxsize=4)
def _load(stem: Path) -> RefusalModel:
    return load_model(stem)


def load_shipped_model(stem: Path | None = None) -> RefusalModel:
    """Load (once per process) and verify the artifact ``stem`` (default :data:`SHIPPED_STEM`).

    Raises ``ConfigError`` naming the file and the fault when the artifact is missing,
    corrupt or built for other features, so start-up fails with a clear message (exit 2).
    """
    try:
        return _load(stem or SHIPPED_STEM)
    except ModelArtifactError as exc:
        raise ConfigError(
            f"cannot load the trained refusal pre-filter: {exc}. Rebuild it with "
            '`refusal-audit train`, or set prefilter_model = "cues"'
        ) from exc
