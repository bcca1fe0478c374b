-- 0006's current_assessments, returning the same rows, without a cost that grows faster than
-- the store (issue 27; benchmarks/trend_queries.py). The IN's left side, (log_id,
-- policy_bundle), is the primary key of assessments, so ClickHouse by default first checks
-- every granule's key range against the whole set of current refusals (one entry per stored
-- refusal) to skip granules: with the keys spread over every granule nothing is skipped, and
-- that analysis took most of a named query's time at 1 M rows. use_index_for_in_with_subqueries
-- = 0 leaves the index out of it; the set still filters every row read, so the result is
-- the same. (do_not_merge_across_partitions_select_final is NOT set: it would keep two
-- versions of a key stored in two months, which FINAL otherwise collapses.)
-- A view holds no data: replacing it is instant on a populated warehouse and safe to re-run.
CREATE OR REPLACE VIEW {db}.current_assessments AS
SELECT *
FROM {db}.assessments FINAL
WHERE (log_id, policy_bundle) IN (
    SELECT log_id, policy_bundle FROM {db}.refusal_events FINAL WHERE is_refusal
)
SETTINGS use_index_for_in_with_subqueries = 0;
