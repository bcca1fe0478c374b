"""The streaming worker (``refusal-audit worker``): the faust app that runs the shared
pipeline on Kafka windows (``refusal_audit.worker.worker``) and the detectors it runs on a
timer (``refusal_audit.worker.detectors``). The Kafka primitives it uses live in
``streams/``, the warehouse in ``warehouse/``.
"""
