"""Panels of the audit dashboard's last rows: human review, clarification and calibration
(ClickHouse SQL; current rows only: ``current_assessments``, ``current_verdicts`` and
``FINAL`` on every ReplacingMergeTree).

The review panels are the named queries ``review_agreement`` and
``verified_false_positive_rate`` (``warehouse.review_queries``) with weekly buckets
(``toMonday`` of the event day) and every statistic computed in SQL: agreement with its
Wilson (1927) interval, Cohen's (1960) kappa, and the stratified verified rate with its
normal interval (Cochran 1977 §5.3, Agresti-Coull adjusted proportions, as in
``processors.stats.stratified_proportion``). Since migration 0028 (trendD) they read the
daily aggregates ``agreements`` and ``reviews`` (``warehouse.daily``) like the
named queries: whole UTC days of the time range (their former SQL:
``tests/review_reference.py``)."""

from __future__ import annotations

from refusal_audit.dashboards.audit_panels import DAY_RESOLUTION
from refusal_audit.dashboards.model import TIME_SERIES, Json, ch_target, row
from refusal_audit.dashboards.model import panel as make_panel
from refusal_audit.dashboards.sql import (
    DAILY_SETTINGS,
    MIN_COMPARED,
    Z95,
    daily_source,
    kappa_2x2,
    scope,
    var_filter,
    wilson,
)

AGREEMENTS = ("compared", "fp_yes_yes", "fp_yes_no", "fp_no_yes", "fp_no_no", "category_agreed")
"""The agreement counts of the daily ``agreements`` aggregate (``warehouse.daily``)."""
REVIEWED = ("flagged_reviewed", "flagged_human_fp", "sample_reviewed", "sample_human_fp")
"""The reviewed counts per stratum of the daily ``reviews`` aggregate."""


def _sums(columns: tuple[str, ...]) -> str:
    """``sum(c) AS c`` for each of ``columns``, comma-separated."""
    return ", ".join(f"sum({c}) AS {c}" for c in columns)


QUEUE_SQL = f"""
SELECT sum(queued) AS in_queue,
       sum(queued_reviewed) AS reviewed,
       if(in_queue = 0, NULL, reviewed / in_queue) AS progress
FROM {daily_source("reviews")}
WHERE {scope()}
{DAILY_SETTINGS}
"""

_AGREE_LOW, _AGREE_HIGH = wilson("(fp_yes_yes + fp_no_no)", "compared")

AGREEMENT_SQL = f"""
SELECT time, compared,
       if(compared < {MIN_COMPARED}, NULL, (fp_yes_yes + fp_no_no) / compared) AS fp_agreement,
       if(compared < {MIN_COMPARED}, NULL, {_AGREE_LOW}) AS fp_low,
       if(compared < {MIN_COMPARED}, NULL, {_AGREE_HIGH}) AS fp_high,
       {kappa_2x2("fp_yes_yes", "fp_yes_no", "fp_no_yes", "fp_no_no")} AS fp_kappa,
       if(compared < {MIN_COMPARED}, NULL, category_agreed / compared) AS category_agreement
FROM (
  SELECT toDateTime(week, 'UTC') AS time,
         {_sums(AGREEMENTS)}
  FROM {daily_source("agreements")}
  WHERE {scope()}
  GROUP BY time
)
ORDER BY time
{DAILY_SETTINGS}
"""


def _stratum(population: str, positives: str, reviewed: str) -> tuple[str, str]:
    """(weighted estimate, variance term) of one stratum, weight = population / assessed."""
    weight = f"({population} / assessed)"
    share = f"if({reviewed} = 0, 0, {positives} / {reviewed})"
    q = f"(({positives} + 2) / ({reviewed} + 4))"
    variance = (
        f"if({population} = 0, 0, {weight} * {weight} * (1 - {reviewed} / {population})"
        f" * {q} * (1 - {q}) / ({reviewed} + 4))"
    )
    return f"{weight} * {share}", variance


_F_EST, _F_VAR = _stratum("flagged", "flagged_human_fp", "flagged_reviewed")
_U_EST, _U_VAR = _stratum("unflagged", "sample_human_fp", "sample_reviewed")
_ESTIMABLE = (
    f"(flagged_reviewed + sample_reviewed >= {MIN_COMPARED}"
    " AND (flagged = 0 OR flagged_reviewed > 0) AND (unflagged = 0 OR sample_reviewed > 0))"
)
_MODEL_LOW, _MODEL_HIGH = wilson("model_fp", "assessed")

