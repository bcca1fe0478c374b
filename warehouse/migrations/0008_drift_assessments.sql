-- Current assessments placed in the drift detectors' tumbling event-time windows
-- (parameterized view; read as drift_assessments(window_seconds=3600, grace_seconds=300)).
-- An event belongs to the window of its event_time, unless it reached the warehouse
-- (refusal_events.ingested_at) after that window's end plus the grace period: then it is
-- counted in the window it arrived in and marked late. policy_gap is true when a batch's
-- policy-gap flag names the event's log id. Alert summaries quote queries on this view, so
-- every alert's counts can be reproduced from ClickHouse.
CREATE VIEW IF NOT EXISTS {db}.drift_assessments AS
WITH
    toStartOfInterval(a.event_time, toIntervalSecond({window_seconds:UInt32})) AS event_window,
    e.ingested_at >= event_window + toIntervalSecond({window_seconds:UInt32} + {grace_seconds:UInt32}) AS is_late
SELECT
    if(is_late, toStartOfInterval(e.ingested_at, toIntervalSecond({window_seconds:UInt32})), event_window) AS window_start,
    is_late AS late,
    a.log_id AS log_id,
    a.policy_bundle AS policy_bundle,
    a.model AS model,
    a.product AS product,
    a.category AS category,
    a.is_estimated_false_positive AS is_estimated_false_positive,
    a.requires_human_review AS requires_human_review,
    (a.policy_bundle, a.log_id) IN (
        SELECT policy_bundle, arrayJoin(arrayFlatten(arrayMap(f -> f.2, policy_gap_flags)))
        FROM {db}.audit_batches FINAL
    ) AS policy_gap,
    a.event_time AS event_time,
    e.ingested_at AS ingested_at
FROM {db}.current_assessments AS a
INNER JOIN (SELECT log_id, ingested_at FROM {db}.refusal_events FINAL) AS e USING (log_id);
