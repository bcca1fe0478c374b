"""The Kafka side: the client factory (``clients``), the one group-consumer core
(``group_consumer``) and its three readers (the service consumers' ``consumer_loop``, the
sink's ``blocks``, the worker's ``transactional`` with ``txn_producer``), topics, the producer
(``TopicWriter``), the faust worker's ``result_writer``, the dead-letter topic's framing
(``dead_letters``), static group membership, logs, metrics, tailing and reading alert topics.

Nothing here imports the application (``refusal_audit``) or the warehouse: the worker that
joins them to the shared pipeline is ``refusal_audit.streaming`` (docs/architecture.md, Layers).
"""
