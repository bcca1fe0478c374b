-- First arrival time of every event, kept across re-deliveries, re-runs and merges.
-- refusal_events is a ReplacingMergeTree(ingested_at) that keeps the NEWEST version of a
-- log_id, so its ingested_at moves forward whenever the same event is stored again; the drift
-- view (0008) used it to decide lateness, so re-processing the same input after the grace
-- period moved already-counted events into a later window as late. event_arrivals keeps the
-- minimum ingested_at per log_id instead: a SimpleAggregateFunction(min) column of an
-- AggregatingMergeTree, so repeated rows (re-inserts, a repeated backfill) merge to the
-- first arrival and never move it. Read it with min(first_ingested_at) ... GROUP BY log_id
-- (parts may not be merged yet).
CREATE TABLE IF NOT EXISTS {db}.event_arrivals
(
    log_id            String,
    first_ingested_at SimpleAggregateFunction(min, DateTime64(3, 'UTC'))
)
ENGINE = AggregatingMergeTree
ORDER BY log_id;

-- Filled on every insert into refusal_events, by any writer (Warehouse.insert_events, an
-- older release still running during a rolling upgrade, a manual INSERT), as part of that
-- same insert: the materialized view sees exactly the blocks refusal_events stores (a block
-- dropped by insert deduplication is not forwarded, and would not change the min anyway).
CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.event_arrivals_mv TO {db}.event_arrivals
AS SELECT log_id, ingested_at AS first_ingested_at
FROM {db}.refusal_events;

-- Backfill from the rows stored before this migration (created after the materialized view,
-- so an event inserted meanwhile is recorded by one or both). All unmerged versions count,
-- so an event re-delivered earlier gets its oldest ingested_at still on disk. Re-running it
-- (an interrupted migration is applied again) only adds rows that min() folds away.
INSERT INTO {db}.event_arrivals (log_id, first_ingested_at)
SELECT log_id, min(ingested_at)
FROM {db}.refusal_events
GROUP BY log_id;

-- 0008's drift view, with lateness and the arrival window decided by the FIRST arrival
-- (column ingested_at is now that first arrival time); output columns are unchanged. The
-- arrival time is the min over event_arrivals and, as a fallback for an event without an
-- arrival row (e.g. a materialized-view push that failed after the source block was
-- written), the event's own stored versions: every stored version is at or after the first
-- arrival recorded, so the fallback never moves a recorded one.
CREATE OR REPLACE VIEW {db}.drift_assessments AS
WITH
    toStartOfInterval(a.event_time, toIntervalSecond({window_seconds:UInt32})) AS event_window,
    e.ingested_at >= event_window + toIntervalSecond({window_seconds:UInt32} + {grace_seconds:UInt32}) AS is_late
SELECT
    if(is_late, toStartOfInterval(e.ingested_at, toIntervalSecond({window_seconds:UInt32})), event_window) AS window_start,
    is_late AS late,
    a.log_id AS log_id,
    a.policy_bundle AS policy_bundle,
    a.model AS model,
    a.product AS product,
    a.category AS category,
    a.is_estimated_false_positive AS is_estimated_false_positive,
    a.requires_human_review AS requires_human_review,
    (a.policy_bundle, a.log_id) IN (
        SELECT policy_bundle, arrayJoin(arrayFlatten(arrayMap(f -> f.2, policy_gap_flags)))
        FROM {db}.audit_batches FINAL
    ) AS policy_gap,
    a.event_time AS event_time,
    e.ingested_at AS ingested_at
FROM {db}.current_assessments AS a
INNER JOIN (
    SELECT log_id, min(arrived_at) AS ingested_at
    FROM (
        SELECT log_id, CAST(first_ingested_at AS DateTime64(3, 'UTC')) AS arrived_at
        FROM {db}.event_arrivals
        UNION ALL
        SELECT log_id, ingested_at AS arrived_at
        FROM {db}.refusal_events
    )
    GROUP BY log_id
) AS e USING (log_id);
