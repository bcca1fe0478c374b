"""The training room: builds the shipped models (pre-filter, category, cascade head,
circumvention check) and their cards, with the ``refusal-audit train`` command
(docs/training.md)."""
