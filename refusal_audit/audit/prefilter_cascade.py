"""The refusal cascade the application builds, with its encoder head's shipped artifact.

The head (``processors.refusal_cascade``) is stored like the other trained models: ``<stem>.npz``
(arrays, read without pickle) and ``<stem>.json`` (spec, content hash, training summary),
verified on load (``inference.model_files.load_head``; ``save_head`` writes it).
:func:`build_cascade` loads it with its encoder once per process when the setting
``prefilter_cascade_band`` is not empty; the encoder is fetched at install time
(``refusal-audit encoders fetch``), never at run time.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from processors.refusal_cascade import Cascade, CascadeBand, EncoderHead
from refusal_audit.config import ConfigError, Settings

if TYPE_CHECKING:
    from refusal_audit.encoders.runtime import OnnxEncoder

#: Stem of the head shipped in the package (``python -m refusal_audit.training.refusal_cascade``).
HEAD_STEM = Path(__file__).resolve().parents[1] / "models" / "refusal_cascade_head"
_WHAT = "refusal cascade head"


@lru_cache(maxsize=4)
def _cached(stem: Path, encoder_dir: Path, threads: int) -> tuple[EncoderHead, OnnxEncoder]:
    from inference.model_files import load_head
    from refusal_audit.encoders.runtime import OnnxEncoder

    head = load_head(stem)
    cfg = Settings(encoder_dir=encoder_dir, encoder_threads=threads)
    return head, OnnxEncoder.load(head.encoder, cfg)


def build_cascade(cfg: Settings) -> Cascade | None:
    """The cascade of ``cfg`` (setting ``prefilter_cascade_band``), or None when the band is
    empty (the default: the cascade is off) or the pre-filter is off.

    Loads the head (``prefilter_cascade_head_path`` or the shipped one) and its encoder once
    per process. Raises ``ConfigError`` naming the file or the fetch command when either is
    missing or corrupt, so start-up fails with exit 2. The ONNX runtime, the tokenizer and
    scipy are imported only when the cascade is on (a worker without it does without them).
    """
    low, high = cfg.prefilter_cascade_band
    band = CascadeBand(low, high)
    if band.empty or not cfg.prefilter_enabled:
        return None
    from processors.refusal_model import ModelArtifactError
    from refusal_audit.encoders.catalog import EncoderError

    stem = cfg.prefilter_cascade_head_path or HEAD_STEM
    if stem.suffix in {".npz", ".json"}:
        stem = stem.with_suffix("")
    try:
        head, encoder = _cached(stem, cfg.resolved_encoder_dir, cfg.encoder_threads)
    except ModelArtifactError as exc:
        raise ConfigError(f"cannot load the {_WHAT}: {exc}") from exc
    except EncoderError as exc:
        raise ConfigError(f"the {_WHAT} needs its encoder: {exc}") from exc
    return Cascade(band, head, encoder)
