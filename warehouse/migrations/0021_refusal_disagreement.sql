-- The platform classifier's refusal verdict and our own detection, side by side (issue 25).
-- An event carrying classifier.is_refusal is decided by that verdict (is_refusal,
-- refusal_score); our text detection still reads its response and is kept here:
-- detected_is_refusal / detected_refusal_score (for an event without a verdict they equal
-- is_refusal / refusal_score), and refusal_disagreement names how the two differ
-- ('classifier_refusal_detector_not', 'detector_refusal_classifier_not' or 'none').
-- Rows stored before this migration have NULL, NULL and 'none': nothing was detected beside
-- the verdict then (warehouse.queries' disagreement listing counts them apart, as
-- "not compared").
ALTER TABLE {db}.refusal_events ADD COLUMN IF NOT EXISTS detected_is_refusal Nullable(Bool);
ALTER TABLE {db}.refusal_events ADD COLUMN IF NOT EXISTS detected_refusal_score Nullable(Float64);
ALTER TABLE {db}.refusal_events ADD COLUMN IF NOT EXISTS refusal_disagreement LowCardinality(String) DEFAULT 'none';
