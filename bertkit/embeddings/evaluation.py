"""The figures an embedding user expects: STS correlations and retrieval ranks.

- STS (semantic textual similarity): the Spearman and Pearson correlations of the cosines of
  scored pairs with their gold scores (`sts_figures`), the figure sentence-transformers'
  EmbeddingSimilarityEvaluator reports and papers quote (Spearman, times 100).
- Retrieval: queries, a corpus of passages and which passages are relevant to each query
  (binary relevance); every passage ranked by its similarity to the query (ties: the earlier
  passage first). MRR@10, recall@1, recall@10 and nDCG@10, averaged over the queries, as
  sentence-transformers' InformationRetrievalEvaluator computes them (`retrieval_figures` from
  a similarity matrix, `search_figures` from vectors).
- The metrics themselves, one function each over ranked relevance grades (`reciprocal_ranks`,
  `recalls`, `ndcgs` with graded gains, `average_precisions`): the figures above and the
  BEIR-style evaluation of `bertkit.retrieval.evaluation` both compute through them.

Every function takes `dim` for a Matryoshka model: the vectors cut to their first `dim`
numbers and renormalised (`bertkit.embeddings.matryoshka.prefix`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Sequence

import torch

from bertkit.embeddings.losses import cosine_matrix
from bertkit.embeddings.matryoshka import prefix


def ranks(values: torch.Tensor) -> torch.Tensor:
    """The rank of each value from 1 (float64), tied values sharing their mean rank, as
    `scipy.stats.rankdata` does."""
    values = values.double().flatten()
    order = torch.argsort(values, stable=True)
    sorted_values = values[order]
    # runs of equal values: each gets the mean of the ranks it spans
    starts = torch.ones_like(sorted_values, dtype=torch.bool)
    starts[1:] = sorted_values[1:] != sorted_values[:-1]
    run = torch.cumsum(starts.long(), 0) - 1
    positions = torch.arange(1, len(values) + 1, dtype=torch.float64, device=values.device)
    totals = torch.zeros(int(run[-1]) + 1, dtype=torch.float64,
                         device=values.device).index_add_(0, run, positions)
    counts = torch.zeros_like(totals).index_add_(0, run, torch.ones_like(positions))
    out = torch.empty_like(values)
    out[order] = (totals / counts)[run]
    return out


def pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    """Pearson's correlation of two equally long vectors (computed in float64); nan when either
    is constant."""
    x, y = x.double().flatten(), y.double().flatten()
    if x.shape != y.shape or len(x) < 2:
        raise ValueError(f"need two equally long vectors of 2 or more values, got {len(x)} "
                         f"and {len(y)}")
    x, y = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float((x * x).sum()) * float((y * y).sum()))
    return float((x * y).sum()) / denominator if denominator > 0 else math.nan


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    """Spearman's rank correlation: Pearson's of the ranks (ties at their mean rank)."""
    return pearson(ranks(x), ranks(y))


@dataclass
class StsFigures:
    """How well the cosines of scored pairs follow their gold scores."""
    spearman: float
    """Spearman's rank correlation of cosine and gold score (the usual STS figure)."""
    pearson: float
    """Pearson's correlation of cosine and gold score."""
    pairs: int
    """Pairs scored."""


def sts_figures(a: torch.Tensor, b: torch.Tensor, gold: torch.Tensor, *,
                dim: int | None = None) -> StsFigures:
    """The correlations of `cos(a_i, b_i)` with `gold[i]`; `a` and `b` are `[N, D]` vectors of
    the pairs' two texts, `dim` a Matryoshka prefix to evaluate (None: the whole vector)."""
    if a.shape != b.shape or a.dim() != 2 or gold.shape != (a.shape[0],):
        raise ValueError(f"expected a and b [N, D] alike and gold [N], got {tuple(a.shape)}, "
                         f"{tuple(b.shape)} and {tuple(gold.shape)}")
    cosines = (prefix(a.double(), dim) * prefix(b.double(), dim)).sum(-1)
    return StsFigures(spearman=spearman(cosines, gold), pearson=pearson(cosines, gold),
                      pairs=len(gold))


@dataclass
class RetrievalFigures:
    """Ranking figures averaged over queries (binary relevance)."""
    mrr: float
    """Mean reciprocal rank of the first relevant passage within the top k (0 beyond)."""
    recall_at_1: float
    """The share of a query's relevant passages ranked first."""
    recall: float
    """The share of a query's relevant passages within the top k."""
    ndcg: float
    """Normalised discounted cumulative gain at k: hits at rank r count 1/log2(r + 1), over the
    best possible (all relevant passages first)."""
    k: int
    """The cut-off of `mrr`, `recall` and `ndcg` (10 by custom)."""
    queries: int
    """Queries averaged over."""

    def as_dict(self) -> dict[str, float]:
        """The figures under their usual names: `mrr@10`, `recall@1`, `recall@10`, `ndcg@10`."""
        return {f"mrr@{self.k}": self.mrr, "recall@1": self.recall_at_1,
                f"recall@{self.k}": self.recall, f"ndcg@{self.k}": self.ndcg}


def _relevance(relevant: Sequence[Collection[int]], passages: int,
               device: torch.device) -> torch.Tensor:
    mask = torch.zeros(len(relevant), passages, dtype=torch.bool, device=device)
    for q, indices in enumerate(relevant):
        indices = list(indices)
        if not indices:
            raise ValueError(f"query {q} has no relevant passage")
        if min(indices) < 0 or max(indices) >= passages:
            raise ValueError(f"query {q}: a relevant passage outside 0..{passages - 1}")
        mask[q, indices] = True
    return mask


