-- Daily aggregates of current_assessments, kept exact under "newest wins" (issue 27, item 4;
-- warehouse.daily, docs/warehouse.md). A replaced version cannot be subtracted from a sum,
-- so a day is recomputed whole instead:
-- - every insert into refusal_events or assessments marks the event days it holds dirty
--   (dirty_days, by the materialized views below, as part of that same insert, whoever
--   writes: the sink, the batch pipeline, the Kafka engine, a manual INSERT; the Python
--   writers mark again after their insert returns, warehouse.store);
-- - warehouse.daily.refresh recomputes dirty days from current_assessments restricted to
--   those days into the daily_* tables under a new version, records that version per day
--   (daily_versions), then clears the marks it read (a mark written since stays);
-- - readers take, per clean day, the rows of the day's recorded version, and compute
--   dirty days live. A day is the UTC day of event_time; a day is marked, not a
--   (bundle, day) pair: an event re-judged under another bundle retires an assessment of a
--   bundle its new version does not name.
-- Versions are server nanoseconds (toUnixTimestamp64Nano(now64(9))).
CREATE TABLE IF NOT EXISTS {db}.dirty_days
(
    day     Date,
    version UInt64,
    dirty   Bool
)
ENGINE = ReplacingMergeTree(version)
ORDER BY day;

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.dirty_days_events_mv TO {db}.dirty_days
AS SELECT toDate(event_time) AS day, max(toUnixTimestamp64Nano(now64(9))) AS version,
          true AS dirty
FROM {db}.refusal_events
GROUP BY day;

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.dirty_days_assessments_mv TO {db}.dirty_days
AS SELECT toDate(event_time) AS day, max(toUnixTimestamp64Nano(now64(9))) AS version,
          true AS dirty
FROM {db}.assessments
GROUP BY day;

-- The version of each day's latest completed recompute (the largest wins).
CREATE TABLE IF NOT EXISTS {db}.daily_versions
(
    day     Date,
    version UInt64
)
ENGINE = ReplacingMergeTree(version)
ORDER BY day;

-- Per recompute version: current assessments per bundle, event day, model, product and
-- category, with the counts the trend queries need. Versions are part of the key (nothing
-- is replaced); warehouse.daily.refresh deletes a day's versions older than the last two.
CREATE TABLE IF NOT EXISTS {db}.daily_assessment_counts
(
    day                       Date,
    version                   UInt64,
    policy_bundle             LowCardinality(String),
    model                     LowCardinality(String),
    product                   LowCardinality(String),
    category                  LowCardinality(String),
    assessments               UInt64,
    estimated_false_positives UInt64,
    flagged                   UInt64,
    sampled                   UInt64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (day, version, policy_bundle, model, product, category);

-- The same per cited policy clause (assessments citing none are not counted here).
CREATE TABLE IF NOT EXISTS {db}.daily_clause_counts
(
    day                       Date,
    version                   UInt64,
    policy_bundle             LowCardinality(String),
    model                     LowCardinality(String),
    product                   LowCardinality(String),
    clause                    String,
    citations                 UInt64,
    estimated_false_positives UInt64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (day, version, policy_bundle, model, product, clause);

-- The batches of the current assessments per day, model and product (distinct batches of a
-- period: the report's period counts).
CREATE TABLE IF NOT EXISTS {db}.daily_assessment_batches
(
    day           Date,
    version       UInt64,
    policy_bundle LowCardinality(String),
    model         LowCardinality(String),
    product       LowCardinality(String),
    batch_id      String,
    assessments   UInt64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (day, version, policy_bundle, model, product, batch_id);

-- Stored events (refusals and non-refusals, by the pre-filter's decision) per bundle, day,
-- model and product: the prefilter query and the report's period counts.
CREATE TABLE IF NOT EXISTS {db}.daily_event_counts
(
    day           Date,
    version       UInt64,
    policy_bundle LowCardinality(String),
    model         LowCardinality(String),
    product       LowCardinality(String),
    events        UInt64,
    refusals      UInt64,
    non_refusals  UInt64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (day, version, policy_bundle, model, product);

-- A populated warehouse: every stored day is dirty (the queries compute it live until
-- `refusal-audit daily refresh` or the writers' refresh has recomputed it). Re-running it
-- marks them again, which only costs a recompute.
INSERT INTO {db}.dirty_days (day, version, dirty)
SELECT day, toUnixTimestamp64Nano(now64(9)), true
FROM (
    SELECT DISTINCT toDate(event_time) AS day FROM {db}.refusal_events
    UNION DISTINCT
    SELECT DISTINCT toDate(event_time) AS day FROM {db}.assessments
);
