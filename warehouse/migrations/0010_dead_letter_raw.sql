-- What a dead letter keeps of a record beyond dead_letter_max_raw_bytes (schemas.DeadLetter):
-- raw holds the value whole up to that limit, else only its first bytes (raw_truncated);
-- raw_length and raw_sha256 always describe the whole original value (before redaction and
-- truncation), and source + location say where it was (topic and "partition P offset O", or
-- file and line). Rows stored before this migration get the length of what they kept and
-- an empty hash (they were cut silently at 1 MiB: a row with raw_length = 1048576 may be
-- such a cut record).
ALTER TABLE {db}.dead_letters ADD COLUMN IF NOT EXISTS raw_length UInt64 DEFAULT length(raw) AFTER raw;
ALTER TABLE {db}.dead_letters ADD COLUMN IF NOT EXISTS raw_sha256 String DEFAULT '' AFTER raw_length;
ALTER TABLE {db}.dead_letters ADD COLUMN IF NOT EXISTS raw_truncated Bool DEFAULT false AFTER raw_sha256;
