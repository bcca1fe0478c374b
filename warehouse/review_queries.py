"""Named trend queries of the human review (``refusal-audit query review_agreement`` and
``query verified_false_positive_rate``; registered in ``warehouse.queries.NAMED_QUERIES``).

Both take the usual filters: ``since``/``until`` on the event day, ``model`` and ``product``.
Weeks are ISO weeks of the event time (their Monday, ``processors.agreement.event_week``).
Below ``MIN_COMPARED`` compared items a group's rates are left empty with the note
``processors.agreement.insufficient_note``, as ``review stats`` does.

``verified_false_positive_rate`` is a stratified estimate over two strata: the flagged
assessments (``requires_human_review``) and the unflagged ones. The unflagged stratum is
estimated from its reviewed **random sample** alone: the assessments whose ``review_reason``
is ``random_sample`` (``processors.sampling``, a hash draw that never looks at the score).
Assessments sampled for ``uncertainty`` (unflagged, not drawn, scored near the engine's
threshold: ``review_uncertainty_band``) are chosen by their score, so their verdicts never
enter the estimate: they still count in the unflagged stratum's size (its weight), never in
its reviewed sample. ``review_agreement`` has no strata: it compares every current verdict,
uncertainty-sampled items included, with the assessment it judged.

Both read daily aggregates (migration 0028, ``warehouse.daily``: ``agreements``,
``reviews``), summed per week: a verdict's week is its event's (the former SQL, kept in
``tests/daily_reference.py``, joined every stored event for it), an assessment's its own.
"""

from __future__ import annotations

from typing import Any

from processors.agreement import DEFAULT_MIN_ITEMS, agreement, insufficient_note
from processors.stats import stratified_proportion, wilson_interval
from warehouse.daily import marker
from warehouse.named import MODEL_PRODUCT, MODEL_PRODUCT_ONLY, NamedQuery, QueryResult
from warehouse.review_counts import (
    AGREEMENT_COUNTS,
    VERIFIED_COUNTS,
    judged_verdicts,
    voted_assessments,
)

__all__ = [
    "AGREEMENT_COUNTS",
    "MIN_COMPARED",
    "REVIEW_QUERIES",
    "VERIFIED_COUNTS",
    "judged_verdicts",
    "voted_assessments",
]

MIN_COMPARED = DEFAULT_MIN_ITEMS
_KEY = ("week", "model", "policy_bundle", "engine", "prompt_version")
_AGREEMENT_COLUMNS = (
    *_KEY, "compared", "fp_agreement", "fp_low", "fp_high", "fp_kappa", "fp_kappa_low",
    "fp_kappa_high", "category_agreement", "category_low", "category_high", "note",
)  # fmt: skip


def _insufficient(n: int) -> str:
    return insufficient_note(n, MIN_COMPARED)


def _agreement_rows(result: QueryResult) -> QueryResult:
    rows: list[tuple[Any, ...]] = []
    for r in result.as_dicts():
        n = int(r["compared"])
        key = tuple(r[c] for c in _KEY)
        if n < MIN_COMPARED:
            rows.append((*key, n, *([None] * 9), _insufficient(n)))
            continue
        pairs = (
            [("true", "true")] * int(r["fp_yes_yes"]) + [("true", "false")] * int(r["fp_yes_no"])
            + [("false", "true")] * int(r["fp_no_yes"]) + [("false", "false")] * int(r["fp_no_no"])
        )  # fmt: skip
        fp = agreement(pairs, MIN_COMPARED)
        cat_low, cat_high = wilson_interval(int(r["category_agreed"]), n)
        fp_cells = (fp.rate, fp.rate_low, fp.rate_high, fp.kappa, fp.kappa_low, fp.kappa_high)
        category = (int(r["category_agreed"]) / n, cat_low, cat_high)
        rows.append((*key, n, *fp_cells, *category, fp.note))
    return QueryResult(list(_AGREEMENT_COLUMNS), rows)


