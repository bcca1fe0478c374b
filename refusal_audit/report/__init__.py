"""The report room: the self-contained HTML audit report of a period (``report/html/``) and
the ``refusal-audit report`` command (docs/report.md)."""
