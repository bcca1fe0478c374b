-- Human review verdicts (schemas.review.Verdict), append-only. verdict_id is deterministic
-- (the judged assessment, the reviewer and everything they said), so the same verdict
-- submitted or imported twice is one row (newest submitted_at kept). A revision is a new
-- row; history stays. The assessment judged is (policy_bundle, log_id,
-- assessment_audited_at): a re-audit makes a new assessment, and old verdicts stay with the
-- one they judged. The model_* columns snapshot that assessment's verdict.
CREATE TABLE IF NOT EXISTS {db}.review_verdicts
(
    verdict_id               String,
    log_id                   String,
    policy_bundle            LowCardinality(String),
    assessment_audited_at    DateTime64(3, 'UTC'),
    reviewer                 String,
    verdict                  LowCardinality(String),
    corrected_category       Nullable(String),
    corrected_false_positive Nullable(Bool),
    corrected_clause         Nullable(String),
    note                     String,
    model                    LowCardinality(String),
    product                  LowCardinality(String),
    model_category           LowCardinality(String),
    model_false_positive     Bool,
    model_clause             Nullable(String),
    engine                   LowCardinality(String),
    engine_model             LowCardinality(String),
    engine_version           LowCardinality(String),
    prompt_version           LowCardinality(String),
    bundle_version           LowCardinality(String),
    review_reason            LowCardinality(String),
    submitted_at             DateTime64(3, 'UTC'),
    source                   String
)
ENGINE = ReplacingMergeTree(submitted_at)
ORDER BY verdict_id
SETTINGS non_replicated_deduplication_window = 1000;

-- The verdicts that count: each reviewer's newest on each assessment.
CREATE VIEW IF NOT EXISTS {db}.current_verdicts AS
SELECT *
FROM {db}.review_verdicts FINAL
ORDER BY submitted_at DESC, verdict_id DESC
LIMIT 1 BY policy_bundle, log_id, assessment_audited_at, reviewer;
