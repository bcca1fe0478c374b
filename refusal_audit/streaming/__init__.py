"""The streaming room: the workers that run the shared pipeline on Kafka windows
(``refusal-audit worker``: by default the transactional worker,
``refusal_audit.streaming.transactional_worker``, results to topics in Kafka transactions;
``--outputs warehouse`` the faust worker, ``refusal_audit.streaming.worker``, with the
detectors it runs on a timer, ``worker_detectors``), the warehouse sink of the result topics
(``refusal-audit sink``, where the detectors run on the default path), the embedded store's
owner channel and replay. The Kafka primitives it uses live in ``streams/``, the warehouse in
``warehouse/``.
"""
