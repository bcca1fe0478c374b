"""What pure logic needs of a sentence encoder: texts in, unit vectors out.

Pure logic (the cascade, request-side judgments) takes a :class:`TextEncoder` by injection
and never imports onnxruntime; the application layer builds the real one
(``refusal_audit.encoders.OnnxEncoder``) and tests may pass any object of this shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
from numpy.typing import NDArray


class TextEncoder(Protocol):
    """A sentence encoder.

    ``name`` identifies the model (it belongs in any version string derived from its
    output); ``dim`` is the embedding dimension.
    """

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> NDArray[np.float32]:
        """Embed ``texts``: float32 array of shape ``(len(texts), dim)``, each row L2-norm 1
        (so a dot product is the cosine); ``(0, dim)`` for no texts. ``batch_size`` bounds
        the texts per model run; the vector of a text must not depend on it."""
        ...


def cosine_rows(a: NDArray[np.float32], b: NDArray[np.float32]) -> NDArray[np.float32]:
    """Row-wise cosine of two ``(n, dim)`` arrays of unit vectors: shape ``(n,)``.

    Raises ``ValueError`` when the shapes differ.
    """
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    cosines: NDArray[np.float32] = np.einsum("ij,ij->i", a, b).astype(np.float32)
    return cosines
