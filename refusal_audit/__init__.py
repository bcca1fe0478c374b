"""refusal-audit application shell: configuration, the shared pipeline and the CLI."""

__version__ = "0.1.0"
