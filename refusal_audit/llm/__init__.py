"""The local-LLM capability (issue 24): serving a GGUF model, and what the engines learn
from the server they talk to (``refusal_audit.llm.discovery``)."""
