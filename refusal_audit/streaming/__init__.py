"""The streaming room: the faust worker that runs the shared pipeline on Kafka windows
(``refusal-audit worker``, ``refusal_audit.streaming.worker``) and the detectors it runs on a
timer (``refusal_audit.streaming.worker_detectors``), the warehouse sink of the result topics
(``refusal-audit sink``), the embedded store's owner channel and replay. The Kafka primitives
it uses live in ``streams/``, the warehouse in ``warehouse/``.
"""
