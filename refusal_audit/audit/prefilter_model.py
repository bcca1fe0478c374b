"""The shipped trained models (refusal pre-filter, local engine category): where they live
and how the application loads them."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from refusal_audit.config import ConfigError

if TYPE_CHECKING:  # the model files' readers pull numpy and scipy: loaded only with a model
    from processors.category_model import CategoryModel
    from processors.refusal_model import RefusalModel

#: Stem of the artifact shipped in the package (``.npz`` arrays, ``.json`` metadata, ``.md``
#: model card), rebuilt by ``refusal-audit train``.
SHIPPED_STEM = Path(__file__).resolve().parents[1] / "models" / "refusal_prefilter"
#: Stem of the shipped category model of the local engine (same three files).
CATEGORY_STEM = Path(__file__).resolve().parents[1] / "models" / "category_model"


def _stem(stem: Path | None) -> Path | None:
    """``stem`` without a model file suffix (``model.npz`` and ``model`` name one artifact)."""
    if stem is not None and stem.suffix in {".npz", ".json", ".md"}:
        return stem.with_suffix("")
    return stem


@lru_cache(maxsize=4)
def _load(stem: Path) -> RefusalModel:
    from inference.model_files import load_refusal_model

    return load_refusal_model(stem)


def load_shipped_model(stem: Path | None = None) -> RefusalModel:
    """Load (once per process) and verify the artifact ``stem`` (default :data:`SHIPPED_STEM`;
    setting ``prefilter_model_path``).

    Raises ``ConfigError`` naming the file and the fault when the artifact is missing,
    corrupt or built for other features, so start-up fails with a clear message (exit 2).
    """
    from processors.refusal_model import ModelArtifactError

    try:
        return _load(_stem(stem) or SHIPPED_STEM)
    except ModelArtifactError as exc:
        raise ConfigError(
            f"cannot load the trained refusal pre-filter: {exc}. Rebuild it with "
            '`refusal-audit train`, or set prefilter_model = "cues"'
        ) from exc


@lru_cache(maxsize=4)
def _load_category(stem: Path) -> CategoryModel:
    from inference.model_files import load_category_model

    return load_category_model(stem)


def load_shipped_category_model(stem: Path | None = None) -> CategoryModel:
    """Load (once per process) and verify the category model ``stem`` (default
    :data:`CATEGORY_STEM`; setting ``local_category_model_path``). Raises ``ConfigError``
    naming the file and the fault when it is missing, corrupt or built for other features
    (exit 2 at start-up)."""
    from processors.refusal_model import ModelArtifactError

    try:
        return _load_category(_stem(stem) or CATEGORY_STEM)
    except ModelArtifactError as exc:
        raise ConfigError(
            f"cannot load the trained category model: {exc}. Rebuild it with "
            '`refusal-audit train`, or set local_category_model = "cues"'
        ) from exc
