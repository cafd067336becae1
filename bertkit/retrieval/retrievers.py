"""The first-stage retrievers of a corpus, each the same three steps: `index` the passages once,
`top_k` each query's best passages, `save` into (and `load_retriever` from) an index directory.

- dense: a sentence model's unit vectors, kept in memory as one float32 matrix; a query's
  passages are found exactly, by cosine (`bertkit.retrieval.search.top_k`). Exact search over
  100,000 passages of 384 dimensions is one matrix-vector product of 38 million multiply-adds:
  milliseconds, no approximate index needed at that size;
- sparse: a SPLADE model's vectors over the vocabulary, the corpus one scipy CSC matrix
  `[passages, vocabulary]` (an inverted index: column t lists the passages with term t and
  their weights); a query's scores are the dot products, the columns of its own terms only
  times their weights;
- BM25: bm25s' index (its own save and load).

A retriever's `top_k` takes a block of query texts and gives (scores, indices) `[Q, min(k, N)]`,
best first, torch tensors.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np
import torch

from bertkit.files import UserError
from bertkit.progress import Progress
from bertkit.retrieval.bm25 import Bm25
from bertkit.retrieval.search import encode, top_k, unit_rows
from bertkit.text.tokenizer import cut_warnings_summed

SPARSE_CHUNK = 512
"""Passages a SPLADE model encodes at once before their vectors are made sparse (dense, 512
vectors over a 30,522-token vocabulary take 62 MB)."""
SPARSE_QUERY_BLOCK = 256
"""Queries scored at once against the sparse corpus (their dense scores: 256 x passages)."""


class Retriever(Protocol):
    kind: str
    """What the index file calls it: dense, sparse or bm25."""
    model: str | None
    """The model's directory (None for BM25)."""

    def index(self, texts: Sequence[str], *, batch_size: int = 64,
              progress: bool = True) -> None: ...

    def top_k(self, queries: Sequence[str], k: int, *,
              done: Callable[[int], None] | None = None) -> tuple[torch.Tensor, torch.Tensor]: ...

    def save(self, directory: Path, stem: str) -> dict: ...


def _blocks(queries: Sequence[str], size: int):
    for start in range(0, len(queries), size):
        yield list(queries[start:start + size])


class DenseRetriever:
    """Exact cosine search over a sentence model's vectors (anything with
    sentence-transformers' `encode`)."""

    kind = "dense"

    def __init__(self, embedder, model: str | None = None,
                 vectors: torch.Tensor | None = None):
        self.embedder, self.model, self.vectors = embedder, model, vectors

    def index(self, texts, *, batch_size=64, progress=True):
        self.vectors = encode(self.embedder, texts, batch_size=batch_size, progress=progress,
                              what="passages")

    def top_k(self, queries, k, *, done=None):
        if len(queries) == 1:  # one query: no chunking, no progress, no blocks
            with torch.inference_mode():
                q = unit_rows(self.embedder.encode(list(queries)))
                scores, indices = (q @ self.vectors.T).topk(min(k, len(self.vectors)), dim=1)
            if done is not None:
                done(1)
            return scores, indices
        q = encode(self.embedder, queries, progress=False)
        return top_k(q, self.vectors, k, done=done)

    def save(self, directory, stem):
        np.save(directory / f"{stem}.npy", self.vectors.numpy())
        return {"kind": self.kind, "model": self.model, "file": f"{stem}.npy"}


