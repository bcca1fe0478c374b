"""The drift detectors' reads as they were before issue 27 (``window_counts`` filtering the
parameterized views of migrations 0008/0009/0013 over the whole store): the reference
``tests/test_drift_windows.py`` compares ``warehouse.drift_windows`` with, and what a store
migrated up to 0008 (no ``event_arrivals`` yet) can still answer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import pytest

from warehouse import drift_windows
from warehouse.drift_assessments import view_call

_IN_RANGE = """WHERE window_start >= {start:DateTime64(3, 'UTC')}
      AND window_start < {end:DateTime64(3, 'UTC')}"""


def view_rows(database: str, window_seconds: int, grace_seconds: int) -> str:
    """``drift_assessments``' rows of the windows in ``[start, end)`` (the old read)."""
    return f"(SELECT * FROM {view_call(database, window_seconds, grace_seconds)} {_IN_RANGE})"


def view_reviews(database: str, window_seconds: int, grace_seconds: int) -> str:
    """``drift_reviews``' rows of the windows in ``[start, end)`` (the old read)."""
    view = view_call(database, window_seconds, grace_seconds, "drift_reviews")
    return f"(SELECT * FROM {view} {_IN_RANGE})"


@contextmanager
def from_views(monkeypatch: pytest.MonkeyPatch, database: str) -> Iterator[None]:
    """Within the block, ``window_counts`` on ``database`` reads the whole-store views (the
    reference)."""
    with monkeypatch.context() as m:
        m.setattr(drift_windows, "rows_sql", partial(view_rows, database))
        m.setattr(drift_windows, "reviews_sql", partial(view_reviews, database))
        yield
