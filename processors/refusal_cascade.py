"""The refusal cascade: the cue scorer decides what it is sure of, an encoder head the rest.

Pure logic (the encoder is injected through :class:`processors.text_encoder.TextEncoder`;
no model files are read here). Issue 25, item 3.

How it decides
--------------
1. Every response is read by the cue scorer (:func:`processors.refusal_cues.read_cues`) and
   decided as today. A decision whose score lies inside the uncertain band
   ``[low, high)`` (:class:`CascadeBand`, setting ``prefilter_cascade_band``) is re-decided;
   every other decision stands, so the cascade never changes what the cue scorer is sure of.
2. For the events in the band, the request and the response are encoded (one unit vector
   ``q`` and ``r`` each, shape ``(dim,)``) and the head, a logistic regression fitted by
   ``refusal_audit.training.refusal_cascade``, scores the row

       x = [cue block, shape block, r, q * r, |q - r|, q . r]

   (the cue and shape blocks of :func:`processors.refusal_model.featurize`, then the
   response vector, the element-wise product and distance of the pair, and their cosine):
   the request enters, so a response is read against what was asked.
3. The head's probability, its decision threshold folded in (``>= 0.5`` = refusal),
   replaces the cue score; the cues still explain the decision and give the full/partial
   kind (:func:`processors.prefilter.decide_from_score`), and the cue ``"encoder_head"``
   marks a decision the head made.

An event the platform's classifier already decided (``source == "classifier"``) and a
decision the request-aware stage made (``processors.request_aware``) never reach the head.
Responses longer than the encoder's window are truncated by its tokenizer
(the opening, where refusals are stated, is always inside it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from processors.prefilter import RefusalDecision, decide_from_score
from processors.refusal_cues import CueReading, read_cues
from processors.text_encoder import TextEncoder

#: Feature families of the cue reading the head reads (see processors.refusal_model).
HEAD_FAMILIES = ("cues", "shape")
#: The cue naming a decision the encoder head made.
HEAD_CUE = "encoder_head"
#: Cues of the request-aware stage's overrides (processors.request_aware), never re-decided.
REQUEST_CUE_PREFIX = "request:"

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class CascadeBand:
    """The cue scores ``[low, high)`` the encoder head re-decides (both in [0, 1]).

    ``low == high`` is the empty band: the cascade is off. Raises ``ValueError`` when
    ``not 0 <= low <= high <= 1``.
    """

    low: float
    high: float

    def __post_init__(self) -> None:
        if not (0.0 <= self.low <= self.high <= 1.0) or math.isnan(self.low + self.high):
            raise ValueError(
                f"cascade band [{self.low}, {self.high}) must have 0 <= low <= high <= 1"
            )

    @property
    def empty(self) -> bool:
        """True when no score falls inside (the cascade is off)."""
        return self.low >= self.high

    def contains(self, score: float) -> bool:
        """Whether a cue score lies in ``[low, high)`` (``high == 1`` includes 1.0)."""
        if self.empty:
            return False
        return self.low <= score < self.high or (self.high >= 1.0 and score >= 1.0)


@dataclass(frozen=True)
class EncoderHead:
    """The fitted head: ``weights`` (shape ``(width,)``, :func:`head_width`), ``bias``,
    ``threshold`` (probability in (0, 1) at which a response is a refusal), ``encoder`` (the
    catalog name of the encoder it was trained with), ``dim`` (its vector size) and
    ``content_hash`` (of the artifact)."""

    weights: FloatArray
    bias: float
    threshold: float
    encoder: str
    dim: int
    content_hash: str

    @property
    def version(self) -> str:
        """Short provenance name: ``refusal-head-<first 12 hex of the content hash>``."""
        return f"refusal-head-{self.content_hash[:12]}"

    def scores(self, x: FloatArray) -> FloatArray:
        """Scores in [0, 1] of rows ``x`` (shape ``(n, width)``), the threshold folded in:
        ``sigmoid(x @ w + b - logit(threshold))``, shape ``(n,)``."""
        shift = math.log(self.threshold / (1.0 - self.threshold))
        return 1.0 / (1.0 + np.exp(-(x @ self.weights + self.bias - shift)))


def cue_width() -> int:
    """Columns of the cue and shape blocks (dense) that open every head row."""
    from processors.refusal_model import family_width

    return sum(family_width(f) for f in HEAD_FAMILIES)


def head_width(dim: int) -> int:
    """Columns of a head row for an encoder of ``dim``: cue blocks + 3 x dim + 1."""
    return cue_width() + 3 * dim + 1


HEAD_FORMAT_VERSION = 1
"""The format of a head artifact's spec that this code reads."""


