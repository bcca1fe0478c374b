-- Holds on dirty days (break9; warehouse/day_holds.py, docs/warehouse.md "Migration 0030").
-- Policy-gap sightings and review verdicts reach their daily aggregates (0028, 0029) only
-- through their writers' marks (no materialized view can mark their events' days in the
-- insert: a verdict or a sighting names a log id, not its event's day). A writer marks the
-- days before and after its insert; a refresh that read the first mark before the rows were
-- visible recorded the days without them, and a writer killed before its second mark left
-- them so for good. Now a writer holds the days before its first mark (until = now + its
-- hold) and releases them after its second (until = now); warehouse.daily.refresh leaves a
-- held day dirty (computed live by the readers) until its hold is released or has expired.
-- A new table only: instant and safe on a populated warehouse; writers of the previous
-- release hold nothing (their race is as before).
CREATE TABLE IF NOT EXISTS {db}.dirty_day_holds
(
    day     Date,
    holder  String,
    version UInt64,
    until   DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (day, holder)
TTL toDateTime(until) + INTERVAL 1 DAY;
