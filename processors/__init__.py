"""The audit logic, pure where it can be: redaction, pre-filter, batching, engines, validation."""
