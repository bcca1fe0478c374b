-- The optional LLM judge of the clarification circumvention check (issue 12, step 3): its
-- verdict on a question set the deterministic rules passed, 'passed', 'rejected' or 'failed'
-- ('' when the judge is off or did not run; rows stored before this migration have '').
-- The verdict's reasons and explanation are in escalation_detail (when it escalated) and in
-- the state's "judge" object.
ALTER TABLE {db}.clarification_steps
    ADD COLUMN IF NOT EXISTS circumvention_judge LowCardinality(String) DEFAULT '' AFTER circumvention;
