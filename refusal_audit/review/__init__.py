"""The review room: the human-review service, reviewer accounts and API tokens, verdict
files, the review web app (``review/web/``: queue, item, calibration and clarification
pages) and the ``refusal-audit review`` commands (docs/review.md)."""