class SparseRetriever:
    """Dot products of a SPLADE model's vectors (`bertkit.embeddings.sparse_encoder`) over an
    inverted index."""

    kind = "sparse"

    def __init__(self, encoder, model: str | None = None, matrix=None,
                 max_terms: int | None = None):
        self.encoder, self.model, self.matrix = encoder, model, matrix
        self.max_terms = max_terms
        """Each vector (passage or query) keeps its heaviest this many terms; None: all. A
        trained model's vectors are sparse already; an untrained head weighs every term."""

    def _vectors(self, texts: Sequence[str], batch_size: int = 32):
        import scipy.sparse

        dense = self.encoder.encode(list(texts), batch_size=batch_size,
                                    convert_to_sparse_tensor=False)
        if self.max_terms is not None and self.max_terms < dense.shape[1]:
            top = dense.topk(self.max_terms, dim=1)
            dense = torch.zeros_like(dense).scatter_(1, top.indices, top.values)
        return scipy.sparse.csr_matrix(dense.numpy().astype(np.float32))

    def index(self, texts, *, batch_size=64, progress=True):
        import scipy.sparse

        bar = Progress("passages", len(texts), "texts", enabled=progress)
        parts = []
        with cut_warnings_summed(len(texts)):
            for chunk in _blocks(texts, SPARSE_CHUNK):
                parts.append(self._vectors(chunk, batch_size))
                bar.update(add=len(chunk))
        bar.finish()
        self.matrix = scipy.sparse.vstack(parts, format="csc")

    def top_k(self, queries, k, *, done=None):
        k = min(k, self.matrix.shape[0])
        out_scores, out_indices = [], []
        for block in _blocks(queries, SPARSE_QUERY_BLOCK):
            q = self._vectors(block)
            terms = np.unique(q.indices)  # the columns any query of the block uses
            scores = self.matrix[:, terms] @ q[:, terms].T.toarray()  # [N, B], dense
            top = torch.from_numpy(np.ascontiguousarray(scores.T, dtype=np.float32)).topk(k, dim=1)
            out_scores.append(top.values)
            out_indices.append(top.indices)
            if done is not None:
                done(len(block))
        return torch.cat(out_scores), torch.cat(out_indices)

    def save(self, directory, stem):
        import scipy.sparse

        scipy.sparse.save_npz(directory / f"{stem}.npz", self.matrix)
        return {"kind": self.kind, "model": self.model, "file": f"{stem}.npz",
                "max_terms": self.max_terms}


class Bm25Retriever:
    """BM25 (bm25s)."""

    kind = "bm25"
    model = None

    def __init__(self, bm25: Bm25 | None = None):
        self.bm25 = bm25

    def index(self, texts, *, batch_size=64, progress=True):
        self.bm25 = Bm25(texts)

    def top_k(self, queries, k, *, done=None):
        scores, indices = self.bm25.top_k(queries, k, done=done)
        return torch.from_numpy(scores), torch.from_numpy(indices)

    def save(self, directory, stem):
        self.bm25.save(directory / stem)
        return {"kind": self.kind, "model": None, "file": stem}


def open_model(path: str | Path, device: str | torch.device = "cpu",
               precision: str = "fp32", max_terms: int | None = None
               ) -> DenseRetriever | SparseRetriever:
    """The retriever of a model directory, not yet indexing anything: a SPLADE model's sparse
    one (its vectors cut to `max_terms`), a sentence model's (any model `embed` reads) dense
    one; either runs in `precision` (fp32, or bf16 autocast)."""
    from bertkit.model.kind import EMBEDDER_KINDS, ModelKind, model_kind

    kind = model_kind(path)
    if kind is ModelKind.SPARSE:
        from bertkit.embeddings.sparse_encoder import SparseEncoder

        return SparseRetriever(SparseEncoder.load(path, device=device, precision=precision),
                               str(path),
                               max_terms=max_terms)
    if kind in EMBEDDER_KINDS:
        from bertkit.embeddings.embedder import Embedder

        return DenseRetriever(Embedder.load(path, device=device, precision=precision),
                              str(path))
    raise UserError(f"{path}: {kind.value}, not a sentence model or a sparse encoder")


def load_retriever(directory: Path, entry: dict, passages: int,
                   device: str | torch.device = "cpu") -> Retriever:
    """A retriever an index directory's `entry` describes, its model loaded again to encode
    queries."""
    path = directory / str(entry.get("file"))
    kind = entry.get("kind")
    if kind == Bm25Retriever.kind:
        return Bm25Retriever(Bm25.load(path, passages))
    found = open_model(entry["model"], device, max_terms=entry.get("max_terms"))
    if found.kind != kind:
        raise UserError(f"{directory}: the index holds {kind} vectors of {entry['model']}, "
                        f"which is now a {found.kind} model")
    if kind == DenseRetriever.kind:
        found.vectors = torch.from_numpy(np.load(path, allow_pickle=False))
    else:
        import scipy.sparse

        found.matrix = scipy.sparse.load_npz(path).tocsc()
    return found


__all__ = ["Bm25Retriever", "DenseRetriever", "Retriever", "SparseRetriever",
           "load_retriever", "open_model"]
