-- Refusal-style calibration (issue 13). Every table is ReplacingMergeTree keyed on a natural
-- id and read with FINAL, so a run, a decision or a product event written twice (a
-- redelivered Kafka message, a re-run command) counts once.
--
-- calibration_runs: one row per run (schemas.calibration.CalibrationRun; the whole run as
-- JSON in `run`, the columns analysts filter on beside it).
CREATE TABLE IF NOT EXISTS {db}.calibration_runs
(
    calibration_run_id  String,
    created_at          DateTime64(3, 'UTC'),
    started_by          String,
    log_id              String,
    request_sha256      String,
    policy_bundle       LowCardinality(String),
    bundle_version      LowCardinality(String),
    clause_id           LowCardinality(String),
    clause_title        String,
    spectrum_source     LowCardinality(String),
    styles              Array(String),
    engine              LowCardinality(String),
    engine_model        LowCardinality(String),
    engine_version      LowCardinality(String),
    prompt_version      LowCardinality(String),
    status              LowCardinality(String),
    passing_styles      Array(String),
    escalation_reason   LowCardinality(String),
    attempts            UInt8,
    input_tokens        UInt64,
    output_tokens       UInt64,
    source              String,
    run                 String,
    recorded_at         DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(recorded_at)
ORDER BY calibration_run_id;

-- One row per variant of a run with its regression result (the approval queue's items).
CREATE TABLE IF NOT EXISTS {db}.calibration_variants
(
    calibration_run_id  String,
    style               String,
    base_style          LowCardinality(String),
    label               String,
    created_at          DateTime64(3, 'UTC'),
    started_by          String,
    policy_bundle       LowCardinality(String),
    clause_id           LowCardinality(String),
    response_text       String,
    ux_impact_note      String,
    passed              Bool,
    reasons             Array(String),
    findings            String,
    refusal_score       Float64,
    suite_verdict       LowCardinality(String),
    recorded_at         DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(recorded_at)
ORDER BY (calibration_run_id, style);

-- Approvers' decisions, append-only: every decision is its own row (the log); the newest
-- per (calibration_run_id, style) is the variant's current decision.
CREATE TABLE IF NOT EXISTS {db}.calibration_decisions
(
    decision_id         String,
    calibration_run_id  String,
    style               String,
    policy_bundle       LowCardinality(String),
    clause_id           LowCardinality(String),
    approver            String,
    decision            LowCardinality(String),
    note                String,
    decided_at          DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(decided_at)
ORDER BY decision_id;

-- Exported experiments (calibrate export): the plan the A/B report reads and the flagd
-- definition that was written.
CREATE TABLE IF NOT EXISTS {db}.calibration_experiments
(
    experiment_id       String,
    policy_bundle       LowCardinality(String),
    clause_id           LowCardinality(String),
    plan                String,
    flagd               String,
    arms                String,
    exported_by         String,
    exported_at         DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(exported_at)
ORDER BY experiment_id;

-- The product's A/B events (schemas.calibration.ABEvent), one row per (experiment_id,
-- event_id). Not partitioned by time: a resent event must land beside its first copy.
CREATE TABLE IF NOT EXISTS {db}.ab_events
(
    event_id            String,
    experiment_id       String,
    type                LowCardinality(String),
    occurred_at         DateTime64(3, 'UTC'),
    unit_id             String,
    arm_id              String,
    log_id              String,
    exposure_id         String,
    fulfilled           Bool,
    score               UInt8,
    event               String,
    source              String,
    recorded_at         DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(recorded_at)
ORDER BY (experiment_id, event_id);
