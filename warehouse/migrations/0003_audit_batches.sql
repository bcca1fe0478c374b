-- Audited batches (schemas.BatchRecord): validated summary, provenance, usage and latency.
-- batch_id is deterministic, so re-running a batch replaces its row (newest audited_at wins).
-- Not partitioned: a re-run may happen in another month, and FINAL only collapses rows
-- within one partition. The table is small (one row per batch).
CREATE TABLE IF NOT EXISTS {db}.audit_batches
(
    batch_id                  String,
    policy_bundle             LowCardinality(String),
    bundle_version            LowCardinality(String),
    engine                    LowCardinality(String),
    engine_model              LowCardinality(String),
    engine_version            LowCardinality(String),
    prompt_version            LowCardinality(String),
    audited_at                DateTime64(3, 'UTC'),
    log_ids                   Array(String),
    total_refusals            UInt32,
    estimated_false_positives UInt32,
    categorization            Map(String, UInt32),
    policy_gap_flags          Array(Tuple(description String, example_log_ids Array(String))),
    trends                    Array(String),
    prompt_tokens             UInt64,
    cached_tokens             UInt64,
    completion_tokens         UInt64,
    latency_ms                Float64
)
ENGINE = ReplacingMergeTree(audited_at)
ORDER BY batch_id
SETTINGS non_replicated_deduplication_window = 1000;
