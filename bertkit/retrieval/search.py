"""Exact top-k search by cosine in bounded memory: blocks of queries against blocks of the
corpus, a running top-k per query merged block by block.

The whole query x corpus score matrix is never held: at most `query_block x passage_block`
scores at once (1,024 x 16,384 float32: 64 MB), plus the running best `k` of each query of the
block. 100,000 queries against 100,000 passages thus take the vectors' memory and little more.
The result is the top-k of the full matrix (the same passages, best first); which of two
passages of exactly equal score comes first is not defined, as in `torch.topk`.

The vectors come from `encode`, a chunk of texts at a time (a model's inputs for 100,000 texts
at once would outweigh their vectors), and are compared at unit length: cosines.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from bertkit.progress import Progress
from bertkit.runtime import release_freed_memory
from bertkit.text.tokenizer import cut_warnings_summed

QUERY_BLOCK = 1024
"""Queries scored at once."""
PASSAGE_BLOCK = 16384
"""Passages scored at once against a block of queries."""
ENCODE_CHUNK = 2048
"""Texts tokenized and encoded by one call of the model: its inputs for all texts at once
would take more memory than their vectors."""


def unit_rows(vectors: np.ndarray | torch.Tensor) -> torch.Tensor:
    """The rows as float32 at unit length (a zero row stays zero): their dot products are
    cosines."""
    t = torch.as_tensor(np.asarray(vectors) if not torch.is_tensor(vectors) else vectors)
    return torch.nn.functional.normalize(t.float(), dim=1)


def encode(embedder, texts: Sequence[str], *, batch_size: int = 64, progress: bool = True,
           what: str = "encode") -> torch.Tensor:
    """Unit vectors `[N, D]` of the texts by a sentence model (anything with
    sentence-transformers' `encode`), `ENCODE_CHUNK` texts a call, with one progress line."""
    bar = Progress(what, len(texts), "texts", enabled=progress)
    parts = []
    with cut_warnings_summed(len(texts)):
        for start in range(0, len(texts), ENCODE_CHUNK):
            chunk = list(texts[start:start + ENCODE_CHUNK])
            parts.append(unit_rows(embedder.encode(chunk, batch_size=batch_size)))
            release_freed_memory()  # else the heap grows with every chunk (runtime's note)
            bar.update(add=len(chunk))
    bar.finish()
    return torch.cat(parts) if parts else torch.empty(0, 0)


def _merge(best: tuple[torch.Tensor, torch.Tensor], block: tuple[torch.Tensor, torch.Tensor],
           k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The best `k` of a running top-k and a block's, best first."""
    scores = torch.cat([best[0], block[0]], dim=1)
    indices = torch.cat([best[1], block[1]], dim=1)
    top, where = scores.topk(min(k, scores.shape[1]), dim=1)
    return top, indices.gather(1, where)


def top_k(queries: torch.Tensor, passages: torch.Tensor, k: int, *,
          rows: torch.Tensor | None = None, query_block: int = QUERY_BLOCK,
          passage_block: int = PASSAGE_BLOCK, done: Callable[[int], None] | None = None
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores, indices), each `[Q, min(k, N)]`: the `k` passages of highest dot product with
    each query, best first, for query vectors `[Q, D]` and passage vectors `[N, D]` (unit
    rows: cosines). `rows`: only these queries (positions in `queries`), in this order,
    gathered a block at a time. `done(n)` is told after each block of n queries."""
    if queries.dim() != 2 or passages.dim() != 2 or queries.shape[1] != passages.shape[1]:
        raise ValueError(f"expected [Q, D] and [N, D] vectors, got {tuple(queries.shape)} and "
                         f"{tuple(passages.shape)}")
    if k < 1 or query_block < 1 or passage_block < 1:
        raise ValueError(f"k and the blocks must be at least 1, got {k}, {query_block}, "
                         f"{passage_block}")
    k = min(k, len(passages))
    count = len(queries) if rows is None else len(rows)
    scores = torch.empty(count, k, dtype=passages.dtype)
    indices = torch.empty(count, k, dtype=torch.long)
    for start in range(0, count, query_block):
        block = queries[start:start + query_block] if rows is None else \
            queries[rows[start:start + query_block]]
        best = (torch.empty(len(block), 0, dtype=passages.dtype),
                torch.empty(len(block), 0, dtype=torch.long))
        for first in range(0, len(passages), passage_block):
            part = block @ passages[first:first + passage_block].T
            top, where = part.topk(min(k, part.shape[1]), dim=1)
            best = _merge(best, (top, where + first), k)
        scores[start:start + len(block)], indices[start:start + len(block)] = best
        if done is not None:
            done(len(block))
    return scores, indices


def excluded_rows(excluded: list[set[int]] | list[list[int]]) -> torch.Tensor:
    """`[Q, L]` the passages each query leaves out, ascending, padded with a position no
    passage has (at least one column): what `leave_out` takes."""
    width = max(1, max(map(len, excluded), default=0))
    out = torch.full((len(excluded), width), torch.iinfo(torch.long).max, dtype=torch.long)
    for q, found in enumerate(excluded):
        if found:
            out[q, :len(found)] = torch.tensor(sorted(found), dtype=torch.long)
    return out


def leave_out(indices: torch.Tensor, scores: torch.Tensor, excluded: torch.Tensor,
              width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's first `width` passages (`indices` `[Q, K]`, best first, with their `scores`)
    that are not among the row's `excluded` (`excluded_rows`), padded with -1 and -inf."""
    at = torch.searchsorted(excluded, indices).clamp(max=excluded.shape[1] - 1)
    keep = excluded.gather(1, at) != indices
    place = keep.cumsum(1) - 1
    keep &= place < width
    rows = torch.arange(len(indices)).unsqueeze(1).expand_as(indices)
    out = torch.full((len(indices), width), -1, dtype=torch.long)
    values = torch.full((len(indices), width), -torch.inf, dtype=scores.dtype)
    out[rows[keep], place[keep]] = indices[keep]
    values[rows[keep], place[keep]] = scores[keep]
    return out, values


__all__ = ["ENCODE_CHUNK", "PASSAGE_BLOCK", "QUERY_BLOCK", "encode", "excluded_rows", "leave_out",
           "top_k", "unit_rows"]