VERIFIED_SQL = f"""
SELECT time,
       model_fp / assessed AS model_fp_rate,
       {_MODEL_LOW} AS model_low,
       {_MODEL_HIGH} AS model_high,
       if({_ESTIMABLE}, verified, NULL) AS verified_fp_rate,
       if({_ESTIMABLE}, greatest(0, verified - {Z95} * sqrt(variance)), NULL) AS verified_low,
       if({_ESTIMABLE}, least(1, verified + {Z95} * sqrt(variance)), NULL) AS verified_high
FROM (
  SELECT *, {_F_EST} + {_U_EST} AS verified, {_F_VAR} + {_U_VAR} AS variance
  FROM (
    SELECT toDateTime(week, 'UTC') AS time,
           sum(assessments) AS assessed, sum(estimated_false_positives) AS model_fp,
           sum(flagged) AS flagged, assessed - flagged AS unflagged,
           {_sums(REVIEWED)}
    FROM {daily_source("reviews")}
    WHERE {scope()}
    GROUP BY time
  )
)
ORDER BY time
{DAILY_SETTINGS}
"""

_CONVERSATIONS = f"""SELECT conversation_id,
         argMax(outcome, revision) AS outcome,
         argMax(route, revision) AS route,
         max(escalated) AS escalated,
         argMax(escalation_reason, revision) AS escalation_reason,
         min(created_at) AS created_at
  FROM clarification_steps FINAL
  WHERE {scope()}
  GROUP BY conversation_id"""
"""Each conversation's latest state (its highest revision) in the selected scope."""

CLARIFICATION_OUTCOMES_SQL = f"""
SELECT route, outcome, escalation_reason, count() AS conversations,
       countIf(escalated) AS escalated
FROM (
  {_CONVERSATIONS}
)
WHERE $__timeFilter(created_at)
GROUP BY route, outcome, escalation_reason
ORDER BY conversations DESC, route, outcome, escalation_reason
"""

CLARIFICATION_STEPS_SQL = f"""
SELECT $__timeInterval(step_at) AS time, step, count() AS steps
FROM clarification_steps FINAL
WHERE $__timeFilter(step_at)
  AND {scope()}
GROUP BY time, step
ORDER BY time, step
"""

CLARIFICATION_VERDICTS_SQL = f"""
SELECT decision, count() AS verdicts, countIf(questions_ok) AS questions_neutral,
       countIf(questions_ok) / count() AS questions_neutral_share
FROM clarification_verdicts FINAL
WHERE $__timeFilter(submitted_at)
  AND conversation_id IN (
    SELECT conversation_id FROM clarification_steps FINAL
    WHERE {scope()}
  )
GROUP BY decision
ORDER BY verdicts DESC, decision
"""

CALIBRATION_RUNS_SQL = f"""
SELECT status, count() AS runs, sum(input_tokens + output_tokens) AS tokens
FROM calibration_runs FINAL
WHERE $__timeFilter(created_at)
  AND {var_filter("policy_bundle", "bundle")}
GROUP BY status
ORDER BY runs DESC, status
"""

CALIBRATION_VARIANTS_SQL = f"""
SELECT v.clause_id AS clause_id, v.base_style AS base_style,
       count() AS variants,
       countIf(v.passed) AS passed_regression,
       countIf(d.decision = '') AS undecided,
       countIf(d.decision != '') AS decided
FROM calibration_variants AS v FINAL
LEFT JOIN (
  SELECT calibration_run_id, style, argMax(decision, decided_at) AS decision
  FROM calibration_decisions FINAL
  GROUP BY calibration_run_id, style
) AS d
ON d.calibration_run_id = v.calibration_run_id AND d.style = v.style
WHERE $__timeFilter(v.created_at)
  AND {var_filter("v.policy_bundle", "bundle")}
GROUP BY clause_id, base_style
ORDER BY clause_id, base_style
"""

_EXPERIMENTS = (
    "experiment_id IN (SELECT experiment_id FROM calibration_experiments FINAL "
    "WHERE policy_bundle IN (${bundle:singlequote}))"
)

