"""The Kafka side: faust app, topics, agents and producers (the streaming worker).

The worker reuses ``refusal_audit.pipeline`` (the same code path as batch mode).
"""
