"""The shipped circumvention model: where it lives and how the application loads it (and
the encoder it needs, if any) into a ``CircumventionCheck``."""

from __future__ import annotations

import zipfile
from functools import lru_cache
from pathlib import Path

from processors.clarification.circumvention_model import (
    RULES_CHECK,
    CircumventionArtifactError,
    CircumventionCheck,
    CircumventionModel,
)
from refusal_audit.config import ConfigError, Settings

#: Stem of the artifact shipped in the package (``.npz`` arrays, ``.json`` metadata, ``.md``
#: model card), rebuilt by ``refusal-audit train --model circumvention -o refusal_audit/models``
#: (or ``python -m refusal_audit.training.circumvention``).
CIRCUMVENTION_STEM = Path(__file__).resolve().parents[1] / "models" / "circumvention_check"


@lru_cache(maxsize=4)
def load_circumvention_model(stem: Path = CIRCUMVENTION_STEM) -> CircumventionModel:
    """Load (once per process) and verify the artifact ``stem`` (a path without suffix).

    Raises ``ConfigError`` naming the file and the fault when it is missing, unreadable,
    built for other features, its content hash does not match or a weight breaks its sign
    constraint (exit 2 at start-up).
    """
    from inference import model_files  # scipy with it: loaded only with the trained check

    stem = stem.with_suffix("") if stem.suffix in {".npz", ".json", ".md"} else stem
    try:
        return model_files.load_circumvention_model(stem)
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        raise ConfigError(
            f"cannot load the circumvention model {stem}: {exc}. Rebuild it with "
            "`refusal-audit train --model circumvention`, or set "
            'clarify_circumvention_check = "rules"'
        ) from exc


def build_circumvention_check(cfg: Settings) -> CircumventionCheck:
    """The check the settings ask for (``clarify_circumvention_check``): ``rules`` (the
    deterministic rules), or ``trained`` (the artifact at ``clarify_circumvention_model_path``,
    default the shipped one, with its encoder loaded once here when it names one). Raises
    ``ConfigError`` (a missing encoder names ``refusal-audit encoders fetch``)."""
    if cfg.clarify_circumvention_check == "rules":
        return RULES_CHECK
    model = load_circumvention_model(cfg.clarify_circumvention_model_path or CIRCUMVENTION_STEM)
    if model.encoder is None:
        return CircumventionCheck(model)
    from refusal_audit.encoders.catalog import EncoderError
    from refusal_audit.encoders.runtime import OnnxEncoder

    try:
        encoder = OnnxEncoder.load(model.encoder, cfg)
    except EncoderError as exc:
        raise ConfigError(
            f"the circumvention model needs the sentence encoder {model.encoder}: {exc}. "
            f"Run `refusal-audit encoders fetch {model.encoder}`"
        ) from exc
    return CircumventionCheck(model, encoder)


__all__ = ["CircumventionArtifactError", "build_circumvention_check", "load_circumvention_model"]
