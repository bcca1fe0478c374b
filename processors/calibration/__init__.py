"""Refusal-style calibration (issue 13): the pure logic.

- :mod:`.spectrum`: the tone spectrum (default, or a bundle's ``calibration-spectrum`` block);
- :mod:`.base`: the variant-engine interface, the spectrum coverage check;
- :mod:`.local_variants`: the offline ``local`` engine (vetted templates);
- :mod:`.variant_harness`: the ``openai`` engine's prompt values, schema and answer checks
  (prompt ``prompts/calibrate_v1.md``; its calls are ``inference.variants``);
- :mod:`.regression`: the safety regression check every variant goes through;
- :mod:`.run`: one calibration run (engine, checks, the run record);
- :mod:`.ab` (the report), :mod:`.ab_aggregate` (events to per-arm figures), :mod:`.ab_stats`
  (the tests) and :mod:`.ab_sim`: the A/B analysis and simulated event streams.

Nothing here does I/O; the command line, the team's own suite (a subprocess) and the files
live in ``refusal_audit.calibration.runs``, the LLM calls in ``inference.variants``.
"""
