-- The duplicate-log-id rule (refusal_audit/pipeline.py): a log id names one event, and the
-- first stored copy wins. content_fingerprint identifies what a copy said (BLAKE2b-128 of the
-- decoded event before redaction): a later copy with another fingerprint is dead-lettered
-- as duplicate_log_id and never replaces the stored row; one with the same fingerprint is a
-- redelivery, stored again harmlessly. Rows stored before this migration have '' (unknown):
-- any copy of them counts as identical, as before.
ALTER TABLE {db}.refusal_events ADD COLUMN IF NOT EXISTS content_fingerprint String DEFAULT '';
