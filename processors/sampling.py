"""Human-review sampling: every flagged item plus a seeded random share of the rest."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from schemas.audit import IndividualAssessment


def sample_draw(log_id: str, seed: int) -> float:
    """A uniform draw in [0, 1) determined by ``(seed, log_id)`` alone.

    Hash-based (BLAKE2b, 64 bits) rather than a sequential PRNG, so the decision for an
    event does not depend on batch composition or order: re-processing the same event with
    the same seed always makes the same sampling decision.
    """
    digest = hashlib.blake2b(f"{seed}:{log_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def review_reasons(
    assessments: Iterable[IndividualAssessment], rate: float, seed: int
) -> dict[str, str]:
    """Map each sampled log_id to why it goes to a reviewer.

    ``"flagged"`` for every assessment with ``requires_human_review``; ``"random_sample"``
    for an unflagged one whose ``sample_draw`` is below ``rate`` (so about ``rate`` of the
    unflagged items). Log ids not in the map are not sampled. Raises ``ValueError`` when
    ``rate`` is outside [0, 1].
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"review sample rate {rate} outside [0, 1]")
    reasons: dict[str, str] = {}
    for a in assessments:
        if a.requires_human_review:
            reasons[a.log_id] = "flagged"
        elif sample_draw(a.log_id, seed) < rate:
            reasons[a.log_id] = "random_sample"
    return reasons
