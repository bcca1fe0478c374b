-- Policy gaps dated by event time and named after their most common member (replaces the
-- view of 0007, which dated a gap by the audit times of its sightings and named it after the
-- flag that opened it). One rule everywhere (refusal_audit/gaps.py, the report, Grafana):
-- a sighting is dated by the event time of its refusal (refusal_events; the sighting's
-- seen_at, the audit time, only for a log id without a stored event), and a gap is described
-- by the member flag description that holds the most distinct log ids (ties: the earliest
-- dated). seen_at stays the tracking bookkeeping (which batches were read).
CREATE OR REPLACE VIEW {db}.policy_gap_dated AS
SELECT s.policy_bundle AS policy_bundle,
       s.gap_id AS gap_id,
       s.log_id AS log_id,
       s.batch_id AS batch_id,
       s.description AS description,
       s.gap_description AS gap_description,
       s.seen_at AS seen_at,
       if(e.event_log_id = '', s.seen_at, e.event_time) AS event_time
FROM {db}.policy_gap_sightings AS s FINAL
LEFT JOIN (
    SELECT log_id AS event_log_id, event_time FROM {db}.refusal_events FINAL
) AS e ON s.log_id = e.event_log_id;

-- One row per gap: its name (the most common member description), first and last event,
-- distinct log ids and batches, and up to 20 example log ids in event order.
-- `refusal-audit gaps` and the Grafana "Open gaps" panel read it.
CREATE OR REPLACE VIEW {db}.policy_gap_summary AS
SELECT policy_bundle,
       gap_id,
       argMax(member, (member_log_ids, -toUnixTimestamp64Milli(member_first))) AS description,
       min(member_first) AS first_seen,
       max(member_last) AS last_seen,
       length(arrayDistinct(flatten(groupArray(member_ids)))) AS log_ids,
       length(arrayDistinct(flatten(groupArray(member_batches)))) AS batches,
       arraySlice(arrayDistinct(arrayMap(x -> x.2, arraySort(flatten(groupArray(member_seen))))),
                  1, 20) AS example_log_ids
FROM (
    SELECT policy_bundle, gap_id, description AS member,
           uniqExact(log_id) AS member_log_ids,
           min(event_time) AS member_first,
           max(event_time) AS member_last,
           groupUniqArray(log_id) AS member_ids,
           groupUniqArray(batch_id) AS member_batches,
           groupArray((event_time, log_id)) AS member_seen
    FROM {db}.policy_gap_dated
    GROUP BY policy_bundle, gap_id, description
)
GROUP BY policy_bundle, gap_id;
