"""The Kafka side's primitives: topics, the producer (``TopicWriter``), the stream sink's
topic writing and dead-letter framing, static group membership, logs, metrics, tailing and
reading alert topics.

Nothing here imports the application (``refusal_audit``) or the warehouse: the worker that
joins them to the shared pipeline is ``refusal_audit.streaming`` (docs/architecture.md, Layers).
"""