def head_spec(threshold: float, encoder: str, dim: int) -> dict[str, Any]:
    """The spec a head artifact records (and a loaded one must equal): format version,
    ``threshold``, the ``encoder``'s name, its ``dim`` and the row width."""
    return {
        "format_version": HEAD_FORMAT_VERSION,
        "threshold": threshold,
        "encoder": encoder,
        "dim": dim,
        "width": head_width(dim),
    }


def head_rows(
    readings: Sequence[CueReading], q: npt.NDArray[Any], r: npt.NDArray[Any]
) -> FloatArray:
    """The head's feature rows, shape ``(n, head_width(dim))``.

    ``readings`` are the responses' cue readings; ``q`` and ``r`` the unit vectors of the
    requests and responses, shape ``(n, dim)`` each (an empty request's vector is whatever
    the encoder gives for ""; the row stays defined). Raises ``ValueError`` on shape mismatch.
    """
    from processors.refusal_model import featurize  # lazily: scipy stays out of workers

    n = len(readings)
    q = np.asarray(q, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    if q.shape != r.shape or q.ndim != 2 or q.shape[0] != n:
        raise ValueError(f"request/response vectors {q.shape} / {r.shape} do not fit {n} rows")
    cues = featurize(readings, HEAD_FAMILIES).toarray() if n else np.zeros((0, cue_width()))
    cos = (q * r).sum(axis=1, keepdims=True)
    return np.hstack([cues, r, q * r, np.abs(q - r), cos])


@dataclass(frozen=True)
class Cascade:
    """A band, a head and the encoder it was trained with, ready to re-decide a batch."""

    band: CascadeBand
    head: EncoderHead
    encoder: TextEncoder

    @property
    def version(self) -> str:
        """Provenance of the cascade's decisions: head, encoder and band, e.g.
        ``cascade-refusal-head-0123456789ab-all-minilm-l6-v2-q-0.4-0.6``."""
        band = f"{self.band.low:g}-{self.band.high:g}"
        return f"cascade-{self.head.version}-{self.head.encoder}-{band}"

    def decide(
        self,
        decisions: Sequence[RefusalDecision],
        requests: Sequence[str],
        responses: Sequence[str],
    ) -> tuple[list[RefusalDecision], int]:
        """Re-decide the text decisions inside the band; return ``(decisions, reached)``.

        The three sequences are aligned, one entry per event (``decisions`` from
        :func:`processors.prefilter.detect_refusals`). ``reached`` counts the events the
        head scored (the encoder ran on their request and response). Decisions outside the
        band, classifier decisions, empty responses and the request-aware stage's overrides
        (cues ``request:...``: their fixed scores 0.731 / 0.269 are rule decisions, not
        uncertainty) are returned unchanged. Raises
        ``ValueError`` when the lengths differ, and whatever the encoder raises.
        """
        if not len(decisions) == len(requests) == len(responses):
            raise ValueError("decisions, requests and responses must be aligned")
        out = list(decisions)
        idx = [
            i
            for i, d in enumerate(decisions)
            if d.source == "text"
            and responses[i].strip()
            and self.band.contains(d.score)
            and not any(c.startswith(REQUEST_CUE_PREFIX) for c in d.cues)
        ]
        if not idx:
            return out, 0
        readings = [read_cues(responses[i]) for i in idx]
        q = self.encoder.encode([requests[i] for i in idx])
        r = self.encoder.encode([responses[i] for i in idx])
        scores = self.head.scores(head_rows(readings, q, r))
        for i, reading, s in zip(idx, readings, scores, strict=True):
            d = decide_from_score(reading, float(s))
            out[i] = replace(d, cues=(*d.cues, HEAD_CUE))
        return out, len(idx)
