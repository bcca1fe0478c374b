"""The refusal cascade's encoder head: its artifact, and the cascade the application builds.

The head (``processors.refusal_cascade``) is stored like the other trained models: ``<stem>.npz``
(arrays, read without pickle) and ``<stem>.json`` (spec, content hash, training summary),
verified on load. :func:`build_cascade` loads it with its encoder once per process when the
setting ``prefilter_cascade_band`` is not empty; the encoder is fetched at install time
(``refusal-audit encoders fetch``), never at run time.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from processors.refusal_cascade import Cascade, CascadeBand, EncoderHead, head_width
from processors.refusal_model import (
    ModelArtifactError,
    check_hash,
    content_hash,
    read_artifact,
    write_artifact,
)
from refusal_audit.config import ConfigError, Settings
from refusal_audit.encoders.catalog import EncoderError
from refusal_audit.encoders.runtime import OnnxEncoder

#: Stem of the head shipped in the package (``python -m refusal_audit.training.refusal_cascade``).
HEAD_STEM = Path(__file__).resolve().parents[1] / "models" / "refusal_cascade_head"
FORMAT_VERSION = 1
_WHAT = "refusal cascade head"


def _spec(threshold: float, encoder: str, dim: int) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "threshold": threshold,
        "encoder": encoder,
        "dim": dim,
        "width": head_width(dim),
    }


def save_head(
    stem: Path,
    weights: np.ndarray[Any, Any],
    bias: float,
    threshold: float,
    encoder: str,
    dim: int,
    extra: dict[str, Any],
) -> str:
    """Write the head artifact ``stem``.npz / ``stem``.json; return its content hash.

    Raises ``ValueError`` when ``weights`` is not of shape ``(head_width(dim),)``.
    """
    spec = _spec(threshold, encoder, dim)
    if weights.shape != (spec["width"],):
        raise ValueError(f"weights shape {weights.shape}, the head needs ({spec['width']},)")
    arrays: dict[str, np.ndarray[Any, Any]] = {
        "weights": weights.astype(np.float32),
        "bias": np.array([bias], dtype=np.float64),
    }
    return write_artifact(stem, spec, arrays, extra)


def load_head(stem: Path) -> EncoderHead:
    """Load and verify the head ``stem``. Raises ``ModelArtifactError`` naming the file and
    the fault (missing, unreadable, a spec this code does not read, wrong shapes, content
    hash mismatch)."""
    meta, arrays = read_artifact(stem, _WHAT)
    spec = meta["spec"]
    if spec.get("format_version") != FORMAT_VERSION:
        found = spec.get("format_version")
        raise ModelArtifactError(f"{_WHAT} format {found!r}, this code reads {FORMAT_VERSION}")
    try:
        dim = int(spec["dim"])
        threshold = float(spec["threshold"])
        encoder = str(spec["encoder"])
        weights = np.asarray(arrays["weights"])
        bias = np.asarray(arrays["bias"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelArtifactError(f"{_WHAT} {stem}: incomplete spec or arrays: {exc}") from exc
    if spec != _spec(threshold, encoder, dim) or not 0.0 < threshold < 1.0:
        raise ModelArtifactError(f"{_WHAT} {stem}: spec {spec} does not fit this code")
    if weights.dtype != np.float32 or weights.shape != (head_width(dim),) or bias.shape != (1,):
        raise ModelArtifactError(f"{_WHAT} {stem}: arrays of the wrong dtype or shape")
    digest = content_hash(spec, {"weights": weights, "bias": bias})
    check_hash(stem, _WHAT, meta.get("content_hash"), digest)
    return EncoderHead(weights.astype(np.float64), float(bias[0]), threshold, encoder, dim, digest)


@lru_cache(maxsize=4)
def _cached(stem: Path, encoder_dir: Path, threads: int) -> tuple[EncoderHead, OnnxEncoder]:
    head = load_head(stem)
    cfg = Settings(encoder_dir=encoder_dir, encoder_threads=threads)
    return head, OnnxEncoder.load(head.encoder, cfg)


def build_cascade(cfg: Settings) -> Cascade | None:
    """The cascade of ``cfg`` (setting ``prefilter_cascade_band``), or None when the band is
    empty (the default: the cascade is off) or the pre-filter is off.

    Loads the head (``prefilter_cascade_head_path`` or the shipped one) and its encoder once
    per process. Raises ``ConfigError`` naming the file or the fetch command when either is
    missing or corrupt, so start-up fails with exit 2.
    """
    low, high = cfg.prefilter_cascade_band
    band = CascadeBand(low, high)
    if band.empty or not cfg.prefilter_enabled:
        return None
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
