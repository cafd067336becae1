"""Fusion: reciprocal-rank fusion and the weighted sum equal plain loops over the rankings, and
BEIR's figures of a fused run equal trec_eval's (pytrec_eval) on the same fused ranking."""
from __future__ import annotations

import random

import pytest
import torch

from bertkit.files import UserError
from bertkit.retrieval.beir import read_beir
from bertkit.retrieval.bm25 import Bm25
from bertkit.retrieval.evaluation import evaluate_beir
from bertkit.retrieval.fusion import RRF_K, ReciprocalRank, WeightedSum, fuse, fusion_named
from bertkit.retrieval.retrievers import Bm25Retriever, DenseRetriever

from tests.retrieval.test_beir import _beir, trec_figures


def plain_fuse(rankings, rule, depth, weights=None):
    """The fused ranking of each query by a loop over dicts: rule "rrf" or "sum"."""
    out_s, out_i = [], []
    for q in range(len(rankings[0][1])):
        total: dict[int, float] = {}
        for w, (scores, indices) in enumerate(rankings):
            row = [(float(s), int(i)) for s, i in zip(scores[q], indices[q]) if i >= 0]
            values = [s for s, _ in row]
            for r, (s, i) in enumerate(row, 1):
                if rule == "rrf":
                    add = 1.0 / (RRF_K + r)
                else:
                    lo, hi = min(values), max(values)
                    add = ((s - lo) / (hi - lo) if hi > lo else 1.0) * (weights or [1.0] * 9)[w]
                total[i] = total.get(i, 0.0) + add
        best = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:depth]
        out_i.append([i for i, _ in best] + [-1] * (depth - len(best)))
        out_s.append([s for _, s in best] + [-float("inf")] * (depth - len(best)))
    return torch.tensor(out_s, dtype=torch.float64), torch.tensor(out_i)


def random_rankings(n: int, queries: int, length: int, seed: int, short: bool = True):
    rng = random.Random(seed)
    rankings = []
    for _ in range(n):
        indices = [rng.sample(range(40), length) for _ in range(queries)]
        scores = [sorted((rng.uniform(-5, 5) for _ in range(length)), reverse=True)
                  for _ in range(queries)]
        if short:  # a row shorter than the others, and an empty one
            indices[1][length // 2:] = [-1] * (length - length // 2)
            indices[2] = [-1] * length
        rankings.append((torch.tensor(scores), torch.tensor(indices)))
    return rankings


@pytest.mark.parametrize("n", [2, 3])
def test_reciprocal_rank_fusion_is_the_plain_loops(n):
    rankings = random_rankings(n, queries=6, length=15, seed=n)
    scores, indices = fuse(rankings, ReciprocalRank(), 25)
    theirs = plain_fuse(rankings, "rrf", 25)
    assert torch.equal(indices, theirs[1])
    assert torch.allclose(scores, theirs[0], atol=1e-15)
    assert (indices[2] == -1).all()  # no retriever found anything for that query


def test_the_weighted_sum_of_min_max_normalised_scores_is_the_plain_loops():
    rankings = random_rankings(3, queries=6, length=15, seed=7)
    for weights in (None, (0.5, 2.0, 1.0)):
        scores, indices = fuse(rankings, WeightedSum(weights), 10)
        theirs = plain_fuse(rankings, "sum", 10, list(weights) if weights else None)
        assert torch.equal(indices, theirs[1])
        assert torch.allclose(scores, theirs[0], atol=1e-12)
    # the best of a ranking scores 1, its last 0: one passage first in both rankings leads
    a = (torch.tensor([[9.0, 1.0, 0.0]]), torch.tensor([[3, 4, 5]]))
    b = (torch.tensor([[0.2, 0.1, 0.0]]), torch.tensor([[3, 5, 6]]))
    scores, indices = fuse([a, b], WeightedSum(), 4)
    assert indices[0].tolist() == [3, 5, 4, 6] and scores[0, 0] == 2.0


def test_the_fusion_names_of_the_command_line():
    assert fusion_named("rrf", None, 2) == ReciprocalRank()
    assert fusion_named("sum", [1, 2, 3], 3) == WeightedSum((1, 2, 3))
    with pytest.raises(UserError, match="fuses two or more retrievers; there is 1"):
        fusion_named("rrf", None, 1)
    with pytest.raises(UserError, match="2 given for 3 retrievers"):
        fusion_named("sum", [1, 2], 3)
    with pytest.raises(UserError, match="--fusion sum"):
        fusion_named("rrf", [1, 2], 2)


def test_figures_of_a_fused_run_equal_trec_eval_on_it(tmp_path, hash_embedder):
    path = _beir(tmp_path, n_passages=1200, n_queries=15)
    data = read_beir(path)
    ours = evaluate_beir(path, retrievers=[DenseRetriever(hash_embedder), Bm25Retriever()],
                         fusion=ReciprocalRank(), progress=False)
    own = {i: data.corpus.ids.index(qid) for i, qid in enumerate(data.queries.ids)
           if qid in data.corpus.ids}

    def without_own(scores, indices):
        rows = [[(s, d) for s, d in zip(srow, irow) if d != own.get(q)][:1000]
                for q, (srow, irow) in enumerate(zip(scores.tolist(), indices.tolist()))]
        return (torch.tensor([[s for s, _ in r] for r in rows]),
                torch.tensor([[d for _, d in r] for r in rows]))

    q = torch.nn.functional.normalize(torch.from_numpy(hash_embedder.encode(
        data.queries.texts)), dim=1)
    p = torch.nn.functional.normalize(torch.from_numpy(hash_embedder.encode(
        data.corpus.texts)), dim=1)
    dense = (q @ p.T).sort(dim=1, descending=True)
    bm25 = Bm25(data.corpus.texts).top_k(data.queries.texts, 1001)
    rankings = [without_own(dense.values, dense.indices),
                without_own(torch.from_numpy(bm25[0]), torch.from_numpy(bm25[1]))]
    _, fused = plain_fuse(rankings, "rrf", 1000)
    theirs = trec_figures(fused.tolist(), data.qrels)
    for name in ("ndcg", "mrr", "recall", "map"):
        assert getattr(ours, name) == pytest.approx(theirs[name], abs=1e-6), name
    alone = evaluate_beir(path, hash_embedder, progress=False)
    assert (ours.ndcg, ours.map) != (alone.ndcg, alone.map)  # the fusion changed the ranking
