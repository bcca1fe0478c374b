-- The assessments that count: the newest per (policy_bundle, log_id), and only for an event
-- that is currently a refusal under that bundle. A re-delivered event that the pre-filter
-- now judges a non-refusal, or that names another policy bundle, retires its earlier
-- assessment here instead of leaving it in the trend queries. Every named query and every
-- "exactly one current assessment" check reads this view.
CREATE VIEW IF NOT EXISTS {db}.current_assessments AS
SELECT *
FROM {db}.assessments FINAL
WHERE (log_id, policy_bundle) IN (
    SELECT log_id, policy_bundle FROM {db}.refusal_events FINAL WHERE is_refusal
);
