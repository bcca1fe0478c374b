"""The trained refusal pre-filter: features, scoring and its pickle-free artifact.

A logistic regression over feature families that carry across models' phrasing (trained by
``refusal_audit.training.refusal``; ``refusal-audit train``). Scoring a batch is one
sparse-matrix product.

Feature families (columns in this order; an artifact names the families it was trained
with, a family left out contributes no column):

- ``word_opening``: word 1-2-grams of the opening (first two sentences, at most 400
  characters, of the normalised text: :func:`processors.refusal_cues.read_cues`), hashed into
  2^16 columns (scikit-learn ``HashingVectorizer``, MurmurHash3, no vocabulary to store),
  L2-normalised;
- ``word_text``: word 1-2-grams of the first 3,000 normalised characters, 2^17 columns, L2;
- ``char_opening``: character 3-5-grams within word boundaries of the opening, 2^17
  columns, L2;
- ``cues``: one binary column per name of :data:`processors.prefilter.CUE_FEATURE_NAMES`
  (the hand-written cue families, opening and later, fired or not), plus the cue scorer's
  summed evidence and refusal evidence, each divided by 5 and clipped to [-2, 2];
- ``shape``: ``log1p(chars) / 10``, ``min(list items, 10) / 10``, longer than 800
  characters, opening share of the text, a ``?`` in the opening, a persona prefix
  (``NAME:`` / ``[...]`` in the first 40 characters).

The artifact is two files: ``<stem>.npz`` (arrays only, read with ``allow_pickle=False``)
and ``<stem>.json`` (format version, feature spec, threshold, training summary, content
hash). The content hash is SHA-256 over the canonical JSON of the spec and the arrays'
dtype, shape and bytes, so it changes exactly when the scoring changes. This module builds
and checks the arrays and the spec; reading and writing the two files is
``inference.model_files`` (``load_refusal_model``, ``save_refusal_model``, and
``read_artifact``/``write_artifact`` for every trained model).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse

from processors.refusal_cues import CUE_FEATURE_NAMES, CueReading

FORMAT_VERSION = 1
FAMILIES = ("word_opening", "word_text", "char_opening", "cues", "shape")
TEXT_MAX_CHARS = 3000
SHAPE_NAMES = ("log_chars", "list_items", "long", "opening_share", "question", "persona")
_TOKEN_PATTERN = r"(?u)\b\w+\b|[!?]"
_PERSONA = re.compile(r"^\W{0,3}(?:\[[^\]]{1,30}\]|[\w ()\u00c0-\uffff]{1,30}:)")

FloatArray = npt.NDArray[np.float64]


class ModelArtifactError(RuntimeError):
    """The refusal model artifact is missing, corrupt or does not fit this code."""


#: Columns of the hashed text families (their ``HashingVectorizer``'s ``n_features``).
_HASHED_WIDTHS = {"word_opening": 2**16, "word_text": 2**17, "char_opening": 2**17}


@lru_cache(maxsize=1)
def _vectorizers() -> dict[str, Any]:
    """The hashed families' vectorizers; scikit-learn is imported on first use (a process
    using the cue pre-filter never loads it)."""
    from sklearn.feature_extraction.text import HashingVectorizer

    common: dict[str, Any] = {"alternate_sign": False, "norm": "l2", "lowercase": False}
    return {
        "word_opening": HashingVectorizer(
            analyzer="word",
            ngram_range=(1, 2),
            n_features=_HASHED_WIDTHS["word_opening"],
            token_pattern=_TOKEN_PATTERN,
            **common,
        ),
        "word_text": HashingVectorizer(
            analyzer="word",
            ngram_range=(1, 2),
            n_features=_HASHED_WIDTHS["word_text"],
            token_pattern=_TOKEN_PATTERN,
            **common,
        ),
        "char_opening": HashingVectorizer(
            analyzer="char_wb",
            ngram_range=(3, 5),
            n_features=_HASHED_WIDTHS["char_opening"],
            **common,
        ),
    }


def family_width(family: str) -> int:
    """Number of columns of ``family`` (one of :data:`FAMILIES`; ``KeyError`` otherwise)."""
    if family in _HASHED_WIDTHS:
        return _HASHED_WIDTHS[family]
    return {"cues": len(CUE_FEATURE_NAMES) + 2, "shape": len(SHAPE_NAMES)}[family]


def _cue_block(readings: Sequence[CueReading]) -> sparse.csr_matrix:
    index = {name: i for i, name in enumerate(CUE_FEATURE_NAMES)}
    rows: list[int] = []
    cols: list[int] = []
    for r, reading in enumerate(readings):
        for cue in reading.cues:
            c = index.get(cue)
            if c is not None:
                rows.append(r)
                cols.append(c)
    data = [1.0] * len(rows)
    for r, reading in enumerate(readings):
        for c, value in (
            (len(index), reading.evidence),
            (len(index) + 1, reading.refusal_evidence),
        ):
            if value:
                rows.append(r)
                cols.append(c)
                data.append(min(2.0, max(-2.0, value / 5.0)))
    return sparse.csr_matrix(
        (np.asarray(data, dtype=np.float64), (rows, cols)), shape=(len(readings), len(index) + 2)
    )


def _shape_block(readings: Sequence[CueReading]) -> sparse.csr_matrix:
    out = np.zeros((len(readings), len(SHAPE_NAMES)), dtype=np.float64)
    for r, reading in enumerate(readings):
        n = len(reading.norm)
        if not n:
            continue
        out[r] = (
            math.log1p(n) / 10.0,
            min(reading.list_items, 10) / 10.0,
            1.0 if n > 800 else 0.0,
            len(reading.opening) / n,
            1.0 if "?" in reading.opening else 0.0,
            1.0 if _PERSONA.match(reading.norm[:40]) else 0.0,
        )
    return sparse.csr_matrix(out)


def featurize(
    readings: Sequence[CueReading], families: Sequence[str] = FAMILIES
) -> sparse.csr_matrix:
    """The feature matrix of a batch: shape ``(len(readings), sum of family widths)``.

    ``readings`` come from :func:`processors.refusal_cues.read_cues`; ``families`` is a subset
    of :data:`FAMILIES`, always stacked in :data:`FAMILIES` order. Deterministic (hashing,
    no fitted state). Raises ``ValueError`` for an unknown family.
    """
    unknown = set(families) - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown feature families {sorted(unknown)}")
    blocks: list[sparse.csr_matrix] = []
    for family in FAMILIES:
        if family not in families:
            continue
        if family == "word_opening" or family == "char_opening":
            blocks.append(_vectorizers()[family].transform([r.opening for r in readings]))
        elif family == "word_text":
            texts = [r.norm[:TEXT_MAX_CHARS] for r in readings]
            blocks.append(_vectorizers()[family].transform(texts))
        elif family == "cues":
            blocks.append(_cue_block(readings))
        else:
            blocks.append(_shape_block(readings))
    return sparse.hstack(blocks, format="csr", dtype=np.float64)


def content_hash(spec: dict[str, Any], arrays: dict[str, np.ndarray[Any, Any]]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``spec`` and every array's name, dtype, shape
    and bytes (arrays in name order)."""
    h = hashlib.sha256()
    h.update(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class RefusalModel:
    """A trained refusal scorer: ``weights`` (dense, one per feature column), ``bias``,
    ``threshold`` (probability at which a response is a refusal, chosen at training time),
    ``families`` it reads, ``spec`` (the JSON-able feature spec) and ``content_hash``."""

    weights: FloatArray
    bias: float
    threshold: float
    families: tuple[str, ...]
    spec: dict[str, Any]
    content_hash: str

    @property
    def version(self) -> str:
        """Short name for provenance: ``refusal-lr-<first 12 hex of the content hash>``."""
        return f"refusal-lr-{self.content_hash[:12]}"

    def margins(self, readings: Sequence[CueReading]) -> FloatArray:
        """Logits ``X @ w + b`` of a batch, shape ``(len(readings),)``."""
        if not readings:
            return np.zeros(0, dtype=np.float64)
        x = featurize(readings, self.families)
        return np.asarray(x @ self.weights, dtype=np.float64) + self.bias

    def probabilities(self, readings: Sequence[CueReading]) -> FloatArray:
        """The model's refusal probabilities of a batch, shape ``(len(readings),)``."""
        return 1.0 / (1.0 + np.exp(-self.margins(readings)))

    def scores(self, readings: Sequence[CueReading]) -> FloatArray:
        """Pre-filter scores in [0, 1] with the threshold folded in (``>= 0.5`` = refusal):
        ``sigmoid(margin - logit(threshold))``, shape ``(len(readings),)``."""
        shift = math.log(self.threshold / (1.0 - self.threshold))
        return 1.0 / (1.0 + np.exp(-(self.margins(readings) - shift)))


def build_spec(families: Sequence[str], threshold: float) -> dict[str, Any]:
    """The feature spec stored in (and checked against) an artifact's metadata."""
    return {
        "format_version": FORMAT_VERSION,
        "families": [f for f in FAMILIES if f in families],
        "widths": {f: family_width(f) for f in FAMILIES if f in families},
        "cue_names": list(CUE_FEATURE_NAMES),
        "shape_names": list(SHAPE_NAMES),
        "text_max_chars": TEXT_MAX_CHARS,
        "threshold": threshold,
    }


def model_arrays(weights: FloatArray, bias: float) -> dict[str, np.ndarray[Any, Any]]:
    """The arrays an artifact stores: non-zero weights as (int32 index, float32 value) and
    the bias (float64, shape (1,)). Weights are rounded to float32 before hashing."""
    nz = np.flatnonzero(weights).astype(np.int32)
    return {
        "weight_index": nz,
        "weight_value": weights[nz].astype(np.float32),
        "bias": np.array([bias], dtype=np.float64),
    }


def model_from_arrays(
    spec: dict[str, Any], arrays: dict[str, np.ndarray[Any, Any]]
) -> RefusalModel:
    """A :class:`RefusalModel` from its spec and arrays. Raises :class:`ModelArtifactError`
    when the spec does not fit this code (format, families, widths, cue names)."""
    if spec.get("format_version") != FORMAT_VERSION:
        raise ModelArtifactError(
            f"artifact format {spec.get('format_version')!r}, this code reads {FORMAT_VERSION}"
        )
    families = tuple(spec.get("families", ()))
    if not families or set(families) - set(FAMILIES):
        raise ModelArtifactError(f"artifact names unknown feature families {families}")
    expected = build_spec(families, float(spec.get("threshold", -1)))
    for key in ("widths", "cue_names", "shape_names", "text_max_chars"):
        if spec.get(key) != expected[key]:
            raise ModelArtifactError(
                f"artifact {key} differ from this code's (retrain with `refusal-audit train`)"
            )
    threshold = float(spec["threshold"])
    if not 0.0 < threshold < 1.0:
        raise ModelArtifactError(f"artifact threshold {threshold} not in (0, 1)")
    width = sum(expected["widths"].values())
    try:
        index = np.asarray(arrays["weight_index"])
        value = np.asarray(arrays["weight_value"])
        bias = float(np.asarray(arrays["bias"]).reshape(-1)[0])
    except (KeyError, IndexError) as exc:
        raise ModelArtifactError(f"artifact arrays incomplete: {exc}") from exc
    if index.dtype != np.int32 or value.dtype != np.float32 or index.shape != value.shape:
        raise ModelArtifactError("artifact weight arrays have the wrong dtype or shape")
    if index.size and (index.min() < 0 or index.max() >= width):
        raise ModelArtifactError("artifact weight index outside the feature space")
    weights = np.zeros(width, dtype=np.float64)
    weights[index] = value.astype(np.float64)
    digest = content_hash(
        spec, {"weight_index": index, "weight_value": value, "bias": np.asarray(arrays["bias"])}
    )
    return RefusalModel(weights, bias, threshold, families, spec, digest)


def artifact_paths(stem: Path) -> tuple[Path, Path]:
    """The ``(.npz, .json)`` paths of the artifact named ``stem`` (a path without suffix)."""
    return stem.with_suffix(".npz"), stem.with_suffix(".json")


def check_hash(stem: Path, what: str, recorded: object, computed: str) -> None:
    """Raise :class:`ModelArtifactError` when the recomputed content hash differs from the
    recorded one (a corrupt or edited artifact)."""
    if computed != recorded:
        raise ModelArtifactError(
            f"{what} {artifact_paths(stem)[0]} does not match its recorded content hash "
            f"({recorded!r} recorded, {computed} computed)"
        )
