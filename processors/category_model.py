"""The trained category model of the local engine (``local_model = "trained"``).

A multinomial logistic regression over sparse features of a (request, refusal) pair, trained
by ``refusal_audit.training.triage`` (``refusal-audit train``) from labelled refusals, that
chooses between the top-level codes a refusal that is not an over-refusal can have
(``genuine_safety_refusal``, ``capability_boundary``, ``clarification_needed``). It reads the
refusal's opening as well as the request ("I am an AI and cannot browse" says capability,
"could you clarify" says clarification). The over-refusal score stays the engine's cue score:
a trained over-refusal head over the request features below was measured and is worse on
every held-out fold (docs/evaluation.md, ``benchmarks/triage_folds.py``).

Feature families (columns stacked in :data:`FAMILIES` order):

- ``request_words``: word 1-2-grams of the lower-cased request (first 2,000 characters),
  hashed into 2^17 columns (scikit-learn ``HashingVectorizer``, MurmurHash3), L2-normalised;
- ``request_chars``: character 3-5-grams within word boundaries of the request, 2^17, L2;
- ``request_cues``: the local engine's request-side cues (``processors.engines.local_cues.CUES``):
  one binary column per cue label, one per family holding the family's hand-set weight / 3;
- ``response_words``: word 1-2-grams of the refusal's first 400 characters, 2^16, L2;
- ``response_cues``: the same two blocks for the refusal-side cues.

A batch is scored with one sparse-matrix product. The artifact is ``<stem>.npz``
(arrays only, ``allow_pickle=False``) and ``<stem>.json`` (spec, classes,
training summary, content hash over spec and arrays, as
:func:`processors.refusal_model.content_hash`), read and written by
``inference.model_files`` (``load_category_model``, ``save_category_model``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse

from processors.engines.local_cues import CUES, find_cues
from processors.refusal_model import (
    ModelArtifactError,
    content_hash,
)

FORMAT_VERSION = 1
FAMILIES = ("request_words", "request_chars", "request_cues", "response_words", "response_cues")
OVER_REFUSAL_FAMILIES = ("request_words", "request_chars", "request_cues")
"""Families of the measured (not shipped) over-refusal head: the request only."""
CATEGORY_FAMILIES = FAMILIES
#: Top-level codes the category model chooses between (over-refusal is the cue score's call).
CATEGORY_CLASSES = ("genuine_safety_refusal", "capability_boundary", "clarification_needed")
REQUEST_MAX_CHARS = 2000
RESPONSE_OPENING_CHARS = 400
_TOKEN_PATTERN = r"(?u)\b\w+\b"

FloatArray = npt.NDArray[np.float64]


def _cue_names(side: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    labels = tuple(dict.fromkeys(c.label for c in CUES if c.side == side))
    families = tuple(dict.fromkeys(c.family for c in CUES if c.side == side))
    return labels, families


REQUEST_CUE_LABELS, REQUEST_CUE_FAMILIES = _cue_names("request")
RESPONSE_CUE_LABELS, RESPONSE_CUE_FAMILIES = _cue_names("response")

_COMMON: dict[str, Any] = {"alternate_sign": False, "norm": "l2", "lowercase": True}
#: Columns of the hashed text families (their ``HashingVectorizer``'s ``n_features``).
_HASHED_WIDTHS = {"request_words": 2**17, "request_chars": 2**17, "response_words": 2**16}


@lru_cache(maxsize=1)
def _vectorizers() -> dict[str, Any]:
    """The hashed text families' vectorizers; scikit-learn is imported on first use, so a
    process that never featurises (a streaming worker) does not load it."""
    from sklearn.feature_extraction.text import HashingVectorizer

    return {
        "request_words": HashingVectorizer(
            analyzer="word",
            ngram_range=(1, 2),
            n_features=_HASHED_WIDTHS["request_words"],
            token_pattern=_TOKEN_PATTERN,
            **_COMMON,
        ),
        "request_chars": HashingVectorizer(
            analyzer="char_wb",
            ngram_range=(3, 5),
            n_features=_HASHED_WIDTHS["request_chars"],
            **_COMMON,
        ),
        "response_words": HashingVectorizer(
            analyzer="word",
            ngram_range=(1, 2),
            n_features=_HASHED_WIDTHS["response_words"],
            token_pattern=_TOKEN_PATTERN,
            **_COMMON,
        ),
    }


def family_width(family: str) -> int:
    """Number of columns of ``family`` (one of :data:`FAMILIES`; ``KeyError`` otherwise)."""
    if family in _HASHED_WIDTHS:
        return _HASHED_WIDTHS[family]
    if family == "request_cues":
        return len(REQUEST_CUE_LABELS) + len(REQUEST_CUE_FAMILIES)
    if family == "response_cues":
        return len(RESPONSE_CUE_LABELS) + len(RESPONSE_CUE_FAMILIES)
    raise KeyError(family)


@dataclass(frozen=True)
class Pair:
    """One refusal to featurise: the (redacted) ``request`` and ``response`` texts and the
    cues the local engine found in them (``(label, family, side, weight)`` per hit)."""

    request: str
    response: str
    cues: tuple[tuple[str, str, str, float], ...]


def read_pair(request: str, response: str) -> Pair:
    """A :class:`Pair` with its cues found by :func:`processors.engines.local_cues.find_cues`."""
    hits = find_cues(request, response)
    return Pair(request, response, tuple((c.label, c.family, c.side, c.weight) for c, _ in hits))


def _cue_block(pairs: Sequence[Pair], side: str) -> sparse.csr_matrix:
    labels, families = (
        (REQUEST_CUE_LABELS, REQUEST_CUE_FAMILIES)
        if side == "request"
        else (RESPONSE_CUE_LABELS, RESPONSE_CUE_FAMILIES)
    )
    label_col = {name: i for i, name in enumerate(labels)}
    family_col = {name: len(labels) + i for i, name in enumerate(families)}
    rows: list[int] = []
    cols: list[int] = []
    data: list[float] = []
    for r, pair in enumerate(pairs):
        strongest: dict[str, float] = {}
        for label, family, cue_side, weight in pair.cues:
            if cue_side != side:
                continue
            c = label_col.get(label)
            if c is not None:
                rows.append(r)
                cols.append(c)
                data.append(1.0)
            prev = strongest.get(family)
            if prev is None or abs(weight) > abs(prev):
                strongest[family] = weight
        for family, weight in strongest.items():
            c = family_col.get(family)
            if c is not None and weight:
                rows.append(r)
                cols.append(c)
                data.append(weight / 3.0)
    width = len(labels) + len(families)
    return sparse.csr_matrix(
        (np.asarray(data, dtype=np.float64), (rows, cols)), shape=(len(pairs), width)
    )


def featurize(pairs: Sequence[Pair], families: Sequence[str] = FAMILIES) -> sparse.csr_matrix:
    """The feature matrix of a batch, shape ``(len(pairs), sum of family widths)``, families
    stacked in :data:`FAMILIES` order. Deterministic. ``ValueError`` for an unknown family."""
    unknown = set(families) - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown feature families {sorted(unknown)}")
    blocks: list[sparse.csr_matrix] = []
    for family in FAMILIES:
        if family not in families:
            continue
        if family in ("request_words", "request_chars"):
            texts = [p.request[:REQUEST_MAX_CHARS] for p in pairs]
            blocks.append(_vectorizers()[family].transform(texts))
        elif family == "response_words":
            texts = [p.response[:RESPONSE_OPENING_CHARS] for p in pairs]
            blocks.append(_vectorizers()[family].transform(texts))
        else:
            blocks.append(_cue_block(pairs, family.removesuffix("_cues")))
    return sparse.hstack(blocks, format="csr", dtype=np.float64)


@dataclass(frozen=True)
class Head:
    """One linear head: ``weights`` shape ``(k, width)`` (k = 1 for a binary head), ``bias``
    shape ``(k,)``, the ``families`` it reads and its ``classes`` (binary: ``("yes",)``)."""

    weights: FloatArray
    bias: FloatArray
    families: tuple[str, ...]
    classes: tuple[str, ...]

    def margins(self, x: sparse.csr_matrix) -> FloatArray:
        """Logits of a feature matrix built for this head's families, shape ``(n, k)``."""
        return np.asarray(x @ self.weights.T, dtype=np.float64) + self.bias


