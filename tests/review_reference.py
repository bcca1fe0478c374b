"""The review panels of the audit dashboard as they read ``current_verdicts``,
``refusal_events`` and ``current_assessments`` before migration 0028 (trendD; sub-day time
filter): the reference ``tests/test_grafana_daily.py`` and ``tests/test_review_daily.py``
compare the rewritten panels with, over day-aligned time ranges."""

from __future__ import annotations

from refusal_audit.dashboards.review_panels import (  # the statistics around the counts
    _AGREE_HIGH,
    _AGREE_LOW,
    _ESTIMABLE,
    _F_EST,
    _F_VAR,
    _MODEL_HIGH,
    _MODEL_LOW,
    _U_EST,
    _U_VAR,
)
from refusal_audit.dashboards.sql import MIN_COMPARED, Z95, kappa_2x2, scope
from warehouse.review_counts import (
    AGREEMENT_COUNTS,
    VERIFIED_COUNTS,
    judged_verdicts,
    voted_assessments,
)

_A_SCOPE = scope("a.model", "a.product", "a.policy_bundle")


def _nested(sql: str) -> str:
    """``sql`` with its continuation lines indented four more spaces."""
    return sql.replace("\n", "\n    ")


_QUEUE = f"""
SELECT countIf(queued) AS in_queue,
       countIf(queued AND votes > 0) AS reviewed,
       if(in_queue = 0, NULL, reviewed / in_queue) AS progress
FROM (
  SELECT a.requires_human_review OR a.sampled_for_review AS queued, r.votes AS votes
  FROM current_assessments AS a
  LEFT JOIN (
    SELECT policy_bundle, log_id, assessment_audited_at, count() AS votes
    FROM current_verdicts
    GROUP BY policy_bundle, log_id, assessment_audited_at
  ) AS r
  ON r.policy_bundle = a.policy_bundle AND r.log_id = a.log_id
     AND r.assessment_audited_at = a.audited_at
  WHERE $__timeFilter(a.event_time)
    AND {_A_SCOPE}
)
"""

_AGREEMENT = f"""
SELECT time, compared,
       if(compared < {MIN_COMPARED}, NULL, (fp_yes_yes + fp_no_no) / compared) AS fp_agreement,
       if(compared < {MIN_COMPARED}, NULL, {_AGREE_LOW}) AS fp_low,
       if(compared < {MIN_COMPARED}, NULL, {_AGREE_HIGH}) AS fp_high,
       {kappa_2x2("fp_yes_yes", "fp_yes_no", "fp_no_yes", "fp_no_no")} AS fp_kappa,
       if(compared < {MIN_COMPARED}, NULL, category_agreed / compared) AS category_agreement
FROM (
  SELECT toDateTime(toMonday(event_time), 'UTC') AS time,
         {AGREEMENT_COUNTS}
  FROM {judged_verdicts("current_verdicts")} AS v
  INNER JOIN (SELECT log_id, event_time FROM refusal_events FINAL) AS e USING (log_id)
  WHERE $__timeFilter(event_time)
    AND {scope()}
  GROUP BY time
)
ORDER BY time
"""


_VERIFIED = f"""
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
    SELECT toDateTime(toMonday(event_time), 'UTC') AS time,
           {_nested(VERIFIED_COUNTS)}
    FROM {_nested(voted_assessments("current_assessments", "current_verdicts"))}
    WHERE $__timeFilter(event_time)
      AND {scope()}
    GROUP BY time
  )
)
ORDER BY time
"""

PANELS = {
    "Review queue progress": _QUEUE,
    "Agreement and Cohen's kappa per week": _AGREEMENT,
    "Verified vs estimated false-positive rate per week": _VERIFIED,
}
