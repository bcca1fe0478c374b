-- Redacted refusal events (schemas.StoredEvent), refusals and non-refusals alike.
-- One current row per log_id: ReplacingMergeTree keeps the row with the newest ingested_at
-- (re-delivery of an event replaces it); read with FINAL. event_time never changes for a
-- log_id, so partitioning by its month keeps all versions of a row in one partition.
CREATE TABLE IF NOT EXISTS {db}.refusal_events
(
    log_id                String,
    event_time            DateTime64(3, 'UTC'),
    schema_version        LowCardinality(String),
    request               String,
    response              String,
    model                 LowCardinality(String),
    product               LowCardinality(String),
    policy_bundle         LowCardinality(String),
    conversation_id       Nullable(String),
    has_classifier        Bool,
    classifier_flagged    Nullable(Bool),
    classifier_score      Nullable(Float64),
    classifier_labels     Array(String),
    classifier_is_refusal Nullable(Bool),
    attributes            Map(String, String),
    redactions            Map(String, UInt32),
    is_refusal            Bool,
    refusal_kind          LowCardinality(String),
    refusal_score         Float64,
    refusal_cues          Array(String),
    source                String,
    ingested_at           DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(ingested_at)
PARTITION BY toYYYYMM(event_time)
ORDER BY log_id
SETTINGS non_replicated_deduplication_window = 1000;
