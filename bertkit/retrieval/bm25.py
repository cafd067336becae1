"""BM25 retrieval with the `bm25s` library (the `retrieval` extra): a corpus indexed once, the
top-k passages of each query retrieved a block of queries at a time, with progress.

Texts are tokenized as bm25s does by default: lowercased words of two or more letters or
digits, English stop words removed, no stemming. Scoring is bm25s' default (Lucene's BM25,
k1 = 1.5, b = 0.75).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from bertkit.files import UserError, install_extra

QUERY_BLOCK = 1000
"""Queries retrieved by one call of bm25s (progress is told between calls)."""


def _bm25s():
    try:
        import bm25s
    except ImportError:
        raise UserError(f"--bm25 needs the bm25s library: {install_extra('retrieval')}") \
            from None
    return bm25s


def tokenize(texts: Sequence[str]):
    """bm25s' tokens of the texts (`tokenize` with its defaults: English stop words)."""
    return _bm25s().tokenize(list(texts), stopwords="en", show_progress=False)


class Bm25:
    """A bm25s index of a corpus of passages."""

    def __init__(self, passages: Sequence[str]):
        if not passages:
            raise ValueError("BM25 needs at least one passage")
        self.retriever = _bm25s().BM25()
        self.retriever.index(tokenize(passages), show_progress=False)
        self.size = len(passages)

    def save(self, path: str | Path) -> None:
        """Write the index into a directory, as bm25s saves one."""
        self.retriever.save(str(path), show_progress=False)

    @classmethod
    def load(cls, path: str | Path, size: int) -> "Bm25":
        """The index `save` wrote into `path`, of `size` passages."""
        self = cls.__new__(cls)  # the index is read, not built from passages
        self.retriever = _bm25s().BM25.load(str(path), show_progress=False)
        self.size = size
        return self

    def top_k(self, queries: Sequence[str], k: int, *, block: int = QUERY_BLOCK,
              done: Callable[[int], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(scores, indices), each `[Q, min(k, N)]`: the passages of highest BM25 score for
        each query, best first, as bm25s' `retrieve` gives them. `done(n)` is told after each
        block of n queries."""
        k = min(k, self.size)
        scores = np.empty((len(queries), k), dtype=np.float32)
        indices = np.empty((len(queries), k), dtype=np.int64)
        for start in range(0, len(queries), block):
            part = list(queries[start:start + block])
            found, top = self.retriever.retrieve(tokenize(part), k=k, show_progress=False)
            indices[start:start + len(part)], scores[start:start + len(part)] = found, top
            if done is not None:
                done(len(part))
        return scores, indices


__all__ = ["Bm25", "tokenize"]
