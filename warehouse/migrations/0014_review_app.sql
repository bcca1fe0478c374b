-- The review web app's accounts and saved queues (issue 10). Both are small tables of
-- current state kept as versions: a change is a new row with a later updated_at, and reads
-- use FINAL, so the newest row per key counts. Nothing is deleted: a removed reviewer is
-- active = false, a removed queue deleted = true.
CREATE TABLE IF NOT EXISTS {db}.reviewers
(
    name          String,
    role          LowCardinality(String),
    password_hash String,
    active        Bool,
    updated_at    DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY name;

CREATE TABLE IF NOT EXISTS {db}.review_queues
(
    name          String,
    description   String,
    policy_bundle Nullable(String),
    model         Nullable(String),
    product       Nullable(String),
    category      Nullable(String),
    review_reason Nullable(String),
    since         Nullable(Date),
    until         Nullable(Date),
    deleted       Bool,
    updated_by    String,
    updated_at    DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY name;
