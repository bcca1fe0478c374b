"""The minimum-sample notes of the HTML report (``processors.sample_notes``)."""

from __future__ import annotations

import pytest
from scipy.stats import norm

from processors.sample_notes import events_for_width, thin_rate
from processors.stats import wilson_interval


def width(k: int, n: int) -> float:
    low, high = wilson_interval(k, n)
    return high - low


def wilson_width(p: float, n: int, z: float = 1.96) -> float:
    """Wilson's score interval width at proportion p, written out (Wilson 1927)."""
    centre_scale = 1 + z * z / n
    return 2 * z / centre_scale * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5


@pytest.mark.parametrize("rate", [0.0, 0.05, 0.25, 0.5, 0.9])
@pytest.mark.parametrize("max_width", [0.1, 0.2, 0.3])
def test_events_for_width_is_the_smallest_count_whose_interval_is_narrow_enough(
    rate: float, max_width: float
) -> None:
    n = events_for_width(rate, max_width)
    assert wilson_width(rate, n) <= max_width + 1e-4
    assert n == 1 or wilson_width(rate, n - 1) > max_width - 1e-4
    # the integer count's scipy interval is within a few events of it
    assert min(width(round(rate * m), m) for m in range(n, n + 4)) <= max_width


def test_events_for_width_agrees_with_the_normal_approximation_away_from_the_edges() -> None:
    # n = z^2 p (1 - p) / h^2 for half-width h (Cochran 1977, eq. 4.2): 96 at p = 0.5, h = 0.1
    z = float(norm.ppf(0.975))
    for rate in (0.3, 0.5):
        normal = z**2 * rate * (1 - rate) / 0.1**2
        assert events_for_width(rate, 0.2) == pytest.approx(normal, rel=0.1)


def test_a_thin_rate_says_its_counts_interval_and_what_would_narrow_it() -> None:
    note = thin_rate("acme on 2025-06-03", "The false-positive rate", 7, 9, 0.2)
    assert note is not None
    low, high = wilson_interval(7, 9)
    assert (note.low, note.high) == (low, high) and note.width > 0.2
    assert note.needed == events_for_width(7 / 9, 0.2) and note.needed > 9
    text = note.sentence()
    assert "acme on 2025-06-03" in text and "7/9" in text and f"{note.needed:,} events" in text
    refusals = thin_rate("m", "The rate", 7, 9, 0.2, unit="audited refusals")
    assert refusals is not None and "rests on 9 audited refusals" in refusals.sentence()


def test_a_rate_on_enough_events_has_no_note_and_none_events_is_always_thin() -> None:
    assert thin_rate("m", "rate", 250, 1000, 0.2) is None
    empty = thin_rate("m", "rate", 0, 0, 0.2)
    assert empty is not None and (empty.low, empty.high) == (0.0, 1.0)


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_bad_widths_and_rates_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="max_width"):
        thin_rate("m", "rate", 1, 2, bad)
    with pytest.raises(ValueError, match="max_width"):
        events_for_width(0.5, bad)
    if bad != 0.0:
        with pytest.raises(ValueError, match="rate"):
            events_for_width(bad, 0.2)
