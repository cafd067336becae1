"""STS correlations against scipy, retrieval figures against hand-computed values and against
sentence-transformers' InformationRetrievalEvaluator, and figures at a Matryoshka prefix."""
from __future__ import annotations

import math

import pytest
import torch

from bertkit.embeddings.evaluation import (pearson, ranks, retrieval_figures, search_figures,
                                           spearman, sts_figures)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)


# STS --------------------------------------------------------------------------------------------

def test_ranks_share_ties_like_scipy():
    stats = pytest.importorskip("scipy.stats")
    values = torch.tensor([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0])
    assert ranks(values).tolist() == stats.rankdata(values.numpy()).tolist()
    assert ranks(torch.tensor([2.0, 2.0, 2.0])).tolist() == [2.0, 2.0, 2.0]


def test_correlations_equal_scipy():
    stats = pytest.importorskip("scipy.stats")
    x = randn(50, seed=1)
    y = x + randn(50, seed=2)
    y[::7] = 0.5  # ties
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x.numpy(), y.numpy())[0], abs=1e-12)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x.numpy(), y.numpy())[0], abs=1e-12)


def test_correlations_by_hand():
    assert pearson(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 6.0])) == \
        pytest.approx(1.0)
    assert spearman(torch.tensor([1.0, 2.0, 3.0, 4.0]),
                    torch.tensor([1.0, 8.0, 27.0, 64.0])) == pytest.approx(1.0)
    # ranks 1,2,3 against 1,3,2: Pearson of the ranks is 0.5
    assert spearman(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([5.0, 9.0, 7.0])) == \
        pytest.approx(0.5)
    assert math.isnan(pearson(torch.ones(4), torch.arange(4.0)))
    with pytest.raises(ValueError):
        pearson(torch.ones(3), torch.ones(4))


def test_sts_figures_are_correlations_of_cosines():
    stats = pytest.importorskip("scipy.stats")
    a, b = randn(40, 16, seed=3), randn(40, 16, seed=4)
    gold = torch.nn.functional.cosine_similarity(a, b) + 0.3 * randn(40, seed=5)
    cosines = torch.nn.functional.cosine_similarity(a, b).numpy()
    figures = sts_figures(a, b, gold)
    assert figures.pairs == 40
    assert figures.spearman == pytest.approx(stats.spearmanr(cosines, gold.numpy())[0], abs=1e-9)
    assert figures.pearson == pytest.approx(stats.pearsonr(cosines, gold.numpy())[0], abs=1e-9)
    cut = torch.nn.functional.cosine_similarity(a[:, :4], b[:, :4]).numpy()
    assert sts_figures(a, b, gold, dim=4).spearman == pytest.approx(
        stats.spearmanr(cut, gold.numpy())[0], abs=1e-9)
    with pytest.raises(ValueError):
        sts_figures(a, b[:39], gold)


# Retrieval ------------------------------------------------------------------------------------

def test_retrieval_figures_by_hand():
    # query 0: ranking 2, 0, 1, 3 with passage 0 relevant: first hit at rank 2
    # query 1: ranking 3, 1, 0, 2 with passages 3 and 2 relevant: hits at ranks 1 and 4
    similarity = torch.tensor([[0.5, 0.1, 0.9, 0.0],
                               [0.2, 0.4, 0.1, 0.8]])
    figures = retrieval_figures(similarity, [[0], [3, 2]], k=3)
    assert figures.mrr == pytest.approx((1 / 2 + 1) / 2)
    assert figures.recall_at_1 == pytest.approx((0 + 1 / 2) / 2)
    assert figures.recall == pytest.approx((1 + 1 / 2) / 2)  # passage 2 is 4th: beyond k=3
    ndcg_0 = (1 / math.log2(3)) / 1
    ndcg_1 = 1 / (1 + 1 / math.log2(3))
    assert figures.ndcg == pytest.approx((ndcg_0 + ndcg_1) / 2)
    assert figures.queries == 2 and figures.k == 3
    assert figures.as_dict() == {"mrr@3": figures.mrr, "recall@1": figures.recall_at_1,
                                 "recall@3": figures.recall, "ndcg@3": figures.ndcg}


def test_a_miss_scores_zero_and_a_perfect_ranking_one():
    similarity = torch.tensor([[0.9, 0.8, 0.1, 0.0, 0.2]])
    perfect = retrieval_figures(similarity, [[0, 1]], k=2)
    assert (perfect.mrr, perfect.recall, perfect.ndcg) == (1.0, 1.0, 1.0)
    assert perfect.recall_at_1 == 0.5
    miss = retrieval_figures(similarity, [[3]], k=2)
    assert (miss.mrr, miss.recall_at_1, miss.recall, miss.ndcg) == (0.0, 0.0, 0.0, 0.0)