AB_SQL = f"""
SELECT experiment_id, arm_id,
       uniqExact(unit_id) AS users,
       sum(exposures) AS exposures,
       uniqExactIf(unit_id, re_requests > 0) AS users_re_requesting,
       uniqExactIf(unit_id, fulfilled > 0) AS users_with_fulfilled_re_request,
       uniqExactIf(unit_id, escalations > 0) AS users_escalated
FROM (
  SELECT x.experiment_id AS experiment_id, x.arm_id AS arm_id, x.unit_id AS unit_id,
         count() AS exposures, sum(f.re_requests) AS re_requests,
         sum(f.fulfilled) AS fulfilled, sum(f.escalations) AS escalations
  FROM (
    SELECT experiment_id, event_id, arm_id, unit_id
    FROM ab_event_log FINAL
    WHERE type = 'exposure'
      AND $__timeFilter(occurred_at)
      AND $__conditionalAll({_EXPERIMENTS}, $bundle)
      AND (experiment_id, unit_id) IN (
        SELECT experiment_id, unit_id FROM ab_event_log FINAL
        WHERE type = 'exposure' AND $__timeFilter(occurred_at)
        GROUP BY experiment_id, unit_id
        HAVING uniqExact(arm_id) = 1
      )
  ) AS x
  LEFT JOIN (
    SELECT experiment_id, exposure_id,
           countIf(type = 're_request') AS re_requests,
           countIf(type = 're_request' AND fulfilled) AS fulfilled,
           countIf(type = 'escalation') AS escalations
    FROM ab_event_log FINAL
    WHERE type != 'exposure'
    GROUP BY experiment_id, exposure_id
  ) AS f
  ON f.experiment_id = x.experiment_id AND f.exposure_id = x.event_id
  GROUP BY experiment_id, arm_id, unit_id
)
GROUP BY experiment_id, arm_id
ORDER BY experiment_id, arm_id
"""


def panels() -> list[Json]:
    """Rows "Human review", "Clarification" and "Calibration"."""
    return [
        row("Human review"),
        make_panel(
            "stat",
            "Review queue progress",
            [ch_target(QUEUE_SQL)],
            interval="1d",
            width=8,
            description="Flagged or sampled current assessments, and how many have "
            "a reviewer's verdict on that assessment." + DAY_RESOLUTION,
        ),
        make_panel(
            "timeseries",
            "Agreement and Cohen's kappa per week",
            [ch_target(AGREEMENT_SQL, TIME_SERIES)],
            interval="1d",
            width=16,
            description=f"Empty below {MIN_COMPARED} compared items per week." + DAY_RESOLUTION,
        ),
        make_panel(
            "timeseries",
            "Verified vs estimated false-positive rate per week",
            [ch_target(VERIFIED_SQL, TIME_SERIES)],
            unit="percentunit",
            interval="1d",
            width=24,
            description="The model's estimate (Wilson 95%) and the reviewers' "
            "stratified verified rate (95%)." + DAY_RESOLUTION,
        ),
        row("Clarification"),
        make_panel(
            "table",
            "Clarification outcomes",
            [ch_target(CLARIFICATION_OUTCOMES_SQL)],
            width=12,
            description="Each conversation's latest state.",
        ),
        make_panel(
            "timeseries",
            "Clarification steps",
            [ch_target(CLARIFICATION_STEPS_SQL, TIME_SERIES)],
            stacked=True,
            interval="1h",
            width=12,
        ),
        make_panel(
            "table",
            "Clarification review verdicts",
            [ch_target(CLARIFICATION_VERDICTS_SQL)],
            width=24,
        ),
        row("Calibration"),
        make_panel(
            "table", "Calibration runs by status", [ch_target(CALIBRATION_RUNS_SQL)], width=8
        ),
        make_panel(
            "table",
            "Variants: regression suite and approvals",
            [ch_target(CALIBRATION_VARIANTS_SQL)],
            width=16,
        ),
        make_panel(
            "table",
            "A/B experiments by arm",
            [ch_target(AB_SQL)],
            width=24,
            description="Per user, as `ab report` counts them (users are the randomisation "
            "unit; a user seen in several arms is left out): users exposed, their "
            "exposures, users with a re-request, with a fulfilled re-request, escalated.",
        ),
    ]
