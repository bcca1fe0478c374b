"""The alerts room: drift detection, policy-gap tracking and the alert publisher, with the
``refusal-audit alerts`` and ``gaps`` commands (docs/alerts.md)."""
