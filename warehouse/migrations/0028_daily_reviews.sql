-- requires: keys-in-one-partition
-- The human-review reads from daily aggregates (issue 27, item 4; trendD, docs/warehouse.md
-- "Migration 0028"). review_agreement joined the current verdicts to every stored event
-- (refusal_events FINAL, whole) for each verdict's event week, and
-- verified_false_positive_rate and the review panels LEFT JOINed every current assessment
-- with the verdicts: 20-178 s at 100 M stored events. Two more daily aggregates under 0024's
-- dirty-day scheme (warehouse.daily's "agreements" and "reviews"), both with the week
-- (toMonday(event_time), as the former queries grouped; it is not the day's Monday for an
-- event time outside the Date range, which toDate wraps):
-- - daily_review_agreements: per event day of the judged event and the verdict's bundle,
--   model, product, engine, prompt version: the agreement counts of the current verdicts
--   (warehouse.review_counts.AGREEMENT_COUNTS);
-- - daily_review_counts: per event day, bundle, model, product of the current assessments:
--   assessments, estimated false positives, flagged, the review queue (flagged or sampled, and those with a verdict) and the reviewed counts
--   of both strata (warehouse.review_counts.REVIEW_COUNTS).
-- A verdict insert marks its event's day dirty (warehouse.review.insert_verdicts ->
-- warehouse.daily.mark_verdict_days; a manual INSERT INTO review_verdicts must call it: no
-- materialized view sees a verdict's event day); inserts of events and assessments mark
-- their days already (0024).
-- Backfill: only the new tables, for each day already recomputed, under that day's recorded
-- version (a clean day's events, assessments and verdicts are as they were when it was
-- recomputed, but for verdicts, which no aggregate counted before this migration: their
-- current state is counted); dirty days are computed live until the next refresh. No day is
-- marked dirty. Run with the writers stopped (a refresh by the previous release would record
-- a version without these tables' rows). Re-running skips the days that hold rows already.

CREATE TABLE IF NOT EXISTS {db}.daily_review_agreements
(
    day             Date,
    version         UInt64,
    week            Date,
    policy_bundle   LowCardinality(String),
    model           LowCardinality(String),
    product         LowCardinality(String),
    engine          LowCardinality(String),
    prompt_version  LowCardinality(String),
    compared        UInt64,
    fp_yes_yes      UInt64,
    fp_yes_no       UInt64,
    fp_no_yes       UInt64,
    fp_no_no        UInt64,
    category_agreed UInt64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (day, version, week, policy_bundle, model, product, engine, prompt_version);

CREATE TABLE IF NOT EXISTS {db}.daily_review_counts
(
    day                       Date,
    version                   UInt64,
    week                      Date,
    policy_bundle             LowCardinality(String),
    model                     LowCardinality(String),
    product                   LowCardinality(String),
    assessments               UInt64,
    estimated_false_positives UInt64,
    flagged                   UInt64,
    queued           UInt64,
    queued_reviewed  UInt64,
    flagged_reviewed UInt64,
    flagged_human_fp UInt64,
    sample_reviewed  UInt64,
    sample_human_fp  UInt64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (day, version, week, policy_bundle, model, product);

-- The agreements of the recomputed days: the verdicts' events only (primary-key lookups).
INSERT INTO {db}.daily_review_agreements
    (version, day, week, policy_bundle, model, product, engine, prompt_version, compared,
     fp_yes_yes, fp_yes_no, fp_no_yes, fp_no_no, category_agreed)
SELECT r.version, a.day, a.week, a.policy_bundle, a.model, a.product, a.engine, a.prompt_version,
       a.compared, a.fp_yes_yes, a.fp_yes_no, a.fp_no_yes, a.fp_no_no, a.category_agreed
FROM (
    SELECT toDate(event_time) AS day, toMonday(event_time) AS week, policy_bundle, model,
           product, engine, prompt_version,
           count() AS compared,
           countIf(model_false_positive AND human_fp) AS fp_yes_yes,
           countIf(model_false_positive AND NOT human_fp) AS fp_yes_no,
           countIf(NOT model_false_positive AND human_fp) AS fp_no_yes,
           countIf(NOT model_false_positive AND NOT human_fp) AS fp_no_no,
           countIf(human_category = model_category) AS category_agreed
    FROM (
        SELECT *, ifNull(corrected_false_positive, model_false_positive) AS human_fp,
               ifNull(corrected_category, model_category) AS human_category
        FROM {db}.current_verdicts
    ) AS v
    INNER JOIN (
        SELECT log_id, event_time FROM {db}.refusal_events FINAL
        PREWHERE log_id IN (SELECT log_id FROM {db}.review_verdicts)
    ) AS e USING (log_id)
    GROUP BY day, week, policy_bundle, model, product, engine, prompt_version
) AS a
INNER JOIN (SELECT day, max(version) AS version FROM {db}.daily_versions GROUP BY day) AS r
    ON r.day = a.day
WHERE a.day NOT IN (SELECT day FROM {db}.daily_review_agreements)
SETTINGS do_not_merge_across_partitions_select_final = 1;

-- The review counts of the recomputed days: every current assessment (the queue's size).
INSERT INTO {db}.daily_review_counts
    (version, day, week, policy_bundle, model, product, assessments,
     estimated_false_positives, flagged, queued, queued_reviewed, flagged_reviewed,
     flagged_human_fp, sample_reviewed, sample_human_fp)
SELECT r.version, c.day, c.week, c.policy_bundle, c.model, c.product, c.assessments,
       c.estimated_false_positives, c.flagged, c.queued, c.queued_reviewed,
       c.flagged_reviewed, c.flagged_human_fp, c.sample_reviewed, c.sample_human_fp
FROM (
    SELECT toDate(event_time) AS day, toMonday(event_time) AS week, policy_bundle, model,
           product, count() AS assessments,
           countIf(is_estimated_false_positive) AS estimated_false_positives,
           countIf(requires_human_review) AS flagged,
           countIf(requires_human_review OR sampled_for_review) AS queued,
           countIf((requires_human_review OR sampled_for_review) AND votes > 0)
               AS queued_reviewed,
           countIf(requires_human_review AND votes > 0) AS flagged_reviewed,
           countIf(requires_human_review AND votes > 0 AND human_fp) AS flagged_human_fp,
           countIf(NOT requires_human_review AND review_reason = 'random_sample' AND votes > 0)
               AS sample_reviewed,
           countIf(NOT requires_human_review AND review_reason = 'random_sample' AND votes > 0
                   AND human_fp) AS sample_human_fp
    FROM (
        SELECT a.*, r.votes AS votes,
               (2 * r.fp_votes > r.votes)
               OR (2 * r.fp_votes = r.votes AND a.is_estimated_false_positive) AS human_fp
        FROM {db}.current_assessments AS a
        LEFT JOIN (
            SELECT policy_bundle, log_id, assessment_audited_at, count() AS votes,
                   sum(ifNull(corrected_false_positive, model_false_positive)) AS fp_votes
            FROM {db}.current_verdicts
            GROUP BY policy_bundle, log_id, assessment_audited_at
        ) AS r
        ON r.policy_bundle = a.policy_bundle AND r.log_id = a.log_id
           AND r.assessment_audited_at = a.audited_at
    )
    GROUP BY day, week, policy_bundle, model, product
) AS c
INNER JOIN (SELECT day, max(version) AS version FROM {db}.daily_versions GROUP BY day) AS r
    ON r.day = c.day
WHERE c.day NOT IN (SELECT day FROM {db}.daily_review_counts)
SETTINGS do_not_merge_across_partitions_select_final = 1;
