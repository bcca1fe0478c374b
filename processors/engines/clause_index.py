"""The ``local`` engine's per-bundle clause index (step 1 of ``processors.engines.local``):
BM25 over each clause's title and text, with the clause groups the engine reads."""

from __future__ import annotations

import numpy as np
from rank_bm25 import BM25Okapi

from processors.engines.local_text import tokenize
from schemas.policy import Clause, PolicyBundle

BM25_K1 = 1.5
"""BM25 term-frequency saturation (the rank_bm25 default)."""
BM25_B = 0.5
"""BM25 length normalisation, below the 0.75 default: clauses are keyword enumerations
of very different lengths, and a long list should not bury its single matching term."""


class ClauseIndex:
    """BM25 index of one bundle's clauses, with the clause groups the engine uses.

    ``scores(tokens)`` returns a numpy float array (one BM25 score per clause, in
    ``clauses`` order; 0 for an empty query).
    """

    def __init__(self, bundle: PolicyBundle) -> None:
        self.clauses: tuple[Clause, ...] = bundle.clauses
        # Clause.text starts with the title, so the title is counted twice: a mild title boost.
        corpus = [tokenize(f"{c.title} {c.text}") or ["_"] for c in self.clauses]
        self._bm25 = BM25Okapi(corpus, k1=BM25_K1, b=BM25_B)
        self._vocabulary = frozenset(self._bm25.idf)
        self._term_scores: dict[str, np.ndarray] = {}
        self.allow = np.array([c.stance == "allow" for c in self.clauses])
        self.prohibit = np.array([c.stance == "prohibit" for c in self.clauses])
        self.capability = np.array([c.harm_area == "capability_boundary" for c in self.clauses])
        self.clarification = np.array([c.harm_area == "clarification_needed" for c in self.clauses])
        # each group's mask and positions, for :meth:`best`, keyed by the mask's id (the
        # entry keeps the mask alive, so the id cannot be another array's)
        self._positions: dict[int, tuple[np.ndarray, np.ndarray]] = {
            id(mask): (mask, np.flatnonzero(mask))
            for mask in (self.allow, self.prohibit, self.capability, self.clarification)
        }

    def scores(self, tokens: list[str]) -> np.ndarray:
        """BM25 score of every clause for the query ``tokens``.

        BM25 is a sum over query tokens, so each distinct term's score vector (from
        ``BM25Okapi.get_scores([term])``) is computed once and cached; the result equals
        ``BM25Okapi.get_scores(tokens)``.
        """
        total = np.zeros(len(self.clauses))
        for term in tokens:
            if term not in self._vocabulary:
                continue  # scores 0 for every clause; not cached, so the cache stays bounded
            vec = self._term_scores.get(term)
            if vec is None:
                vec = np.asarray(self._bm25.get_scores([term]), dtype=float)
                self._term_scores[term] = vec
            total += vec
        return total

    def best(self, scores: np.ndarray, mask: np.ndarray) -> tuple[Clause | None, float]:
        """The highest-scoring clause within ``mask`` (a boolean array over ``clauses``; first
        in document order on ties), and its score; ``(None, 0.0)`` for an empty mask.

        For this index's own groups (``allow``, ``prohibit``, ``capability``,
        ``clarification``) the argmax runs over the group's positions, computed once: the
        same clause as the argmax of the scores with every other clause set to -inf (BM25
        scores are finite), at about a third of the cost (issue 27)."""
        entry = self._positions.get(id(mask))
        positions = entry[1] if entry is not None and entry[0] is mask else np.flatnonzero(mask)
        if not len(positions):
            return None, 0.0
        i = int(positions[int(np.argmax(scores[positions]))])
        return self.clauses[i], float(scores[i])
