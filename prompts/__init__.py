"""Versioned prompt templates for LLM audit engines (the ``local`` engine uses none)."""
