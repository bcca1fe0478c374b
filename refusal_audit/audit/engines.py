"""Transitional alias of :mod:`refusal_audit.audit.engine_setup` (issue 26 renamed this module:
``processors/engines/`` holds the engines, ``engine_setup`` chooses and builds one), kept only
because ``refusal_audit/streaming/worker.py`` and ``transactional_worker.py`` still import
``close_engine`` from here and another branch owns them. Delete once they import
``engine_setup``.
"""

from __future__ import annotations

from refusal_audit.audit.engine_setup import close_engine

__all__ = ["close_engine"]
