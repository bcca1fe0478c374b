"""The stop-word list read without importing scikit-learn is scikit-learn's list."""

from __future__ import annotations

import subprocess
import sys


def test_the_list_is_scikit_learns_and_reading_it_does_not_import_scikit_learn() -> None:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    from processors.stopwords import english_stop_words

    assert english_stop_words() == ENGLISH_STOP_WORDS and len(english_stop_words()) > 300
    # in a fresh interpreter: the worker's import path (local engine) leaves sklearn unloaded
    code = (
        "import sys; import processors.engines.local, processors.refusal_model, "
        "processors.category_model, processors.agreement; "
        "print(sorted(m for m in ('sklearn', 'pandas', 'statsmodels') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
