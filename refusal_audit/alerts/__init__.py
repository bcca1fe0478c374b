"""The alerts room: drift detection, policy-gap tracking and the alert publisher, with the
``refusal-audit alerts`` commands (docs/alerts.md; ``gaps`` is an audit command,
``refusal_audit.audit.cli``, over this room's tracking)."""