@dataclass(frozen=True)
class CategoryModel:
    """The trained category head, its JSON-able ``spec`` and ``content_hash``."""

    head: Head
    spec: dict[str, Any]
    content_hash: str

    @property
    def version(self) -> str:
        """Short name for provenance: ``category-lr-<first 12 hex of the content hash>``."""
        return f"category-lr-{self.content_hash[:12]}"

    def probabilities(self, pairs: Sequence[Pair]) -> FloatArray:
        """Class probabilities over :data:`CATEGORY_CLASSES` of a batch, shape
        ``(len(pairs), 3)`` (one sparse product and a softmax); empty input, shape ``(0, 3)``."""
        if not pairs:
            return np.zeros((0, len(CATEGORY_CLASSES)), dtype=np.float64)
        z = self.head.margins(featurize(pairs, self.head.families))
        z = z - z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return np.asarray(p / p.sum(axis=1, keepdims=True), dtype=np.float64)

    def probabilities_from_hits(
        self,
        requests: Sequence[str],
        responses: Sequence[str],
        hits: Sequence[Sequence[tuple[Any, str]]],
    ) -> FloatArray:
        """:meth:`probabilities` for texts whose cues the engine already found (``hits`` as
        :func:`processors.engines.local_cues.find_cues` returns them, one list per text pair)."""
        pairs = [
            Pair(q, r, tuple((c.label, c.family, c.side, c.weight) for c, _ in h))
            for q, r, h in zip(requests, responses, hits, strict=True)
        ]
        return self.probabilities(pairs)