_RATE_COLUMNS = (
    "week", "model", "policy_bundle", "assessed", "model_fp_rate", "model_low", "model_high",
    "flagged", "flagged_reviewed", "unflagged", "sample_reviewed", "verified_fp_rate",
    "verified_low", "verified_high", "note",
)  # fmt: skip


def _rate_rows(result: QueryResult) -> QueryResult:
    rows: list[tuple[Any, ...]] = []
    for r in result.as_dicts():
        assessed, model_fp = int(r["assessed"]), int(r["model_fp"])
        low, high = wilson_interval(model_fp, assessed)
        flagged, unflagged = int(r["flagged"]), int(r["unflagged"])
        reviewed = (int(r["flagged_reviewed"]), int(r["sample_reviewed"]))
        head = (r["week"], r["model"], r["policy_bundle"], assessed,
                model_fp / assessed if assessed else None, low, high,
                flagged, reviewed[0], unflagged, reviewed[1])  # fmt: skip
        verified = None
        note = ""
        if sum(reviewed) < MIN_COMPARED:
            note = _insufficient(sum(reviewed))
        else:
            verified = stratified_proportion([
                (flagged, int(r["flagged_human_fp"]), reviewed[0]),
                (unflagged, int(r["sample_human_fp"]), reviewed[1]),
            ])  # fmt: skip
            if verified is None:
                note = "a stratum has no reviewed items (flagged, or the random sample)"
        rows.append((*head, *(verified or (None, None, None)), note))
    return QueryResult(list(_RATE_COLUMNS), rows)


# The per-day sources of both queries (migration 0028, docs/warehouse.md): the agreement
# counts per verdict group and event day, and per assessment group and event day the
# current assessments' counts beside their reviewed counts (``reviews``).
_AGREEMENT_SUMS = ", ".join(
    f"sum({c}) AS {c}"
    for c in ("compared", "fp_yes_yes", "fp_yes_no", "fp_no_yes", "fp_no_no", "category_agreed")
)
_REVIEWED = ("flagged_reviewed", "flagged_human_fp", "sample_reviewed", "sample_human_fp")

REVIEW_QUERIES = (
    NamedQuery(
        name="review_agreement",
        description="Per event week, model, bundle, engine and prompt version: reviewers' "
        "agreement with the model on the false-positive judgement (Wilson 95%) and Cohen's "
        "kappa (95%), and on the exact category code (Wilson 95%); one row per verdict "
        "(every verdict, whatever the review reason: no random stratum here).",
        sql=f"""
SELECT week, model, policy_bundle, engine, prompt_version, {_AGREEMENT_SUMS}
FROM {marker("agreements")}
WHERE {MODEL_PRODUCT_ONLY}
GROUP BY week, model, policy_bundle, engine, prompt_version
ORDER BY week, model, policy_bundle, engine, prompt_version
""",
        columns=_AGREEMENT_COLUMNS,
        filters=MODEL_PRODUCT,
        postprocess=_agreement_rows,
    ),
    NamedQuery(
        name="verified_false_positive_rate",
        description="Per event week, model and bundle: the model's estimated false-positive "
        "rate and the reviewers' verified one (stratified: reviewed flagged items and the "
        "reviewed random sample of the unflagged, each weighted by its share), 95% intervals. "
        "Uncertainty-sampled items count in the unflagged share, never in the random sample.",
        sql=f"""
SELECT week, model, policy_bundle,
       sum(assessments) AS assessed, sum(estimated_false_positives) AS model_fp,
       sum(flagged) AS flagged, {", ".join(f"sum({c}) AS {c}" for c in _REVIEWED[:2])},
       assessed - flagged AS unflagged,
       {", ".join(f"sum({c}) AS {c}" for c in _REVIEWED[2:])}
FROM {marker("reviews")}
WHERE {MODEL_PRODUCT_ONLY}
GROUP BY week, model, policy_bundle
ORDER BY week, model, policy_bundle
""",
        columns=_RATE_COLUMNS,
        filters=MODEL_PRODUCT,
        postprocess=_rate_rows,
    ),
)
