"""A retriever judged on a BEIR directory: each query's top 1,000 passages, by a sentence
model's cosines (exact, in blocks: `bertkit.retrieval.search`), a sparse model's dot products
or BM25 (`bertkit.retrieval.retrievers`), several fused (`bertkit.retrieval.fusion`), the first
reranked (`bertkit.retrieval.reranking`), scored against the judgements as BEIR reports it:
nDCG@10 (graded), MRR@10, recall@100 and MAP (of the top 1,000), averaged over the queries with
a relevant passage. The metrics are those of
`bertkit.embeddings.evaluation`, equal to trec_eval's (pytrec_eval) on the same rankings.

As BEIR's evaluation does, a passage whose id is the query's own id is never retrieved for it
(a collection whose queries are also passages, such as Quora's duplicate questions).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from bertkit.embeddings.evaluation import (average_precisions, ndcgs, recalls,
                                           reciprocal_ranks)
from bertkit.progress import Progress
from bertkit.retrieval.beir import BeirSet, read_beir
from bertkit.retrieval.fusion import Fusion, fuse
from bertkit.retrieval.reranking import RERANK_TOP_EVALUATION, rerank
from bertkit.retrieval.retrievers import Bm25Retriever, DenseRetriever, Retriever
from bertkit.retrieval.search import excluded_rows, leave_out

DEPTH = 1000
"""Passages ranked per query (BEIR's top 1,000: MAP counts them all)."""


@dataclass
class RankingFigures:
    """BEIR's figures of a retriever, averaged over queries."""
    ndcg: float
    """nDCG@10, with graded relevance (a passage's gain its score in the judgements)."""
    mrr: float
    """Mean reciprocal rank of the first relevant passage within the top 10 (0 beyond)."""
    recall: float
    """The share of a query's relevant passages within the top 100."""
    map: float
    """Mean average precision over the top 1,000."""
    queries: int
    """Queries averaged over (those with a relevant passage)."""
    passages: int
    """Passages in the corpus."""

    def as_dict(self) -> dict[str, float | int]:
        return {"ndcg@10": self.ndcg, "mrr@10": self.mrr, "recall@100": self.recall,
                f"map@{DEPTH}": self.map, "queries": self.queries, "passages": self.passages}


def ranking_figures(ranked: torch.Tensor, qrels: Sequence[dict[int, int]],
                    passages: int) -> RankingFigures:
    """The figures of rankings `[Q, L]` (passage positions best first; -1: none there) against
    each query's judgements (`qrels[q]`: passage position -> grade; above 0 is relevant)."""
    if ranked.dim() != 2 or len(ranked) != len(qrels) or not len(qrels):
        raise ValueError(f"expected rankings [Q, L] for {len(qrels)} queries, got "
                         f"{tuple(ranked.shape)}")
    gains = torch.tensor([[max(judged.get(p, 0), 0) for p in row]
                          for row, judged in zip(ranked.tolist(), qrels)], dtype=torch.float64)
    best = [sorted((g for g in judged.values() if g > 0), reverse=True) for judged in qrels]
    ideal = torch.zeros(len(qrels), max(map(len, best)), dtype=torch.float64)
    for q, grades in enumerate(best):
        ideal[q, :len(grades)] = torch.tensor(grades, dtype=torch.float64)
    relevant = torch.tensor([len(grades) for grades in best])
    per_query = [ndcgs(gains, ideal, 10), reciprocal_ranks(gains, 10),
                 recalls(gains, relevant, 100), average_precisions(gains, relevant, DEPTH)]
    return RankingFigures(*(float(x.mean()) for x in per_query), queries=len(qrels),
                          passages=passages)


def rank(data: BeirSet, embedder=None, *, retrievers: Sequence[Retriever] | None = None,
         fusion: Fusion | None = None, reranker=None, rerank_top: int = RERANK_TOP_EVALUATION,
         batch_size: int = 64, depth: int = DEPTH, progress: bool = True) -> torch.Tensor:
    """Each query's top `depth` passages `[Q, depth]` (positions; -1 where the corpus is
    shorter): by the cosines of a sentence model (`embedder`: anything with
    sentence-transformers' `encode`), by BM25 when it is None, or by `retrievers` (not yet
    indexing: `bertkit.retrieval.retrievers`), several fused by `fusion`; with a `reranker`,
    each query's first `rerank_top` reordered by it, the rest below."""
    if retrievers is None:
        retrievers = [DenseRetriever(embedder) if embedder is not None else Bm25Retriever()]
    if len(retrievers) > 1 and fusion is None:
        raise ValueError("several retrievers need a fusion")
    rankings = retrieved(data, retrievers, batch_size=batch_size, depth=depth,
                         progress=progress)
    scores, indices = fuse(rankings, fusion, depth) if fusion is not None else rankings[0]
    if reranker is not None:
        scores, indices = rerank(reranker, data.queries.texts, data.corpus.texts, scores,
                                 indices, rerank_top)
    return indices


def retrieved(data: BeirSet, retrievers: Sequence[Retriever], *, batch_size: int = 64,
              depth: int = DEPTH, progress: bool = True
              ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each retriever's (scores, positions) `[Q, depth]` of every query's best passages, the
    query's own passage (its id in the corpus) left out, as BEIR does: what `fuse` combines
    and `rerank` reorders."""
    at = data.corpus.index()
    own = [[at[qid]] if qid in at else [] for qid in data.queries.ids]
    wanted = depth + int(any(own))  # one more where a query's own passage may be first
    excluded = excluded_rows(own)
    rankings = []
    for r in retrievers:
        r.index(data.corpus.texts, batch_size=batch_size, progress=progress)
        bar = Progress(f"search ({r.kind})", len(data.queries.ids), "queries",
                       enabled=progress)
        scores, indices = r.top_k(data.queries.texts, wanted, done=lambda n: bar.update(add=n))
        bar.finish()
        indices, scores = leave_out(indices, scores.float(), excluded, depth)
        rankings.append((scores, indices))
    return rankings


def evaluate_beir(path: str | Path, embedder=None, *, retrievers: Sequence[Retriever] | None = None,
                  fusion: Fusion | None = None, reranker=None,
                  rerank_top: int = RERANK_TOP_EVALUATION, batch_size: int = 64,
                  progress: bool = True) -> RankingFigures:
    """BEIR's figures on a BEIR directory (`bertkit.retrieval.beir`) of a sentence model
    (`embedder`), of BM25 when it is None, or of `retrievers` fused and reranked (`rank`)."""
    data = read_beir(path)
    ranked = rank(data, embedder, retrievers=retrievers, fusion=fusion, reranker=reranker,
                  rerank_top=rerank_top, batch_size=batch_size, progress=progress)
    return ranking_figures(ranked, data.qrels, len(data.corpus.ids))


__all__ = ["DEPTH", "RankingFigures", "evaluate_beir", "rank", "ranking_figures",
           "retrieved"]
