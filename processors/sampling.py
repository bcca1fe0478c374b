"""Human-review sampling: every flagged item, a seeded random share of the rest, and
optionally the unflagged, undrawn items nearest the engine's decision threshold."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from schemas.audit import IndividualAssessment

MAX_UNCERTAINTY_BAND = 0.5
"""The widest uncertainty band: with the default threshold 0.5 it covers every score."""


def sample_draw(log_id: str, seed: int) -> float:
    """A uniform draw in [0, 1) determined by ``(seed, log_id)`` alone.

    Hash-based (BLAKE2b, 64 bits) rather than a sequential PRNG, so the decision for an
    event does not depend on batch composition or order: re-processing the same event with
    the same seed always makes the same sampling decision.
    """
    digest = hashlib.blake2b(f"{seed}:{log_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def near_threshold(score: float | None, threshold: float, band: float) -> bool:
    """Whether an over-refusal ``score`` lies within ``band`` of ``threshold`` (inclusive).

    Always False for a ``band`` of 0 (uncertainty sampling off) and for a missing score (an
    engine that gives none).
    """
    return band > 0.0 and score is not None and abs(score - threshold) <= band


def review_reasons(
    assessments: Iterable[IndividualAssessment],
    rate: float,
    seed: int,
    *,
    scores: Mapping[str, float] | None = None,
    threshold: float = 0.5,
    uncertainty_band: float = 0.0,
) -> dict[str, str]:
    """Map each sampled log_id to why it goes to a reviewer.

    ``"flagged"`` for every assessment with ``requires_human_review``; ``"random_sample"``
    for an unflagged one whose ``sample_draw`` is below ``rate`` (so about ``rate`` of the
    unflagged items); ``"uncertainty"`` for an unflagged one the random sample did not draw
    whose over-refusal score in ``scores`` (log_id -> score) lies within
    ``uncertainty_band`` of ``threshold`` (``near_threshold``). The random draw is made
    first and never looks at the score, so the ``random_sample`` items stay a Bernoulli
    sample of all unflagged items (what the verified false-positive rate estimates from),
    with or without the band. Log ids not in the map are not sampled. Raises
    ``ValueError`` when ``rate`` is outside [0, 1] or ``uncertainty_band`` outside
    [0, ``MAX_UNCERTAINTY_BAND``].
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"review sample rate {rate} outside [0, 1]")
    if not 0.0 <= uncertainty_band <= MAX_UNCERTAINTY_BAND:
        raise ValueError(
            f"review uncertainty band {uncertainty_band} outside [0, {MAX_UNCERTAINTY_BAND}]"
        )
    scores = scores or {}
    reasons: dict[str, str] = {}
    for a in assessments:
        if a.requires_human_review:
            reasons[a.log_id] = "flagged"
        elif sample_draw(a.log_id, seed) < rate:
            reasons[a.log_id] = "random_sample"
        elif near_threshold(scores.get(a.log_id), threshold, uncertainty_band):
            reasons[a.log_id] = "uncertainty"
    return reasons
