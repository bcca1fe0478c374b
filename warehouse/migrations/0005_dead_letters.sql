-- Dead letters (schemas.DeadLetter): records or batches that failed, with the raw bytes to
-- replay them. dead_letter_id is deterministic, so the same failure reported twice is one
-- row (newest created_at wins). Not partitioned: a re-report may come in another month.
CREATE TABLE IF NOT EXISTS {db}.dead_letters
(
    dead_letter_id String,
    stage          LowCardinality(String),
    reason_code    LowCardinality(String),
    reason         String,
    source         String,
    location       String,
    raw            String,
    log_id         Nullable(String),
    created_at     DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(created_at)
ORDER BY dead_letter_id
SETTINGS non_replicated_deduplication_window = 1000;
