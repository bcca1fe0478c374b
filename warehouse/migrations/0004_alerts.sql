-- Alerts raised on the audit's trends. The alert contract is defined later; this table is
-- generic: a kind, a severity, an optional scope (bundle/model/product/window), a message and
-- a JSON payload. alert_id is the caller's deterministic id; re-raising replaces the row
-- (newest created_at wins). Not partitioned, for the same reason as audit_batches.
CREATE TABLE IF NOT EXISTS {db}.alerts
(
    alert_id      String,
    kind          LowCardinality(String),
    severity      LowCardinality(String),
    policy_bundle LowCardinality(String),
    model         LowCardinality(String),
    product       LowCardinality(String),
    window_start  Nullable(DateTime64(3, 'UTC')),
    window_end    Nullable(DateTime64(3, 'UTC')),
    message       String,
    payload       String,
    created_at    DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(created_at)
ORDER BY alert_id
SETTINGS non_replicated_deduplication_window = 1000;
