-- The report's audit configurations and the policy_gaps query's batches from daily aggregates (issue 27, item 4; warehouse.daily,
-- docs/warehouse.md): per recompute version, current assessments per bundle, event day,
-- model, product and audit configuration (bundle version, engine, engine model, prompt
-- version), with their count and first/last audit time. Kept exact as 0024's aggregates
-- are: the same dirty days (0024's materialized views mark them; no new view, so the
-- writers' inserts cost nothing more), recomputed whole by warehouse.daily.refresh under a
-- new version; readers read clean days' recorded version and compute dirty days live.
CREATE TABLE IF NOT EXISTS {db}.daily_audit_configurations
(
    day            Date,
    version        UInt64,
    policy_bundle  LowCardinality(String),
    model          LowCardinality(String),
    product        LowCardinality(String),
    bundle_version LowCardinality(String),
    engine         LowCardinality(String),
    engine_model   LowCardinality(String),
    prompt_version LowCardinality(String),
    assessments    UInt64,
    first_audit    DateTime64(3, 'UTC'),
    last_audit     DateTime64(3, 'UTC')
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (day, version, policy_bundle, model, product, bundle_version, engine, engine_model,
          prompt_version);

-- The named query policy_gaps: per recompute version, the batches of the current assessments
-- per bundle and event day, with the (model, product) pairs they hold: one row per batch and
-- day (about one per batch), so the unfiltered query reads a column of batch ids, not the
-- per-model/product rows of daily_assessment_batches (about one per assessment on the
-- generated store: a batch holds many models and products).
CREATE TABLE IF NOT EXISTS {db}.daily_batch_scopes
(
    day           Date,
    version       UInt64,
    policy_bundle LowCardinality(String),
    batch_id      String,
    scopes        Array(Tuple(model LowCardinality(String), product LowCardinality(String))),
    assessments   UInt64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (day, version, policy_bundle, batch_id);

-- A populated warehouse: the days already recomputed (clean under 0024) have no rows here,
-- so every stored day is marked dirty again: the queries compute it live (correct before any
-- refresh) until `refusal-audit daily refresh` or the writers' refresh recomputes it, which
-- fills this table. Re-running it marks them again, which only costs a recompute.
INSERT INTO {db}.dirty_days (day, version, dirty)
SELECT day, toUnixTimestamp64Nano(now64(9)), true
FROM (
    SELECT DISTINCT toDate(event_time) AS day FROM {db}.refusal_events
    UNION DISTINCT
    SELECT DISTINCT toDate(event_time) AS day FROM {db}.assessments
);
