"""Human-vs-model agreement figures, checked against independent computations."""

from __future__ import annotations

import math
import random

import pytest
from sklearn.metrics import cohen_kappa_score

from processors.agreement import agreement, confusion_matrix, kappa_and_variance

Z95 = 1.959963984540054


def kappa_by_hand(pairs: list[tuple[str, str]]) -> tuple[float, float]:
    """Cohen's kappa and its large-sample standard error (Fleiss, Cohen & Everitt 1969),
    written out from the formulas."""
    labels = sorted({x for p in pairs for x in p})
    n = len(pairs)
    p = {(a, b): sum(1 for m, h in pairs if (m, h) == (a, b)) / n for a in labels for b in labels}
    row = {a: sum(p[(a, b)] for b in labels) for a in labels}
    col = {b: sum(p[(a, b)] for a in labels) for b in labels}
    po = sum(p[(a, a)] for a in labels)
    pe = sum(row[a] * col[a] for a in labels)
    kappa = (po - pe) / (1 - pe)
    term1 = sum(p[(a, a)] * (1 - (row[a] + col[a]) * (1 - kappa)) ** 2 for a in labels)
    term2 = (1 - kappa) ** 2 * sum(
        p[(a, b)] * (col[a] + row[b]) ** 2 for a in labels for b in labels if a != b
    )
    term3 = (kappa - pe * (1 - kappa)) ** 2
    se = math.sqrt((term1 + term2 - term3) / ((1 - pe) ** 2 * n))
    return kappa, se


def sample(n: int, agree: float, labels: tuple[str, ...], seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        model = rng.choice(labels)
        human = model if rng.random() < agree else rng.choice(labels)
        out.append((model, human))
    return out


@pytest.mark.parametrize(
    ("n", "agree", "labels"),
    [(40, 0.8, ("false", "true")), (500, 0.6, ("a", "b", "c", "d")), (120, 0.95, ("x", "y"))],
)
def test_rate_and_kappa_match_independent_computations(
    n: int, agree: float, labels: tuple[str, ...]
) -> None:
    pairs = sample(n, agree, labels, seed=n)
    result = agreement(pairs)
    agreed = sum(m == h for m, h in pairs)
    assert (result.n, result.agreed, result.rate) == (n, agreed, agreed / n)
    # Wilson interval, closed form
    phat, z2 = agreed / n, Z95**2
    centre = (phat + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(phat * (1 - phat) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    assert result.rate_low == pytest.approx(centre - half, abs=1e-9)
    assert result.rate_high == pytest.approx(centre + half, abs=1e-9)
    # kappa: scikit-learn's implementation and the formulas
    ms, hs = zip(*pairs, strict=True)
    assert result.kappa == pytest.approx(cohen_kappa_score(ms, hs), abs=1e-12)
    kappa, se = kappa_by_hand(pairs)
    assert result.kappa == pytest.approx(kappa, abs=1e-12)
    assert result.kappa_low == pytest.approx(max(-1.0, kappa - Z95 * se), abs=1e-9)
    assert result.kappa_high == pytest.approx(min(1.0, kappa + Z95 * se), abs=1e-9)


def test_the_confusion_matrix_has_model_rows_and_reviewer_columns() -> None:
    pairs = [("a", "a"), ("a", "b"), ("a", "b"), ("b", "a"), ("c", "c")]
    labels, table = confusion_matrix(pairs)
    assert labels == ("a", "b", "c")
    assert table == ((1, 2, 0), (1, 0, 0), (0, 0, 1))


def test_too_few_items_report_no_figures() -> None:
    result = agreement([("true", "true")] * 29)
    assert result.insufficient_data and result.rate is None and result.kappa is None
    assert "29 compared item(s), at least 30" in result.note
    assert agreement([("true", "true")] * 29, min_items=10).rate == 1.0


def test_kappa_is_undefined_when_everyone_used_one_label() -> None:
    result = agreement([("false", "false")] * 50)
    assert result.rate == 1.0 and result.kappa is None and "single label" in result.note


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        agreement([], min_items=0)
    with pytest.raises(ValueError):
        agreement([], confidence=1.0)


def test_perfect_agreement_has_kappa_one_and_a_zero_width_interval() -> None:
    pairs = [(x, x) for x in ("a", "b", "c") * 20]
    result = agreement(pairs)
    assert result.kappa == pytest.approx(1.0)
    assert result.kappa_low == pytest.approx(1.0) and result.kappa_high == pytest.approx(1.0)


def test_the_kappa_interval_stays_within_minus_one_and_one() -> None:
    # few items in perfect disagreement: the normal interval would pass -1
    pairs = [("yes", "no"), ("no", "yes")] * 2 + [("yes", "yes"), ("no", "no")]
    result = agreement(pairs, min_items=1)
    assert result.kappa is not None and result.kappa_low is not None
    assert result.kappa_high is not None
    kappa, se = kappa_by_hand(pairs)
    assert kappa - Z95 * se < -1.0  # the unclipped bound
    assert -1.0 <= result.kappa_low <= result.kappa <= result.kappa_high <= 1.0
    assert result.kappa_low == -1.0


def test_kappa_and_variance_are_statsmodels_cohens_kappa_exactly() -> None:
    from statsmodels.stats.inter_rater import cohens_kappa

    rng = random.Random(7)
    tables = [[[60, 10], [5, 25]], [[0, 3], [4, 0]], [[30, 0], [0, 30]], [[1, 2], [3, 4]]]
    tables += [[[rng.randrange(0, 50) + 1 for _ in range(k)] for _ in range(k)]
               for k in (2, 2, 2, 3, 4, 5) for _ in range(20)]  # fmt: skip
    for table in tables:
        expected = cohens_kappa(table)
        assert kappa_and_variance(table) == (float(expected.kappa), float(expected.var_kappa))
