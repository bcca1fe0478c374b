"""The calibration room: calibration runs, their store and starter set, the Kafka consumers
of calibration and A/B runs, and the ``refusal-audit calibrate`` and ``ab`` commands
(docs/calibration.md)."""
