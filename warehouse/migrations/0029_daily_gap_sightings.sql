-- requires: keys-in-one-partition
-- The policy-gap reads from a daily aggregate (issue 27, item 4; gapF, docs/warehouse.md
-- "Migration 0029"). 0027's lookups of the sightings' log ids still read the log_id column
-- of nearly every granule of refusal_events and assessments (hashed ids spread over all of
-- them): top_gap_flags 15.3 s, the panels "New gaps" 12.8 s, "Gap sightings" 11.0 s, "Open
-- gaps" 4.0 s at 100 M stored events. daily_gap_sightings (warehouse.daily's "gaps",
-- warehouse/gap_daily.py) holds every sighting resolved, under 0024's dirty-day scheme:
-- - on its event's day when the event is stored (stored = true): the event's time and the
--   (model, product) pairs of the log id's current assessments (scopes);
-- - on the day of its seen_at (stored = false): event_time = seen_at, no scopes.
-- Readers (warehouse/gap_reads.py) keep one row per sighting, the stored one when there is
-- one: policy_gap_dated's dating. An event stored after its sighting marks its own day only
-- (0024's views); the seen_at day's unstored row is then shadowed, so event writers do not
-- look sightings up. The sighting writer (warehouse.gaps.insert_sightings) marks the
-- sightings' seen_at days and their stored events' days before and after its insert
-- (warehouse.daily.mark_sighting_days); a manual INSERT INTO policy_gap_sightings must call
-- it too (nothing marks it otherwise).
-- Backfill: only this table, for each day already recomputed, under that day's recorded
-- version (the rows 0029's refresh would compute now); dirty days are computed live until
-- the next refresh. The events and current assessments of the sightings are looked up by a
-- PREWHERE on their log ids (0027's lookups: one run of them). A seen_at day with neither a
-- recorded version nor a mark (no event was ever stored on it) is marked dirty: otherwise
-- its unstored rows would be read from nowhere; an event's day always has one or the other
-- (every event insert marks its day, 0024). No other day is marked. Run with the writers
-- stopped (a refresh by the previous release would record a version without this table's
-- rows). Re-running skips the days that hold rows already and marks no day twice.

CREATE TABLE IF NOT EXISTS {db}.daily_gap_sightings
(
    day             Date,
    version         UInt64,
    policy_bundle   LowCardinality(String),
    gap_id          String,
    log_id          String,
    batch_id        String,
    description     String,
    gap_description String,
    seen_at         DateTime64(3, 'UTC'),
    event_time      DateTime64(3, 'UTC'),
    stored          Bool,
    scopes          Array(Tuple(String, String))
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (day, version, policy_bundle, gap_id, log_id, batch_id);

-- The sightings of the recomputed days, both forms in one insert (a re-run skips a day
-- whole): stored rows on their events' days, unstored rows on their seen_at days.
INSERT INTO {db}.daily_gap_sightings
    (version, day, policy_bundle, gap_id, log_id, batch_id, description, gap_description,
     seen_at, event_time, stored, scopes)
SELECT r.version, g.day, g.policy_bundle, g.gap_id, g.log_id, g.batch_id, g.description,
       g.gap_description, g.seen_at, g.event_time, g.stored, g.scopes
FROM (
    SELECT toDate(event_time) AS day, policy_bundle, gap_id, log_id, batch_id, description,
           gap_description, seen_at, event_time, stored, scopes
    FROM (
        SELECT s.policy_bundle AS policy_bundle, s.gap_id AS gap_id, s.log_id AS log_id,
               s.batch_id AS batch_id, s.description AS description,
               s.gap_description AS gap_description, s.seen_at AS seen_at,
               e.event_time AS event_time, true AS stored,
               CAST(c.scopes, 'Array(Tuple(String, String))') AS scopes
        FROM {db}.policy_gap_sightings AS s FINAL
        INNER JOIN (
            SELECT log_id, event_time FROM {db}.refusal_events FINAL
            PREWHERE log_id IN (SELECT log_id FROM {db}.policy_gap_sightings)
        ) AS e ON s.log_id = e.log_id
        LEFT JOIN (
            SELECT log_id,
                   arraySort(groupUniqArray((toString(model), toString(product)))) AS scopes
            FROM {db}.policy_gap_current
            GROUP BY log_id
        ) AS c ON s.log_id = c.log_id
        UNION ALL
        SELECT policy_bundle, gap_id, log_id, batch_id, description, gap_description, seen_at,
               seen_at AS event_time, false AS stored,
               CAST([], 'Array(Tuple(String, String))') AS scopes
        FROM {db}.policy_gap_sightings FINAL
    )
) AS g
INNER JOIN (SELECT day, max(version) AS version FROM {db}.daily_versions GROUP BY day) AS r
    ON r.day = g.day
WHERE g.day NOT IN (SELECT day FROM {db}.daily_gap_sightings)
SETTINGS do_not_merge_across_partitions_select_final = 1, use_index_for_in_with_subqueries = 1;

-- seen_at days without a recorded version or a mark: computed from the next refresh on.
INSERT INTO {db}.dirty_days (day, version, dirty)
SELECT DISTINCT toDate(seen_at) AS day, toUnixTimestamp64Nano(now64(9)), true
FROM {db}.policy_gap_sightings
WHERE day NOT IN (SELECT day FROM {db}.daily_versions)
  AND day NOT IN (SELECT day FROM {db}.dirty_days FINAL WHERE dirty);
