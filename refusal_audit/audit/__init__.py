"""The audit room: the shared audit pipeline, the engines and pre-filter models it runs, the
batch audit of log files (``refusal-audit audit``), ``eval``, ``reaudit`` and the run report
they print. The root CLI (``refusal_audit.cli``) registers these commands."""
