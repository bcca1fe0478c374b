"""Agreement of human reviewers with the model (issue 10, the statistics part; pure).

One judgement at a time (the false-positive verdict, or the top-level category): the model's
label and the reviewer's label for each compared item. Reported with intervals:

- observed agreement ``agreed / n`` with its Wilson score interval (``processors.stats``);
- Cohen's kappa, agreement corrected for chance (Cohen 1960, Educational and Psychological
  Measurement 20:37), with the asymptotic confidence interval of Fleiss, Cohen & Everitt
  (1969): kappa +- z * its asymptotic standard error, both from
  ``statsmodels.stats.inter_rater.cohens_kappa``'s formulas (:func:`kappa_and_variance`);
- the confusion matrix (rows: the model's label, columns: the reviewer's).

Below ``min_items`` compared items no rate or kappa is reported (``insufficient_data``):
the Wilson interval of 30 items is still up to +-0.17 wide, and kappa's large-sample
standard error is not trustworthy on fewer (Fleiss, Levin & Paik, Statistical Methods for
Rates and Proportions, 3rd ed., ch. 18).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache

import numpy as np

from processors.stats import wilson_interval

DEFAULT_MIN_ITEMS = 30
"""Fewer compared items than this in a group: no rate or kappa (the reason above). The one
threshold of ``review stats``, the ``review_agreement`` and ``verified_false_positive_rate``
queries and the report."""


def event_week(moment: datetime) -> date:
    """The Monday (UTC) of the ISO week of ``moment``: the week every review-agreement figure
    is grouped by (``review stats``, the trend queries' ``toMonday(event_time)``, the report).
    """
    day = moment.astimezone(UTC).date()
    return day - timedelta(days=day.weekday())


def insufficient_note(n: int, min_items: int = DEFAULT_MIN_ITEMS) -> str:
    """The one wording of a group with too few compared items (``n`` < ``min_items``)."""
    return f"insufficient data: {n} compared item(s), at least {min_items} needed"


def grouping_rule(min_items: int = DEFAULT_MIN_ITEMS) -> str:
    """The rule, in words, stated wherever review-agreement figures are shown."""
    return (
        "Grouped by the ISO week of the event time (its Monday, UTC); a group with fewer than "
        f"{min_items} compared items shows no rate or kappa (insufficient data)."
    )


@dataclass(frozen=True)
class Agreement:
    """Human-vs-model agreement on one judgement.

    ``n`` compared items, ``agreed`` of them with the same label; ``rate`` = agreed / n with
    its Wilson interval (``rate_low``, ``rate_high``); ``kappa`` with its interval; all
    None when ``insufficient_data`` (fewer than the minimum), and ``kappa`` also None when
    it is undefined (both raters used one and the same label: chance agreement is 1).
    ``labels`` orders the rows (model) and columns (reviewer) of ``confusion``. ``note``
    says in words why a figure is missing.
    """

    n: int
    agreed: int
    rate: float | None
    rate_low: float | None
    rate_high: float | None
    kappa: float | None
    kappa_low: float | None
    kappa_high: float | None
    labels: tuple[str, ...]
    confusion: tuple[tuple[int, ...], ...]
    insufficient_data: bool
    note: str = ""


def confusion_matrix(
    pairs: Sequence[tuple[str, str]],
) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """Labels (sorted) and counts ``[model label][reviewer label]`` of ``pairs``."""
    labels = tuple(sorted({label for pair in pairs for label in pair}))
    index = {label: i for i, label in enumerate(labels)}
    table = [[0] * len(labels) for _ in labels]
    for model, human in pairs:
        table[index[model]][index[human]] += 1
    return labels, tuple(tuple(row) for row in table)


def kappa_and_variance(table: Sequence[Sequence[int]]) -> tuple[float, float]:
    """Cohen's (1960) kappa of a square confusion ``table`` (k x k counts, k >= 2, both raters
    using at least two labels) and its large-sample variance: the same arithmetic, in the
    same order, as ``statsmodels.stats.inter_rater.cohens_kappa`` ("Simple": its ``kappa``
    and ``var_kappa``, Fleiss, Cohen & Everitt 1969), without building its results object
    (3 ms per call: ``review_agreement`` computes one per group, ~3,000 groups at 100 M
    rows). Undefined (NaN or inf, numpy warnings) when the expected agreement is 1: one
    label only, which callers exclude.
    """
    t = np.asarray(table, float)
    agree = np.diag(t).sum()
    nobs = t.sum()
    probs = t / nobs
    freq_row = t.sum(1) / nobs
    freq_col = t.sum(0) / nobs
    prob_exp = freq_col * freq_row[:, None]
    agree_exp = np.diag(prob_exp).sum()
    kappa = (agree / nobs - agree_exp) / (1 - agree_exp)
    term_a = (np.diag(probs) * (1 - (freq_row + freq_col) * (1 - kappa)) ** 2).sum()
    term_b = probs * (freq_col[:, None] + freq_row) ** 2
    d_idx = np.arange(t.shape[0])
    term_b[d_idx, d_idx] = 0  # the diagonal left out
    term_b = (1 - kappa) ** 2 * term_b.sum()
    term_c = (kappa - agree_exp * (1 - kappa)) ** 2
    variance = (term_a + term_b - term_c) / (1 - agree_exp) ** 2 / nobs
    return float(kappa), float(variance)


@lru_cache(maxsize=16)
def _z(confidence: float) -> float:
    """The two-sided normal quantile of ``confidence`` (scipy; 0.3 ms a call, so cached)."""
    from scipy.stats import norm  # imported here: a worker loads no scipy (issue 27)

    return float(norm.ppf(0.5 + confidence / 2))


def agreement(
    pairs: Sequence[tuple[str, str]],
    min_items: int = DEFAULT_MIN_ITEMS,
    confidence: float = 0.95,
) -> Agreement:
    """Agreement of ``pairs`` = ``[(model_label, reviewer_label), ...]``.

    Labels are any strings (e.g. ``"true"``/``"false"`` for the false-positive verdict, or
    category codes). Raises ``ValueError`` for ``min_items`` < 1 or ``confidence`` outside
    (0, 1).
    """
    if min_items < 1:
        raise ValueError("min_items must be at least 1")
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    labels, table = confusion_matrix(pairs)
    n = len(pairs)
    agreed = sum(table[i][i] for i in range(len(labels)))
    if n < min_items:
        return Agreement(
            n, agreed, None, None, None, None, None, None, labels, table, True,
            insufficient_note(n, min_items),
        )  # fmt: skip
    low, high = wilson_interval(agreed, n, confidence)
    if len(labels) < 2:
        return Agreement(
            n, agreed, agreed / n, low, high, None, None, None, labels, table, False,
            "kappa undefined: model and reviewers used a single label",
        )  # fmt: skip
    with np.errstate(invalid="ignore"):
        kappa, variance = kappa_and_variance(table)
    z = _z(confidence)
    # the variance rounds to just below 0 when agreement is perfect: its root is then 0
    se = max(variance, 0.0) ** 0.5
    return Agreement(
        n=n,
        agreed=agreed,
        rate=agreed / n,
        rate_low=low,
        rate_high=high,
        kappa=kappa,
        # kappa lies in [-1, 1]; the normal interval is clipped to it
        kappa_low=max(-1.0, kappa - z * se),
        kappa_high=min(1.0, kappa + z * se),
        labels=labels,
        confusion=table,
        insufficient_data=False,
    )
