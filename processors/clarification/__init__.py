"""Clarify after an ambiguous refusal (issue 12): the pure logic, no I/O of its own.

- :mod:`~processors.clarification.routing`: classify a refusal with an audit engine and map
  its top-level category to a ``Route``;
- :mod:`~processors.clarification.ambiguity`: what is ambiguous about a request;
- :mod:`~processors.clarification.circumvention`: the deterministic circumvention check;
- :mod:`~processors.clarification.judge`: the optional LLM judge after it (its prompt,
  schema and checks; its calls are ``inference.judge``);
- :mod:`~processors.clarification.privacy`: the service's inputs redacted before any use;
- :mod:`~processors.clarification.local_questions` / :mod:`~.question_harness`: the question
  engines (vetted templates; an LLM's prompt values and answer checks, its calls and one
  retry in ``inference.questions``);
- :mod:`~processors.clarification.conversation`: the two-round state machine;
- :mod:`~processors.clarification.flow`: opening a conversation (classify, route, ask, check,
  judge).
- :mod:`~processors.clarification.verdict_sets`: reviewers' verdicts on a conversation as a
  labelled question set for the circumvention model.
"""