def select_families(x: sparse.csr_matrix, families: Sequence[str]) -> sparse.csr_matrix:
    """The columns of ``families`` (in :data:`FAMILIES` order) of a matrix built by
    ``featurize(pairs, FAMILIES)``."""
    if tuple(families) == FAMILIES:
        return x
    parts = []
    start = 0
    for family in FAMILIES:
        width = family_width(family)
        if family in families:
            parts.append(x[:, start : start + width])
        start += width
    return sparse.hstack(parts, format="csr", dtype=np.float64)


def build_spec(families: Sequence[str]) -> dict[str, Any]:
    """The spec stored in (and checked against) an artifact's metadata."""
    used = [f for f in FAMILIES if f in families]
    return {
        "format_version": FORMAT_VERSION,
        "families": used,
        "classes": list(CATEGORY_CLASSES),
        "widths": {f: family_width(f) for f in used},
        "request_cue_labels": list(REQUEST_CUE_LABELS),
        "request_cue_families": list(REQUEST_CUE_FAMILIES),
        "response_cue_labels": list(RESPONSE_CUE_LABELS),
        "response_cue_families": list(RESPONSE_CUE_FAMILIES),
        "request_max_chars": REQUEST_MAX_CHARS,
        "response_opening_chars": RESPONSE_OPENING_CHARS,
    }


def model_arrays(head: Head) -> dict[str, np.ndarray[Any, Any]]:
    """The arrays an artifact stores: the non-zero weights as (int64 flat index into the
    ``(k, width)`` matrix, float32 value) and the bias (float64, shape ``(k,)``). Weights are
    rounded to float32 before hashing."""
    flat = head.weights.reshape(-1)
    nz = np.flatnonzero(flat).astype(np.int64)
    return {
        "weight_index": nz,
        "weight_value": flat[nz].astype(np.float32),
        "bias": np.asarray(head.bias, dtype=np.float64).reshape(-1),
    }


def model_from_arrays(
    spec: dict[str, Any], arrays: dict[str, np.ndarray[Any, Any]]
) -> CategoryModel:
    """A :class:`CategoryModel` from its spec and arrays; :class:`ModelArtifactError` when the
    spec does not fit this code (format, families, widths, cue names, classes) or the arrays
    do not fit the spec."""
    if spec.get("format_version") != FORMAT_VERSION:
        raise ModelArtifactError(
            f"category artifact format {spec.get('format_version')!r}, this code reads "
            f"{FORMAT_VERSION}"
        )
    families = tuple(spec.get("families", ()))
    if not families or set(families) - set(FAMILIES):
        raise ModelArtifactError(f"category artifact names unknown feature families {families}")
    for key, value in build_spec(families).items():
        if spec.get(key) != value:
            raise ModelArtifactError(
                f"category artifact {key} differ from this code's (retrain with "
                "`refusal-audit train`)"
            )
    try:
        index = np.asarray(arrays["weight_index"])
        value = np.asarray(arrays["weight_value"])
        bias = np.asarray(arrays["bias"])
    except KeyError as exc:
        raise ModelArtifactError(f"category artifact arrays incomplete: {exc}") from exc
    width = sum(family_width(f) for f in families)
    k = len(CATEGORY_CLASSES)
    if index.dtype != np.int64 or value.dtype != np.float32 or index.shape != value.shape:
        raise ModelArtifactError("category artifact weight arrays have the wrong dtype or shape")
    if bias.dtype != np.float64 or bias.shape != (k,):
        raise ModelArtifactError("category artifact bias has the wrong dtype or shape")
    if index.size and (index.min() < 0 or index.max() >= k * width):
        raise ModelArtifactError("category artifact weight index outside the feature space")
    flat = np.zeros(k * width, dtype=np.float64)
    flat[index] = value.astype(np.float64)
    head = Head(flat.reshape(k, width), bias.copy(), families, CATEGORY_CLASSES)
    digest = content_hash(spec, {"weight_index": index, "weight_value": value, "bias": bias})
    return CategoryModel(head, spec, digest)


def in_memory_model(head: Head) -> CategoryModel:
    """The :class:`CategoryModel` of a freshly fitted ``head``, with the hash an artifact of
    it would carry (weights rounded to float32 as in the artifact)."""
    spec = build_spec(head.families)
    return model_from_arrays(spec, model_arrays(head))
