"""The queries that migrations 0024's, 0025's and 0028's daily aggregates replaced, as they read
``current_assessments`` before (``warehouse.queries`` and ``warehouse.report_queries`` up to
issue 27 item 4): the reference ``tests/test_daily_aggregates.py`` compares the rewritten
queries with, and ``benchmarks/trend_queries.py --ab-daily`` times them against."""

from __future__ import annotations

from processors.gap_text import describe_gap_sql
from warehouse.named import DAY_MODEL_PRODUCT
from warehouse.review_counts import (
    AGREEMENT_COUNTS,
    VERIFIED_COUNTS,
    judged_verdicts,
    voted_assessments,
)

NAMED = {
    "false_positive_rate": f"""
SELECT toDate(event_time) AS day, model,
       count() AS audited,
       countIf(is_estimated_false_positive) AS estimated_false_positives
FROM {{db:Identifier}}.current_assessments
WHERE {DAY_MODEL_PRODUCT}
GROUP BY day, model
ORDER BY day, model
""",
    "category_mix": f"""
SELECT day, category, assessments,
       assessments / sum(assessments) OVER (PARTITION BY day) AS share
FROM (
    SELECT toDate(event_time) AS day, category, count() AS assessments
    FROM {{db:Identifier}}.current_assessments
    WHERE {DAY_MODEL_PRODUCT}
    GROUP BY day, category
)
ORDER BY day, assessments DESC, category
""",
    "top_clauses": f"""
SELECT policy_bundle, clause, citations,
       citations / sum(citations) OVER (PARTITION BY policy_bundle) AS share,
       estimated_false_positives
FROM (
    SELECT policy_bundle, assumeNotNull(policy_clause_cited) AS clause,
           count() AS citations,
           countIf(is_estimated_false_positive) AS estimated_false_positives
    FROM {{db:Identifier}}.current_assessments
    WHERE policy_clause_cited IS NOT NULL AND {DAY_MODEL_PRODUCT}
    GROUP BY policy_bundle, clause
)
ORDER BY citations DESC, policy_bundle, clause
""",
    "review_share": f"""
SELECT toDate(event_time) AS day,
       count() AS assessed,
       countIf(requires_human_review) AS flagged,
       countIf(sampled_for_review) AS sampled
FROM {{db:Identifier}}.current_assessments
WHERE {DAY_MODEL_PRODUCT}
GROUP BY day
ORDER BY day
""",
    "refusal_disagreements": f"""
SELECT toDate(event_time) AS day, model,
       countIf(classifier_is_refusal IS NOT NULL) AS classifier_verdicts,
       countIf(classifier_is_refusal IS NOT NULL AND detected_is_refusal IS NOT NULL)
           AS compared,
       countIf(refusal_disagreement != 'none') AS disagreements,
       countIf(refusal_disagreement = 'classifier_refusal_detector_not')
           AS classifier_refusal_detector_not,
       countIf(refusal_disagreement = 'detector_refusal_classifier_not')
           AS detector_refusal_classifier_not
FROM {{db:Identifier}}.refusal_events FINAL
WHERE {DAY_MODEL_PRODUCT}
GROUP BY day, model
HAVING classifier_verdicts > 0
ORDER BY day, model
""",
}

NAMED["prefilter"] = f"""
SELECT toDate(event_time) AS day,
       count() AS events,
       countIf(is_refusal) AS refusals,
       countIf(NOT is_refusal) AS non_refusals
FROM {{db:Identifier}}.refusal_events FINAL
WHERE {DAY_MODEL_PRODUCT}
GROUP BY day
ORDER BY day
"""

EVENTS = f"""
SELECT count() AS events, countIf(is_refusal) AS refusals, countIf(NOT is_refusal) AS non_refusals
FROM {{db:Identifier}}.refusal_events FINAL
WHERE {DAY_MODEL_PRODUCT}
"""

ASSESSED = f"""
SELECT count() AS audited,
       countIf(is_estimated_false_positive) AS estimated_false_positives,
       countIf(requires_human_review) AS flagged,
       countIf(sampled_for_review) AS sampled,
       uniqExact(batch_id) AS batches,
       uniqExact(model) AS models,
       uniqExact(product) AS products
FROM {{db:Identifier}}.current_assessments
WHERE {DAY_MODEL_PRODUCT}
"""

DAY_RANGE = """
SELECT min(toDate(event_time)), max(toDate(event_time)), count()
FROM {db:Identifier}.current_assessments
"""

BY_MODEL = f"""
SELECT model, count() AS audited, countIf(is_estimated_false_positive) AS estimated_false_positives
FROM {{db:Identifier}}.current_assessments
WHERE {DAY_MODEL_PRODUCT}
GROUP BY model
ORDER BY model
"""

# migration 0025's rewrites (trendA): the policy_gaps named query and the report's audit
# configurations, as they read current_assessments before
NAMED["policy_gaps"] = f"""
SELECT toDate(audited_at) AS day,
       sum(length(policy_gap_flags)) AS flags,
       countIf(length(policy_gap_flags) > 0) AS batches_with_flags,
       count() AS batches_audited,
       arraySlice(arraySort(arrayDistinct(groupArrayArray(arrayFlatten(
           arrayMap(f -> tupleElement(f, 'example_log_ids'), policy_gap_flags))))), 1, 20)
           AS example_log_ids,
       arraySlice(arraySort(arrayDistinct(groupArrayArray(
           arrayMap(f -> {describe_gap_sql("tupleElement(f, 'description')")},
                    policy_gap_flags)))), 1, 10)
           AS descriptions
FROM {{db:Identifier}}.audit_batches FINAL
WHERE toDate(audited_at) BETWEEN {{since:Date}} AND {{until:Date}}
  AND batch_id IN (
      SELECT batch_id FROM {{db:Identifier}}.current_assessments
      WHERE ({{model:String}} = '' OR model = {{model:String}})
        AND ({{product:String}} = '' OR product = {{product:String}})
  )
GROUP BY day
ORDER BY day
"""

CONFIGURATIONS = f"""
SELECT policy_bundle, bundle_version, engine, engine_model, prompt_version,
       count() AS assessments, min(audited_at) AS first_audit, max(audited_at) AS last_audit
FROM {{db:Identifier}}.current_assessments
WHERE {DAY_MODEL_PRODUCT}
GROUP BY policy_bundle, bundle_version, engine, engine_model, prompt_version
ORDER BY assessments DESC, policy_bundle, engine
"""

# The human-review queries as they read current_verdicts, refusal_events and
# current_assessments before migration 0028 (trendD; warehouse.review_queries).
NAMED["review_agreement"] = f"""
SELECT toMonday(event_time) AS week, model, policy_bundle, engine, prompt_version,
       {AGREEMENT_COUNTS}
FROM {judged_verdicts("{db:Identifier}.current_verdicts")} AS v
INNER JOIN (SELECT log_id, event_time FROM {{db:Identifier}}.refusal_events FINAL) AS e
    USING (log_id)
WHERE {DAY_MODEL_PRODUCT}
GROUP BY week, model, policy_bundle, engine, prompt_version
ORDER BY week, model, policy_bundle, engine, prompt_version
"""

NAMED["verified_false_positive_rate"] = f"""
SELECT toMonday(event_time) AS week, model, policy_bundle,
       {VERIFIED_COUNTS}
FROM {voted_assessments("{db:Identifier}.current_assessments", "{db:Identifier}.current_verdicts")}
WHERE {DAY_MODEL_PRODUCT}
GROUP BY week, model, policy_bundle
ORDER BY week, model, policy_bundle
"""
