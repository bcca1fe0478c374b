"""The LLM engines' network and the trained models' files: the I/O layer beside ``streams/``
(Kafka) and ``warehouse/`` (ClickHouse), issue 26.

``processors/`` keeps what is pure: prompts, batch plans, answer checks, scoring with loaded
arrays. This package does the I/O around it:

- :mod:`~inference.chat`: one chat completion over the ``openai`` SDK (concurrency limit,
  deadlines, the context-length 400) and ``JsonCaller``, the checked call with one retry;
- :mod:`~inference.audit_engine`: the ``openai`` audit engine (its calls, splits, retries and
  budgets over ``processors.engines.llm_audit``);
- :mod:`~inference.prompted`, :mod:`~inference.questions`, :mod:`~inference.judge`,
  :mod:`~inference.variants`: the clarification question engine, the circumvention judge and
  the calibration variant engine (their calls over the prompts and checks of
  ``processors.clarification`` and ``processors.calibration``);
- :mod:`~inference.discovery`: asking an OpenAI-compatible server its kind and context;
- :mod:`~inference.model_files`: reading and writing the trained models' ``.npz``/``.json``
  artifacts (the models themselves, and scoring, are ``processors/``).

It may import ``processors/``, ``prompts/`` and ``schemas/``; never ``streams/``,
``warehouse/`` or ``refusal_audit/``.
"""
