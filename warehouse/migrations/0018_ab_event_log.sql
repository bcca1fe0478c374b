-- The product's A/B events keyed by their content too (replaces ab_events of 0017, which
-- kept only the newest copy of an event id and so hid a resend with different contents).
-- ORDER BY (experiment_id, event_id, event_sha256): an identical resend counts once; copies
-- of an event id with different contents are all kept, and the A/B report marks the
-- experiment invalid (processors.calibration.ab). ab_events held only this release's data.
DROP TABLE IF EXISTS {db}.ab_events;

CREATE TABLE IF NOT EXISTS {db}.ab_event_log
(
    event_id            String,
    experiment_id       String,
    event_sha256        FixedString(64),
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
ORDER BY (experiment_id, event_id, event_sha256);
