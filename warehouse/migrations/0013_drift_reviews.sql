-- Reviewed assessments placed in the drift detectors' windows (parameterized view, read as
-- drift_reviews(window_seconds=3600, grace_seconds=300)), for the classification_drift
-- detector: every row of drift_assessments (same windows, same lateness) whose current
-- assessment has reviewers' verdicts, with disagreed = most of its reviewers disagree with
-- the model. Verdicts on an older assessment of the same event (before a re-audit) do not
-- count: they judged something else.
CREATE VIEW IF NOT EXISTS {db}.drift_reviews AS
SELECT d.window_start AS window_start,
       d.late AS late,
       d.log_id AS log_id,
       d.policy_bundle AS policy_bundle,
       d.model AS model,
       d.product AS product,
       d.category AS category,
       r.disagreed AS disagreed
FROM {db}.drift_assessments(window_seconds={window_seconds:UInt32}, grace_seconds={grace_seconds:UInt32}) AS d
INNER JOIN (
    SELECT v.policy_bundle AS policy_bundle,
           v.log_id AS log_id,
           avg(v.verdict = 'disagree') > 0.5 AS disagreed
    FROM {db}.current_verdicts AS v
    INNER JOIN (SELECT policy_bundle, log_id, audited_at FROM {db}.current_assessments) AS a
        ON v.policy_bundle = a.policy_bundle AND v.log_id = a.log_id
       AND v.assessment_audited_at = a.audited_at
    GROUP BY v.policy_bundle, v.log_id
) AS r ON d.policy_bundle = r.policy_bundle AND d.log_id = r.log_id;
