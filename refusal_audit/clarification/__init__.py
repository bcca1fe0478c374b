"""The clarification service: state stores, the service, its HTTP app, settings wiring and
``clarify eval`` (see docs/clarification.md)."""
