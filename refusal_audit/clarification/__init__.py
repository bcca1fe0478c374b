"""The clarification room: state stores, the clarification service, its HTTP app and Kafka
consumer, the circumvention check, the reviewers' verdict labels, settings wiring and the
``refusal-audit clarify`` commands (see docs/clarification.md)."""
