"""Interval estimates for rates reported to analysts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

# The standard normal quantile of the default two-sided 95% interval, scipy.special.ndtri(0.975)
# to the last bit (tests/test_stats.py checks it): with it a worker computing 95% intervals
# imports no scipy (issue 27); other confidences ask scipy.
Z_95 = 1.959963984540054


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
    return _wilson(successes, trials, confidence)


@lru_cache(maxsize=16384, typed=True)
def _wilson(successes: int, trials: int, confidence: float) -> tuple[float, float]:
    """The computation behind :func:`wilson_interval`, memoised: the closed form scipy's
    ``binomtest(...).proportion_ci(method="wilson")`` evaluates (Newcombe 1998, the same
    operations in the same order, so the same floats), without ``binomtest``'s p-value search
    that cost about 1 ms a call (the drift detectors ask for four intervals per scope and
    window). Pure, so the cache changes no result."""
    n, p = trials, successes / trials
    z = Z_95 if confidence == 0.95 else _normal_quantile(0.5 + 0.5 * confidence)
    denom = 2 * (n + z**2)
    center = (2 * n * p + z**2) / denom
    delta = z / denom * math.sqrt(4 * n * p * (1 - p) + z**2)
    low = 0.0 if successes == 0 else center - delta
    high = 1.0 if successes == trials else center + delta
    return (float(low), float(high))


def _normal_quantile(q: float) -> float:
    """The standard normal quantile of ``q`` in (0, 1) (``scipy.special.ndtri``)."""
    from scipy.special import ndtri

    return float(ndtri(q))


def stratified_proportion(
    strata: Sequence[tuple[int, int, int]], confidence: float = 0.95
) -> tuple[float, float, float] | None:
    """A population proportion estimated from a stratified sample: ``(estimate, low, high)``.

    ``strata`` are ``(population, successes, trials)`` per stratum: ``population`` items in
    the stratum, ``trials`` of them sampled (reviewed), ``successes`` of those positive. The
    estimate is ``sum(W_h * p_h)`` with ``W_h = N_h / N`` and ``p_h = successes / trials``
    (Cochran, *Sampling Techniques*, 3rd ed. 1977, §5.3). Its variance is
    ``sum(W_h**2 * (1 - f_h) * q_h * (1 - q_h) / (n_h + 4))`` with the finite-population
    correction ``f_h = n_h / N_h`` (a stratum reviewed in full adds no variance) and the
    Agresti-Coull adjusted ``q_h = (x_h + 2) / (n_h + 4)`` (Agresti & Coull 1998, The American
    Statistician 52:119), so a stratum with 0 or all positives still has a width; the
    interval is normal, clipped to [0, 1].

    None when a stratum with items has no trials (nothing to estimate it from) or there are
    no items at all. Raises ``ValueError`` for negative counts, ``successes > trials`` or
    ``trials > population``.
    """
    total = sum(population for population, _, _ in strata)
    if total == 0:
        return None
    estimate = variance = 0.0
    for population, successes, trials in strata:
        if min(population, successes, trials) < 0 or successes > trials or trials > population:
            raise ValueError(f"stratum {(population, successes, trials)} is not a valid sample")
        if population == 0:
            continue
        if trials == 0:
            return None
        weight = population / total
        estimate += weight * successes / trials
        adjusted = (successes + 2) / (trials + 4)
        fpc = 1.0 - trials / population
        variance += weight**2 * fpc * adjusted * (1 - adjusted) / (trials + 4)
    from scipy.stats import norm

    z = float(norm.ppf(0.5 + confidence / 2))
    half = z * math.sqrt(variance)
    return estimate, max(0.0, estimate - half), min(1.0, estimate + half)