def test_ties_rank_the_earlier_passage_first():
    similarity = torch.tensor([[0.5, 0.5, 0.5]])
    assert retrieval_figures(similarity, [[0]]).mrr == 1.0
    assert retrieval_figures(similarity, [[2]]).mrr == pytest.approx(1 / 3)


def test_bad_relevance_is_refused():
    similarity = torch.zeros(2, 3)
    for relevant in ([[0], []], [[0], [3]], [[0]]):
        with pytest.raises(ValueError):
            retrieval_figures(similarity, relevant)


def test_search_figures_in_blocks_equal_the_whole_matrix():
    queries, passages = randn(23, 8, seed=1), randn(40, 8, seed=2)
    relevant = [[(3 * q) % 40, (5 * q + 1) % 40] for q in range(23)]
    cosines = torch.nn.functional.normalize(queries, dim=1) @ \
        torch.nn.functional.normalize(passages, dim=1).T
    whole = retrieval_figures(cosines, relevant)
    blocks = search_figures(queries, passages, relevant, block=5)
    for name, value in whole.as_dict().items():
        assert blocks.as_dict()[name] == pytest.approx(value, abs=1e-12)
    cut = torch.nn.functional.normalize(queries[:, :3], dim=1) @ \
        torch.nn.functional.normalize(passages[:, :3], dim=1).T
    assert search_figures(queries, passages, relevant, dim=3).ndcg == pytest.approx(
        retrieval_figures(cut, relevant).ndcg, abs=1e-12)


def test_equal_to_sentence_transformers_information_retrieval():
    evaluation = pytest.importorskip("sentence_transformers.sentence_transformer.evaluation")
    Q, N = 30, 60
    similarity = randn(Q, N, seed=11)
    g = torch.Generator().manual_seed(12)
    relevant = [torch.randperm(N, generator=g)[:1 + q % 4].tolist() for q in range(Q)]
    queries = {f"q{q:03d}": f"query {q}" for q in range(Q)}
    corpus = {f"d{d:03d}": f"passage {d}" for d in range(N)}
    evaluator = evaluation.InformationRetrievalEvaluator(
        queries, corpus, {f"q{q:03d}": {f"d{d:03d}" for d in relevant[q]} for q in range(Q)},
        mrr_at_k=[10], ndcg_at_k=[10], accuracy_at_k=[1, 10], precision_recall_at_k=[1, 10],
        map_at_k=[10], write_csv=False)
    results = [[{"corpus_id": f"d{d:03d}", "score": float(similarity[q, d])} for d in range(N)]
               for q in range(Q)]
    theirs = evaluator.compute_metrics(results)
    ours = retrieval_figures(similarity, relevant)
    assert ours.mrr == pytest.approx(theirs["mrr@k"][10], abs=1e-12)
    assert ours.ndcg == pytest.approx(theirs["ndcg@k"][10], abs=1e-12)
    assert ours.recall_at_1 == pytest.approx(theirs["recall@k"][1], abs=1e-12)
    assert ours.recall == pytest.approx(theirs["recall@k"][10], abs=1e-12)


@pytest.mark.slow
def test_sick_dev_sts_equals_sentence_transformers_evaluator(shared_data, minilm_dir):
    """Real data: all-MiniLM-L6-v2 (mean pooling) on SICK dev; the relatedness brought to
    0..1 by the NLI reader; the figures equal sentence-transformers' evaluator's, on its own
    vectors, at the full width and at a Matryoshka prefix of 128."""
    st = pytest.importorskip("sentence_transformers")
    evaluation = pytest.importorskip("sentence_transformers.sentence_transformer.evaluation")
    from bertkit.finetuning.sentence_pairs import read_nli

    scored = read_nli(shared_data / "nli" / "sick.dev.jsonl").scored
    a, b = [s.text_a for s in scored], [s.text_b for s in scored]
    gold = [s.score for s in scored]
    torch.manual_seed(0)
    model = st.SentenceTransformer(str(minilm_dir), device="cpu")
    vectors = model.encode(a + b, batch_size=64, convert_to_tensor=True)
    for dim in (None, 128):
        evaluator = evaluation.EmbeddingSimilarityEvaluator(
            a, b, gold, similarity_fn_names=["cosine"], write_csv=False, truncate_dim=dim)
        theirs = evaluator(model)
        ours = sts_figures(vectors[:len(a)], vectors[len(a):], torch.tensor(gold), dim=dim)
        assert ours.pairs == 995
        assert ours.spearman == pytest.approx(theirs["spearman_cosine"], abs=1e-4)
        assert ours.pearson == pytest.approx(theirs["pearson_cosine"], abs=1e-4)
        print(f"SICK dev, all-MiniLM-L6-v2 mean pooling, dim {dim}: Spearman "
              f"{ours.spearman:.4f}, Pearson {ours.pearson:.4f}")
