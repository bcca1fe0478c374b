-- The policy-gap reads bounded by the sightings, not by the store (issue 27, item 4; trendC,
-- docs/warehouse.md "Migration 0027"). Sightings are a few example log ids per flagged batch
-- (policy_gap_sightings: 97 rows at 1 M stored events on the generated store), yet
-- policy_gap_dated read every stored event (refusal_events FINAL, whole) to date them, and
-- the report's and the dashboard's "has a current assessment of the selected models and
-- products" read all of current_assessments. Both now look up the sightings' own log ids
-- through the tables' primary keys (refusal_events ORDER BY log_id, assessments ORDER BY
-- (policy_bundle, log_id)) and a PREWHERE on log_id, which ClickHouse applies *before* FINAL
-- merges the versions: it depends on a sort-key column only, so it keeps or drops every
-- version of a key together, and FINAL returns exactly the rows it returned before for those
-- log ids (the join / IN only ever asked for those). As a WHERE, the filter ran after FINAL
-- had merged every granule the key analysis kept (about all of them: 1,029 sightings hit
-- 1,387 of 1,390 granules at 10 M rows): 2.0 s instead of 0.3 s at 10 M. Views only: nothing is stored, so it is instant and re-runnable on a
-- populated warehouse, and the writers' inserts do not change.

-- As 0019's view, with the event side restricted to the sightings' log ids (primary-key
-- lookups: use_index_for_in_with_subqueries, on by default, is set so that a caller running
-- with 0022's setting off still gets them).
CREATE OR REPLACE VIEW {db}.policy_gap_dated AS
SELECT s.policy_bundle AS policy_bundle,
       s.gap_id AS gap_id,
       s.log_id AS log_id,
       s.batch_id AS batch_id,
       s.description AS description,
       s.gap_description AS gap_description,
       s.seen_at AS seen_at,
       if(e.event_log_id = '', s.seen_at, e.event_time) AS event_time
FROM {db}.policy_gap_sightings AS s FINAL
LEFT JOIN (
    SELECT log_id AS event_log_id, event_time FROM {db}.refusal_events FINAL
    PREWHERE log_id IN (SELECT log_id FROM {db}.policy_gap_sightings)
) AS e ON s.log_id = e.event_log_id
SETTINGS use_index_for_in_with_subqueries = 1;

-- current_assessments (0022 + 0023) restricted to the log ids of the gap sightings: the
-- same rows as `SELECT * FROM current_assessments WHERE log_id IN (sightings' log ids)`,
-- read by primary-key lookups instead of building the set of every current refusal.
CREATE OR REPLACE VIEW {db}.policy_gap_current AS
SELECT *
FROM {db}.assessments FINAL
PREWHERE log_id IN (SELECT log_id FROM {db}.policy_gap_sightings)
WHERE (log_id, policy_bundle) IN (
    SELECT log_id, policy_bundle FROM {db}.refusal_events FINAL
    PREWHERE log_id IN (SELECT log_id FROM {db}.policy_gap_sightings)
    WHERE is_refusal
)
SETTINGS use_index_for_in_with_subqueries = 1, do_not_merge_across_partitions_select_final = 1;
