"""Audit engines: each turns a batch of refusal events into an ``AuditResult``."""
