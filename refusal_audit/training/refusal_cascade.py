"""Fit and measure the refusal cascade's encoder head (issue 25, item 3).

Fixed before looking at any held-out fold (the discipline of ``training/refusal.py``):

- rows: every labelled response of ``training.labels.load_refusal_examples`` with the request
  it answers (XSTest GPT-4 and Llama-2, GPTFuzz, the hand-labelled ChatGPT refusals, CoCoNot);
- features: :func:`processors.refusal_cascade.head_rows` over the int8 MiniLM encoder
  (:data:`ENCODER`; request and response encoded separately);
- model: L2 logistic regression (scikit-learn lbfgs, ``C`` = :data:`C`, balanced classes,
  rows weighted per source as ``training.refusal.source_weights``), threshold 0.5;
- measured leave-one-source-out: each source is scored by a head fitted on the other
  sources, and an XSTest model's fold trains without any XSTest rows (the two models
  answered the same prompts), so every figure is out of source. The shipped head is then
  fitted on every row.

``python -m refusal_audit.training.refusal_cascade`` writes the artifact
``refusal_audit/models/refusal_cascade_head.{npz,json}``; ``benchmarks/prefilter_cascade.py``
prints the trade-off curve.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.linear_model import LogisticRegression

from processors.prefilter import detect_refusal_texts
from processors.refusal_cascade import REQUEST_CUE_PREFIX, CascadeBand, head_rows
from processors.refusal_cues import CueReading, read_cues
from processors.text_encoder import TextEncoder
from refusal_audit.training.labels import LabelledResponse, load_refusal_examples
from refusal_audit.training.refusal import binary_figures, source_weights

ENCODER = "all-minilm-l6-v2-q"
C = 1.0
SEED = 0
#: Bands of the trade-off curve, narrowest first ([0.5, 0.5) is the cascade off).
CURVE_BANDS = ((0.5, 0.5), (0.45, 0.55), (0.4, 0.6), (0.3, 0.7), (0.2, 0.8), (0.1, 0.9))

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class CascadeData:
    """Labelled rows encoded once: ``x`` (head rows, shape ``(n, width)``), ``y`` (refusal),
    ``source``, the first stage's ``cue_score`` and ``cue_pred`` (the cue scorer with the
    request-aware stage, as the pipeline runs it by default), ``overridden`` (the request-aware
    stage decided: never re-decided by the head) and the ``readings``."""

    rows: tuple[LabelledResponse, ...]
    readings: tuple[CueReading, ...]
    x: FloatArray
    y: BoolArray
    source: npt.NDArray[np.str_]
    cue_score: FloatArray
    cue_pred: BoolArray
    overridden: BoolArray


def build_data(rows: list[LabelledResponse], encoder: TextEncoder) -> CascadeData:
    """Encode every row's request and response and build the head rows (slow: one encoder
    run per text, about 10 ms per response on one core)."""
    readings = tuple(read_cues(r.text) for r in rows)
    # the first stage as the pipeline runs it: cue scorer + request-aware stage
    decisions = detect_refusal_texts([r.text for r in rows], None, [r.request for r in rows])
    q = encoder.encode([r.request for r in rows])
    r = encoder.encode([row.text for row in rows])
    return CascadeData(
        rows=tuple(rows),
        readings=readings,
        x=head_rows(readings, q, r),
        y=np.array([row.is_refusal for row in rows], dtype=bool),
        source=np.array([row.source for row in rows]),
        cue_score=np.array([d.score for d in decisions], dtype=np.float64),
        cue_pred=np.array([d.is_refusal for d in decisions], dtype=bool),
        overridden=np.array(
            [any(c.startswith(REQUEST_CUE_PREFIX) for c in d.cues) for d in decisions], dtype=bool
        ),
    )


def fit(x: FloatArray, y: BoolArray, source: npt.NDArray[np.str_]) -> tuple[FloatArray, float]:
    """Fit the head; return ``(weights shape (width,), bias)``."""
    model = LogisticRegression(C=C, class_weight="balanced", max_iter=3000, random_state=SEED)
    model.fit(x, y, sample_weight=source_weights(source))
    return np.asarray(model.coef_[0], dtype=np.float64), float(model.intercept_[0])


def out_of_source(data: CascadeData) -> FloatArray:
    """Each row's head probability from a head fitted without its source (and without any
    XSTest row for an XSTest source), shape ``(n,)``."""
    proba = np.zeros(len(data.y), dtype=np.float64)
    xstest = np.char.startswith(data.source.astype(str), "xstest")
    for source in sorted(set(data.source.tolist())):
        test = data.source == source
        train = ~test & ~(xstest if source.startswith("xstest") else np.zeros_like(test))
        w, b = fit(data.x[train], data.y[train], data.source[train])
        proba[test] = 1.0 / (1.0 + np.exp(-(data.x[test] @ w + b)))
    return proba


def curve(data: CascadeData, proba: FloatArray) -> list[dict[str, Any]]:
    """Per band of :data:`CURVE_BANDS`: the share of rows the head decides and, per source
    with the head deciding inside the band (out-of-source probabilities), precision and
    recall (Wilson 95%) and F1 (bootstrap 95%) as
    :func:`refusal_audit.training.refusal.binary_figures` gives them, plus ``reached``."""
    out = []
    for low, high in CURVE_BANDS:
        band = CascadeBand(low, high)
        inside = ~data.overridden & np.array(
            [band.contains(float(s)) for s in data.cue_score], dtype=bool
        )
        pred = np.where(inside, proba >= 0.5, data.cue_pred)
        per_source = {
            s: {
                **binary_figures(data.y[m], pred[m]),
                "reached": round(float(inside[m].mean()), 4),
            }
            for s in sorted(set(data.source.tolist()))
            for m in [data.source == s]
        }
        out.append({"band": [low, high], "reached": round(float(inside.mean()), 4),
                    "sources": per_source})  # fmt: skip
    return out


def write_card(stem: Path, rows: int, refusals: int, encoder: str, digest: str) -> None:
    """Write the model card ``stem``.md beside the artifact."""
    stem.with_suffix(".md").write_text(
        "# Refusal cascade head\n\n"
        "Logistic regression over the cue and shape features of the response and the "
        f"`{encoder}` vectors of the request and the response (`processors/refusal_cascade.py`), "
        f"fitted on {rows} labelled responses ({refusals} refusals) of XSTest (GPT-4, Llama-2), "
        "GPTFuzz, the hand-labelled ChatGPT refusals and CoCoNot; "
        "`python -m refusal_audit.training.refusal_cascade` rebuilds it. "
        f"Content hash `{digest[:12]}`.\n\n"
        "It decides only the pre-filter scores inside the band `prefilter_cascade_band` "
        "(default empty: off). Out-of-source figures per band (each source scored by a head "
        "fitted without it): `python benchmarks/prefilter_cascade.py`, tabled in "
        "docs/evaluation.md.\n",
        encoding="utf-8",
    )


@dataclass(frozen=True)
class BuiltHead:
    """What :func:`build_head` wrote: the artifact ``stem``, its content hash and row counts."""

    stem: Path
    content_hash: str
    rows: int
    refusals: int


def build_head(shared_data: Path, stem: Path, encoder: TextEncoder, every: int = 1) -> BuiltHead:
    """Fit the head on every ``every``-th labelled row of each source and write ``stem``.npz /
    .json / .md. Raises ``FileNotFoundError`` / ``ValueError`` for missing or bad shared data,
    ``ValueError`` when the rows hold one class only, ``OSError`` for a failed write."""
    from inference.model_files import save_head

    rows = load_refusal_examples(shared_data)
    if every > 1:
        seen: dict[str, int] = {}
        kept = []
        for row in rows:
            seen[row.source] = seen.get(row.source, -1) + 1
            if seen[row.source] % every == 0:
                kept.append(row)
        rows = kept
    data = build_data(rows, encoder)
    if data.y.all() or not data.y.any():
        raise ValueError("the labelled rows hold one class only: nothing to fit")
    w, b = fit(data.x, data.y, data.source)
    refusals = int(data.y.sum())
    extra = {"rows": len(data.y), "refusals": refusals, "c": C}
    digest = save_head(stem, w, b, 0.5, encoder.name, encoder.dim, extra)
    write_card(stem, len(data.y), refusals, encoder.name, digest)
    return BuiltHead(stem, digest, len(data.y), refusals)


def main() -> None:
    """Fit the shipped head on every labelled row and write its artifact."""
    from refusal_audit.audit.prefilter_cascade import HEAD_STEM
    from refusal_audit.config import Settings
    from refusal_audit.encoders.runtime import OnnxEncoder

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared-data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--out", type=Path, default=HEAD_STEM)
    args = parser.parse_args()
    built = build_head(args.shared_data, args.out, OnnxEncoder.load(ENCODER, Settings()))
    print(f"wrote {args.out}.npz/.json/.md ({built.rows} rows), hash {built.content_hash[:12]}")


if __name__ == "__main__":
    main()
