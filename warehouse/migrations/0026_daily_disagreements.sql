-- Daily counts of the platform classifier's verdicts and their disagreements with our own
-- refusal detection (issue 27, item 4; the refusal_disagreements named query), kept exact
-- under "newest wins" as 0024's aggregates are (warehouse.daily, docs/warehouse.md): the
-- counts of a stored event's newest version (refusal_events FINAL), per UTC event day, model
-- and product, recomputed per dirty day by warehouse.daily.refresh under a version; readers
-- take the clean days' recorded version and compute the dirty days live. Every insert into
-- refusal_events already marks its event days dirty (0024's dirty_days_events_mv): this
-- migration adds no materialized view, so writers pay nothing more.
CREATE TABLE IF NOT EXISTS {db}.daily_disagreement_counts
(
    day                             Date,
    version                         UInt64,
    model                           LowCardinality(String),
    product                         LowCardinality(String),
    classifier_verdicts             UInt64,
    compared                        UInt64,
    disagreements                   UInt64,
    classifier_refusal_detector_not UInt64,
    detector_refusal_classifier_not UInt64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (day, version, model, product);

-- A populated warehouse: the days already recomputed by 0024's refresh have no row of this
-- table under their recorded version, so every stored day is marked dirty again (the queries
-- compute it live until `refusal-audit daily refresh` or the writers' refresh has recomputed
-- it). Re-running it marks them again, which only costs a recompute.
INSERT INTO {db}.dirty_days (day, version, dirty)
SELECT DISTINCT toDate(event_time) AS day, toUnixTimestamp64Nano(now64(9)), true
FROM {db}.refusal_events;
