"""Transitional alias of :mod:`processors.drift_detection` (issue 26 renamed this module and
split it into that package), kept only because ``streams/baselines.py`` still imports
``WindowCounts``, ``counts_from_dict`` and ``counts_to_dict`` from here and another branch owns
that file. Import from ``processors.drift_detection``; delete this module once
``streams/baselines.py`` does.
"""

from __future__ import annotations

from processors.drift_detection.counts import WindowCounts, counts_from_dict, counts_to_dict

__all__ = ["WindowCounts", "counts_from_dict", "counts_to_dict"]
