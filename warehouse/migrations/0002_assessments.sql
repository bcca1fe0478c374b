-- Audit assessments (schemas.StoredAssessment). Every (policy_bundle, log_id) has exactly one
-- CURRENT assessment: the one with the newest audited_at (a re-audit replaces the previous
-- one, a late re-delivery of an older one does not). Read with FINAL.
-- event_time is the audited event's time (fixed per log_id), so monthly partitions are safe.
CREATE TABLE IF NOT EXISTS {db}.assessments
(
    log_id                      String,
    category                    LowCardinality(String),
    is_estimated_false_positive Bool,
    policy_clause_cited         Nullable(String),
    assessment_rationale        String,
    requires_human_review       Bool,
    batch_id                    String,
    policy_bundle               LowCardinality(String),
    bundle_version              LowCardinality(String),
    engine                      LowCardinality(String),
    engine_model                LowCardinality(String),
    engine_version              LowCardinality(String),
    prompt_version              LowCardinality(String),
    audited_at                  DateTime64(3, 'UTC'),
    event_time                  DateTime64(3, 'UTC'),
    model                       LowCardinality(String),
    product                     LowCardinality(String),
    false_positive_score        Nullable(Float64),
    sampled_for_review          Bool,
    review_reason               LowCardinality(String)
)
ENGINE = ReplacingMergeTree(audited_at)
PARTITION BY toYYYYMM(event_time)
ORDER BY (policy_bundle, log_id)
SETTINGS non_replicated_deduplication_window = 1000;
