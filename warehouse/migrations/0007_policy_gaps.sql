-- Policy gaps: the evidence behind policy-gap alerts (refusal_audit/gaps.py). Every example
-- log id of a batch's policy-gap flag is one sighting of the gap the flag was grouped into
-- (flags of one bundle whose descriptions say the same thing form one gap). One row per
-- (policy_bundle, gap_id, log_id, batch_id): a redelivered or re-audited batch adds no rows
-- for what it already reported, so a gap's distinct log ids and batches do not grow on
-- reprocessing.
-- gap_description is the description of the flag that opened the gap (gap_id is derived
-- from it and the bundle); description the flag's own. seen_at is the audited_at of the batch
-- when its flag was first tracked (a later re-audit of the batch does not move it).
-- Rows are written only for sightings not yet stored, so any copy of a key is right.
-- Not partitioned, for the same reason as audit_batches.
CREATE TABLE IF NOT EXISTS {db}.policy_gap_sightings
(
    policy_bundle   LowCardinality(String),
    gap_id          String,
    log_id          String,
    batch_id        String,
    description     String,
    gap_description String,
    seen_at         DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY (policy_bundle, gap_id, log_id, batch_id)
SETTINGS non_replicated_deduplication_window = 1000;

-- One row per gap: its opening description, first and last sighting, distinct log ids and
-- batches, and up to 20 example log ids in order of first sighting. `refusal-audit gaps`
-- reads it.
CREATE VIEW IF NOT EXISTS {db}.policy_gap_summary AS
SELECT policy_bundle,
       gap_id,
       argMin(gap_description, seen_at) AS description,
       min(seen_at) AS first_seen,
       max(seen_at) AS last_seen,
       uniqExact(log_id) AS log_ids,
       uniqExact(batch_id) AS batches,
       arraySlice(arrayDistinct(arrayMap(x -> x.2, arraySort(groupArray((seen_at, log_id))))),
                  1, 20) AS example_log_ids
FROM {db}.policy_gap_sightings FINAL
GROUP BY policy_bundle, gap_id;
