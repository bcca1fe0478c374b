-- The clarification service's audit trail (issue 12): one row per state of a conversation
-- (conversation_id, revision). Every column is a function of that state (and of the sampling
-- settings), so re-processing a step, a redelivered message or the start-up reconciliation,
-- writes the same row again, and ReplacingMergeTree keeps one per key (read with FINAL).
-- state holds the whole ConversationState (the history reviewers see).
CREATE TABLE IF NOT EXISTS {db}.clarification_steps
(
    conversation_id      String,
    revision             UInt32,
    step                 LowCardinality(String),
    log_id               String,
    request_hash         FixedString(64),
    policy_bundle        LowCardinality(String),
    model                LowCardinality(String),
    product              LowCardinality(String),
    category             LowCardinality(String),
    route                LowCardinality(String),
    engine               LowCardinality(String),
    engine_model         LowCardinality(String),
    prompt_version       LowCardinality(String),
    round                UInt8,
    outcome              LowCardinality(String),
    questions            String,
    validation           LowCardinality(String),
    circumvention        LowCardinality(String),
    surfaced             Bool,
    escalated            Bool,
    escalation_reason    LowCardinality(String),
    escalation_detail    String,
    reevaluation         LowCardinality(String),
    final                Bool,
    sampled_for_review   Bool,
    sample_probability   Float64,
    state                String,
    created_at           DateTime64(3, 'UTC'),
    step_at              DateTime64(3, 'UTC'),
    recorded_at          DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(recorded_at)
ORDER BY (conversation_id, revision);

-- Reviewers' verdicts on clarification review items (escalations and sampled conversations),
-- append-only like review_verdicts: verdict_id is deterministic, a revision is a new row.
CREATE TABLE IF NOT EXISTS {db}.clarification_verdicts
(
    verdict_id           String,
    conversation_id      String,
    revision             UInt32,
    reviewer             String,
    decision             LowCardinality(String),
    questions_ok         Bool,
    note                 String,
    outcome              LowCardinality(String),
    escalation_reason    LowCardinality(String),
    submitted_at         DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(submitted_at)
ORDER BY verdict_id;
