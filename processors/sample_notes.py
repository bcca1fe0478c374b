"""Notes on rates that rest on too few events (the HTML report's minimum-sample notes).

A rate is *thin* when its Wilson 95% interval (Wilson 1927, ``processors.stats``) is wider
than ``max_width`` (a proportion: 0.20 means the interval spans 20 percentage points, about
+-10 points). The note says how many events the same observed rate would need for an
interval no wider than that: the smallest ``n`` whose Wilson interval at the observed
proportion ``p`` is at most ``max_width`` wide. That uses Wilson's closed form with ``p``
held fixed (width ``2 z / (1 + z^2/n) * sqrt(p (1 - p) / n + z^2 / (4 n^2))``, Wilson 1927,
eq. for the score interval; ``z`` = 1.96 for 95%), which shrinks strictly as ``n`` grows, so
bisection finds it; an integer count ``round(p n)`` can be a few events off either way.

The threshold is a reading aid chosen by the team (setting ``report_max_interval_width``),
not a statistical law: the interval itself is always shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from processors.stats import wilson_interval

MAX_EVENTS_SEARCHED = 10_000_000
Z_95 = 1.959963984540054  # scipy.stats.norm.ppf(0.975)


@dataclass(frozen=True)
class ThinRate:
    """A rate whose interval is wider than the team reads with confidence.

    ``label``: what the rate is about (``"acme-chat-small, 2025-06-03"``); ``successes`` /
    ``trials``: the counts; ``low``/``high``: the Wilson 95% interval (proportions);
    ``needed``: events the observed rate would need for an interval of at most
    ``max_width``; ``unit``: what the trials are, plural ("audited refusals").
    """

    label: str
    what: str
    successes: int
    trials: int
    low: float
    high: float
    needed: int
    max_width: float
    unit: str = "events"

    @property
    def width(self) -> float:
        """Width of the interval (proportion, 0..1)."""
        return self.high - self.low

    def sentence(self) -> str:
        """The note as one sentence for people."""
        return (
            f"{self.what} for {self.label} rests on {self.trials:,} {self.unit}: "
            f"{self.successes}/{self.trials}, 95% interval {self.low:.1%} to {self.high:.1%} "
            f"({self.width * 100:.0f} points wide); about {self.needed:,} {self.unit} would "
            f"narrow it to {self.max_width * 100:.0f} points."
        )


def _width(p: float, n: int) -> float:
    q = Z_95 * Z_95 / n
    return 2 * Z_95 / (1 + q) * math.sqrt(p * (1 - p) / n + q / (4 * n))


def _needed(rate: float, max_width: float) -> int:
    lo, hi = 1, MAX_EVENTS_SEARCHED
    while lo < hi:
        mid = (lo + hi) // 2
        if _width(rate, mid) <= max_width:
            hi = mid
        else:
            lo = mid + 1
    return lo


def events_for_width(rate: float, max_width: float) -> int:
    """Smallest number of events whose Wilson 95% interval at the observed proportion
    ``rate`` is at most ``max_width`` wide (both proportions in [0, 1]; see the module).

    Raises ``ValueError`` when ``rate`` is outside [0, 1] or ``max_width`` outside (0, 1].
    Capped at ``MAX_EVENTS_SEARCHED``.
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must be in [0, 1], got {rate}")
    if not 0.0 < max_width <= 1.0:
        raise ValueError(f"max_width must be in (0, 1], got {max_width}")
    return _needed(rate, max_width)


def thin_rate(
    label: str, what: str, successes: int, trials: int, max_width: float, unit: str = "events"
) -> ThinRate | None:
    """A ``ThinRate`` when ``successes / trials`` has a Wilson 95% interval wider than
    ``max_width``, else None. ``trials`` 0 is always thin (the interval is [0, 1]).
    ``unit``: what the trials are (plural), for the sentence.

    Raises ``ValueError`` for counts out of range or ``max_width`` outside (0, 1].
    """
    if not 0.0 < max_width <= 1.0:
        raise ValueError(f"max_width must be in (0, 1], got {max_width}")
    low, high = wilson_interval(successes, trials)
    if high - low <= max_width:
        return None
    rate = successes / trials if trials else 0.5
    needed = events_for_width(rate, max_width)
    return ThinRate(label, what, successes, trials, low, high, needed, max_width, unit)
