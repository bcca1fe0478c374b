"""Interval estimates for rates reported to analysts."""

from __future__ import annotations

from scipy.stats import binomtest


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``successes / trials``.

    Returns ``(low, high)`` in [0, 1]; ``(0.0, 1.0)`` when ``trials`` is 0. Computed by
    ``scipy.stats.binomtest(...).proportion_ci(method="wilson")`` (Wilson, 1927, JASA 22:209).
    Raises ``ValueError`` if ``successes`` is outside [0, trials].
    """
    if trials == 0:
        return (0.0, 1.0)
    if not 0 <= successes <= trials:
        raise ValueError(f"successes={successes} outside [0, {trials}]")
    ci = binomtest(successes, trials).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))
