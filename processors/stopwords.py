"""scikit-learn's English stop-word list without importing scikit-learn.

``sklearn.feature_extraction.text.ENGLISH_STOP_WORDS`` is a frozenset defined in a module of
its own (``sklearn/feature_extraction/_stop_words.py``), but importing it runs scikit-learn's
package initialisation, which loads scipy, joblib and pandas: about 80 MB of RSS in a
streaming worker that only needs the words. :func:`english_stop_words` executes that one file
from the installed package (no import of the package) and falls back to the regular import
when the file is not where scikit-learn keeps it.
"""

from __future__ import annotations

import importlib.util
import runpy
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def english_stop_words() -> frozenset[str]:
    """scikit-learn's ``ENGLISH_STOP_WORDS`` (318 lower-case words)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is not None and spec.origin is not None:
        path = Path(spec.origin).parent / "feature_extraction" / "_stop_words.py"
        if path.is_file():
            words = runpy.run_path(str(path)).get("ENGLISH_STOP_WORDS")
            if isinstance(words, frozenset) and words:
                return frozenset(str(w) for w in words)
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)
