"""Wilson interval: agrees with the closed form (Wilson 1927) and handles the edges."""

from __future__ import annotations

import math

import pytest

from processors.stats import wilson_interval


def closed_form(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (10, 10), (96, 105), (564, 600)])
def test_matches_closed_form(k: int, n: int) -> None:
    low, high = wilson_interval(k, n)
    exp_low, exp_high = closed_form(k, n)
    assert low == pytest.approx(max(0.0, exp_low), abs=1e-9)
    assert high == pytest.approx(min(1.0, exp_high), abs=1e-9)
    assert low <= k / n <= high


def test_edges() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(5, 3)


def test_the_95_percent_quantile_constant_is_scipys_to_the_last_bit() -> None:
    from scipy.special import ndtri
    from scipy.stats import binomtest

    from processors.stats import Z_95

    assert float(ndtri(0.975)) == Z_95
    # the default path (the constant, no scipy) matches scipy's own Wilson interval
    for k, n in [(1, 7), (3, 10), (41, 97), (500, 1000)]:
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert wilson_interval(k, n) == pytest.approx((ci.low, ci.high), rel=1e-12, abs=1e-15)
