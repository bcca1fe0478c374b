"""The local-LLM capability: llama.cpp's OpenAI-compatible server run in this process
(``refusal-audit llm serve``, :mod:`refusal_audit.llm.serve`), so every LLM path of the
product can run fully offline against an open-weight GGUF model (docs/llm-engine.md,
"Fully offline"), and what the engines learn from the server they talk to: its kind,
context size and slots (``inference.discovery``, the I/O layer); the ``refusal-audit llm``
commands (:mod:`refusal_audit.llm.cli`)."""