def _discounts(width: int, device: torch.device) -> torch.Tensor:
    """1/log2(rank + 1) for ranks 1..width: what a hit at each rank is worth in DCG."""
    return 1 / torch.log2(torch.arange(2, width + 2, dtype=torch.float64, device=device))


def reciprocal_ranks(gains: torch.Tensor, k: int) -> torch.Tensor:
    """Each query's 1/rank of its first relevant passage within the top `k` (0 when there is
    none). `gains` `[Q, L]`: the relevance grade of the passage at each rank, best first (0: not
    relevant), as every metric here takes them."""
    hits = gains[:, :k] > 0
    first = hits.double().argmax(1).double() + 1  # argmax: the first of equal maxima
    first = torch.where(hits.any(1), first, math.inf)
    return 1 / first


def recalls(gains: torch.Tensor, relevant: torch.Tensor, k: int) -> torch.Tensor:
    """Each query's share of its `relevant[q]` relevant passages found within the top `k`."""
    return (gains[:, :k] > 0).sum(1).double() / relevant.double()


def ndcgs(gains: torch.Tensor, ideal: torch.Tensor, k: int) -> torch.Tensor:
    """Each query's nDCG@k: the gains of its top `k`, a hit at rank r worth its grade over
    log2(r + 1), over the same sum of its best possible ranking, `ideal[q]` (its grades sorted
    best first, zero-padded), as trec_eval's ndcg_cut computes it (graded gains, not
    2^grade - 1). With grades of 1 it is the binary nDCG of sentence-transformers."""
    top, best = gains[:, :k].double(), ideal[:, :k].double()
    dcg = (top * _discounts(top.shape[1], top.device)).sum(1)
    return dcg / (best * _discounts(best.shape[1], best.device)).sum(1)


def average_precisions(gains: torch.Tensor, relevant: torch.Tensor, k: int) -> torch.Tensor:
    """Each query's average precision within the top `k`: the precision at the rank of each
    relevant passage found, summed over its `relevant[q]` relevant passages (trec_eval's map on a
    ranking cut at k)."""
    hits = (gains[:, :k] > 0).double()
    rank = torch.arange(1, hits.shape[1] + 1, dtype=torch.float64, device=hits.device)
    return (hits * hits.cumsum(1) / rank).sum(1) / relevant.double()


def _per_query(similarity: torch.Tensor, relevant: torch.Tensor, k: int) -> torch.Tensor:
    """`[Q, 4]`: each query's reciprocal rank, recall@1, recall@k and nDCG@k."""
    order = torch.sort(similarity.double(), dim=1, descending=True, stable=True).indices
    hits = relevant.gather(1, order[:, :k]).double()  # [Q, k]
    total = relevant.sum(1)
    ideal = (torch.arange(hits.shape[1], device=hits.device) < total[:, None]).double()
    return torch.stack([reciprocal_ranks(hits, k), recalls(hits, total, 1),
                        recalls(hits, total, k), ndcgs(hits, ideal, k)], dim=1)


def retrieval_figures(similarity: torch.Tensor, relevant: Sequence[Collection[int]], *,
                      k: int = 10) -> RetrievalFigures:
    """MRR@k, recall@1, recall@k and nDCG@k of a `[Q, N]` similarity matrix (queries by
    passages), where `relevant[q]` holds the indices of query q's relevant passages (one at
    least). Ties rank the earlier passage first."""
    if similarity.dim() != 2 or similarity.shape[0] != len(relevant) or k < 1:
        raise ValueError(f"a [Q, N] similarity for {len(relevant)} queries and k >= 1, got "
                         f"{tuple(similarity.shape)} and k={k}")
    relevance = _relevance(relevant, similarity.shape[1], similarity.device)
    mean = _per_query(similarity, relevance, k).mean(0)
    return RetrievalFigures(*(float(x) for x in mean), k=k, queries=len(relevant))


def search_figures(queries: torch.Tensor, passages: torch.Tensor,
                   relevant: Sequence[Collection[int]], *, k: int = 10, dim: int | None = None,
                   block: int = 1024) -> RetrievalFigures:
    """`retrieval_figures` of the cosines of query vectors `[Q, D]` with passage vectors
    `[N, D]`, `block` queries at a time (so memory holds `block * N` cosines, not `Q * N`);
    `dim` a Matryoshka prefix to evaluate (None: the whole vector)."""
    if len(queries) != len(relevant) or not len(queries):
        raise ValueError(f"{len(queries)} query vectors for {len(relevant)} relevance lists")
    passages = prefix(passages.double(), dim)
    sums = torch.zeros(4, dtype=torch.float64)
    for start in range(0, len(queries), block):
        part = relevant[start:start + block]
        cosines = cosine_matrix(prefix(queries[start:start + block].double(), dim), passages)
        sums += _per_query(cosines, _relevance(part, len(passages), cosines.device), k).sum(0).cpu()
    return RetrievalFigures(*(float(x) for x in sums / len(queries)), k=k, queries=len(queries))


__all__ = ["RetrievalFigures", "StsFigures", "average_precisions", "ndcgs", "pearson", "ranks",
           "recalls", "reciprocal_ranks", "retrieval_figures", "search_figures", "spearman",
           "sts_figures"]
