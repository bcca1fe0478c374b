"""The review room: the human-review service, reviewer accounts and API tokens, verdict
files, the review web app (``review/web/``: login, queue, item and admin pages; it also serves
the calibration and clarification rooms' ``pages``) and the ``refusal-audit review`` commands
(docs/review.md)."""
