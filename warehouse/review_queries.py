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
"""

from __future__ import annotations

from typing import Any

from processors.agreement import DEFAULT_MIN_ITEMS, agreement, insufficient_note
from processors.stats import stratified_proportion, wilson_interval
from warehouse.named import DAY_MODEL_PRODUCT, MODEL_PRODUCT, NamedQuery, QueryResult

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


AGREEMENT_COUNTS = """count() AS compared,
       countIf(model_false_positive AND human_fp) AS fp_yes_yes,
       countIf(model_false_positive AND NOT human_fp) AS fp_yes_no,
       countIf(NOT model_false_positive AND human_fp) AS fp_no_yes,
       countIf(NOT model_false_positive AND NOT human_fp) AS fp_no_no,
       countIf(human_category = model_category) AS category_agreed"""
"""The SELECT columns of a review-agreement group over ``judged_verdicts`` rows: items
compared, the 2x2 table of the false-positive judgement (first: the model's, second: the
reviewer's) and exact category agreements (also used by the Grafana review panel)."""


def judged_verdicts(verdicts: str) -> str:
    """A subquery of the verdicts table ``verdicts`` (an SQL table expression) with the
    reviewer's judgement: ``human_fp`` and ``human_category`` are the correction where one
    was given, else the model's own (an Agree verdict)."""
    return f"""(
    SELECT *, ifNull(corrected_false_positive, model_false_positive) AS human_fp,
           ifNull(corrected_category, model_category) AS human_category
    FROM {verdicts}
)"""


VERIFIED_COUNTS = """count() AS assessed,
       countIf(is_estimated_false_positive) AS model_fp,
       countIf(requires_human_review) AS flagged,
       countIf(requires_human_review AND votes > 0) AS flagged_reviewed,
       countIf(requires_human_review AND votes > 0 AND human_fp) AS flagged_human_fp,
       countIf(NOT requires_human_review) AS unflagged,
       countIf(NOT requires_human_review AND review_reason = 'random_sample' AND votes > 0)
           AS sample_reviewed,
       countIf(NOT requires_human_review AND review_reason = 'random_sample' AND votes > 0
               AND human_fp) AS sample_human_fp"""
"""The SELECT columns of a verified-false-positive group over ``voted_assessments`` rows:
assessments, the model's false positives, and per stratum (flagged; unflagged and its
reviewed random sample) its size, reviewed items and the reviewers' false positives. The
random stratum is ``review_reason = 'random_sample'`` only, never ``'uncertainty'``. Also
used by the Grafana review panel, whose SQL holds no ``--`` comment (the ClickHouse plugin
strips comments before expanding its macros)."""


def voted_assessments(assessments: str, verdicts: str) -> str:
    """A subquery of the current assessments ``assessments`` (an SQL table expression) with
    the reviewers' current verdicts ``verdicts`` on each: ``votes`` (0 without a verdict)
    and ``human_fp``, the majority's false-positive judgement (a tie keeps the model's)."""
    return f"""(
    SELECT a.*, r.votes AS votes,
           (2 * r.fp_votes > r.votes)
           OR (2 * r.fp_votes = r.votes AND a.is_estimated_false_positive) AS human_fp
    FROM {assessments} AS a
    LEFT JOIN (
        SELECT policy_bundle, log_id, assessment_audited_at, count() AS votes,
               sum(ifNull(corrected_false_positive, model_false_positive)) AS fp_votes
        FROM {verdicts}
        GROUP BY policy_bundle, log_id, assessment_audited_at
    ) AS r
    ON r.policy_bundle = a.policy_bundle AND r.log_id = a.log_id
       AND r.assessment_audited_at = a.audited_at
)"""


REVIEW_QUERIES = (
    NamedQuery(
        name="review_agreement",
        description="Per event week, model, bundle, engine and prompt version: reviewers' "
        "agreement with the model on the false-positive judgement (Wilson 95%) and Cohen's "
        "kappa (95%), and on the exact category code (Wilson 95%); one row per verdict "
        "(every verdict, whatever the review reason: no random stratum here).",
        sql=f"""
SELECT toMonday(event_time) AS week, model, policy_bundle, engine, prompt_version,
       {AGREEMENT_COUNTS}
FROM {judged_verdicts("{db:Identifier}.current_verdicts")} AS v
INNER JOIN (SELECT log_id, event_time FROM {{db:Identifier}}.refusal_events FINAL) AS e
    USING (log_id)
WHERE {DAY_MODEL_PRODUCT}
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
SELECT toMonday(event_time) AS week, model, policy_bundle,
       {VERIFIED_COUNTS}
FROM {voted_assessments("{db:Identifier}.current_assessments", "{db:Identifier}.current_verdicts")}
WHERE {DAY_MODEL_PRODUCT}
GROUP BY week, model, policy_bundle
ORDER BY week, model, policy_bundle
""",
        columns=_RATE_COLUMNS,
        filters=MODEL_PRODUCT,
        postprocess=_rate_rows,
    ),
)
