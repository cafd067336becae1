"""The bi-encoder losses: each equal to a plain Python loop on a tiny batch, and to
sentence-transformers' loss of the same name on the same vectors."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from bertkit.embeddings.losses import (cosent_loss, cosine_matrix, cosine_mse_loss,
                                       multiple_negatives_ranking_loss, simcse_loss)
from bertkit.embeddings.matryoshka import matryoshka_loss, prefix


def vectors(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)


def cos(u, v) -> float:
    dot = sum(a * b for a, b in zip(u.tolist(), v.tolist()))
    return dot / math.sqrt(sum(a * a for a in u.tolist()) * sum(b * b for b in v.tolist()))


def loop_cross_entropy(logits: list[list[float]]) -> float:
    """Mean over rows i of -log softmax(row i)[i]."""
    total = 0.0
    for i, row in enumerate(logits):
        total += -row[i] + math.log(sum(math.exp(x) for x in row))
    return total / len(logits)


def loop_mnrl(a, p, n=None, scale=20.0, symmetric=False) -> float:
    candidates = list(p) + ([] if n is None else [n[i, k] for k in range(n.shape[1])
                                                   for i in range(len(a))])
    forward = loop_cross_entropy([[scale * cos(a[i], c) for c in candidates]
                                  for i in range(len(a))])
    if not symmetric:
        return forward
    backward = loop_cross_entropy([[scale * cos(p[i], a[j]) for j in range(len(a))]
                                   for i in range(len(a))])
    return (forward + backward) / 2


def loop_cosent(a, b, scores, scale=20.0) -> float:
    c = [scale * cos(a[i], b[i]) for i in range(len(a))]
    terms = [math.exp(c[j] - c[i]) for i in range(len(c)) for j in range(len(c))
             if scores[i] > scores[j]]
    return math.log(1 + sum(terms))


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("negatives", [0, 1, 3])
@pytest.mark.parametrize("scale", [20.0, 7.5])
def test_multiple_negatives_ranking_equals_a_loop(symmetric, negatives, scale):
    a, p = vectors(5, 8, seed=1), vectors(5, 8, seed=2)
    n = vectors(5, negatives, 8, seed=3) if negatives else None
    got = multiple_negatives_ranking_loss(a, p, n, scale=scale, symmetric=symmetric)
    assert got.item() == pytest.approx(loop_mnrl(a, p, n, scale, symmetric), abs=1e-6)


def test_one_hard_negative_column_may_be_two_dimensional():
    a, p, n = vectors(4, 6, seed=1), vectors(4, 6, seed=2), vectors(4, 6, seed=3)
    assert multiple_negatives_ranking_loss(a, p, n).item() == pytest.approx(
        multiple_negatives_ranking_loss(a, p, n[:, None]).item(), abs=1e-12)
    assert multiple_negatives_ranking_loss(a, p, n).item() == pytest.approx(
        loop_mnrl(a, p, n[:, None]), abs=1e-6)


def test_hard_negatives_make_the_task_harder():
    a = vectors(6, 8, seed=1)
    p = a + 0.1 * vectors(6, 8, seed=2)
    near = a + 0.3 * vectors(6, 8, seed=3)  # close to the anchor: hard
    assert multiple_negatives_ranking_loss(a, p, near) > multiple_negatives_ranking_loss(a, p)


def test_simcse_is_in_batch_negatives_over_two_views():
    a, b = vectors(6, 8, seed=4), vectors(6, 8, seed=5)
    assert simcse_loss(a, b).item() == pytest.approx(loop_mnrl(a, b), abs=1e-6)
    assert simcse_loss(a, b, scale=5).item() == pytest.approx(
        multiple_negatives_ranking_loss(a, b, scale=5).item(), abs=1e-12)


def test_cosent_equals_a_loop_with_ties():
    a, b = vectors(7, 5, seed=6), vectors(7, 5, seed=7)
    scores = torch.tensor([0.1, 0.5, 0.5, 0.9, 0.0, 0.5, 0.3], dtype=torch.float64)
    assert cosent_loss(a, b, scores).item() == pytest.approx(
        loop_cosent(a, b, scores.tolist()), abs=1e-6)
    assert cosent_loss(a, b, scores, scale=3).item() == pytest.approx(
        loop_cosent(a, b, scores.tolist(), scale=3), abs=1e-6)
    # only the order of the scores counts
    assert cosent_loss(a, b, scores * 5 + 1).item() == pytest.approx(
        cosent_loss(a, b, scores).item(), abs=1e-12)
    # all scores equal: nothing to rank, log(1)
    assert cosent_loss(a, b, torch.ones(7)).item() == 0.0


def test_cosine_mse_equals_a_loop():
    a, b = vectors(5, 4, seed=8), vectors(5, 4, seed=9)
    scores = torch.tensor([0.0, 0.25, 1.0, 0.5, 0.8], dtype=torch.float64)
    want = sum((cos(a[i], b[i]) - scores[i].item()) ** 2 for i in range(5)) / 5
    assert cosine_mse_loss(a, b, scores).item() == pytest.approx(want, abs=1e-6)


def test_losses_have_gradients_and_reject_mismatched_shapes():
    a = vectors(4, 6, seed=1).requires_grad_()
    p = vectors(4, 6, seed=2)
    multiple_negatives_ranking_loss(a, p, symmetric=True).backward()
    assert a.grad is not None and a.grad.abs().sum() > 0
    with pytest.raises(ValueError):
        multiple_negatives_ranking_loss(a, p[:3])
    with pytest.raises(ValueError):
        multiple_negatives_ranking_loss(a, p, vectors(3, 6))
    with pytest.raises(ValueError):
        cosent_loss(a, p, torch.zeros(3))


def test_cosine_matrix():
    a, b = vectors(3, 4, seed=1), vectors(2, 4, seed=2)
    m = cosine_matrix(a, b)
    assert m.shape == (3, 2)
    assert m[2, 1].item() == pytest.approx(cos(a[2], b[1]), abs=1e-12)


# Matryoshka -----------------------------------------------------------------------------------

def test_matryoshka_loss_equals_a_loop():
    a, b = vectors(6, 16, seed=1), vectors(6, 16, seed=2)
    scores = torch.tensor([0.2, 0.4, 0.1, 0.9, 0.5, 0.7], dtype=torch.float64)
    dims, weights = (4, 8, 16), (1.0, 0.5, 2.0)
    want = sum(w * loop_cosent(a[:, :d], b[:, :d], scores.tolist())
               for d, w in zip(dims, weights))
    got = matryoshka_loss(lambda x, y: cosent_loss(x, y, scores), [a, b], dims, weights)
    assert got.item() == pytest.approx(want, abs=1e-6)
    want = sum(loop_mnrl(a[:, :d], b[:, :d]) for d in (4, 16))
    got = matryoshka_loss(multiple_negatives_ranking_loss, [a, b], (4, 16))
    assert got.item() == pytest.approx(want, abs=1e-6)


def test_prefix_is_cut_and_renormalised():
    v = vectors(3, 10, seed=1)
    cut = prefix(v, 4)
    assert cut.shape == (3, 4)
    assert torch.allclose(cut.norm(dim=-1), torch.ones(3, dtype=torch.float64))
    assert torch.allclose(cut * v[:, :4].norm(dim=-1, keepdim=True), v[:, :4])
    assert torch.allclose(prefix(v, None), v / v.norm(dim=-1, keepdim=True))
    negatives = vectors(3, 2, 10, seed=2)
    assert prefix(negatives, 4).shape == (3, 2, 4)
    for bad in (0, 11):
        with pytest.raises(ValueError):
            prefix(v, bad)
    with pytest.raises(ValueError):
        matryoshka_loss(multiple_negatives_ranking_loss, [v, v], (4, 8), (1.0,))


# Against sentence-transformers ---------------------------------------------------------------

class GivenVectors(nn.Module):
    """A stand-in SentenceTransformer: each column's features are the vectors it returns."""

    def __init__(self, width: int):
        super().__init__()
        self.width = width

    def forward(self, features):
        return {"sentence_embedding": features["vectors"]}

    def get_embedding_dimension(self):
        return self.width


def st_loss(loss, columns, labels=None):
    features = [{"vectors": c} for c in columns]
    return loss(features, torch.zeros(len(columns[0])) if labels is None else labels).item()


@pytest.fixture(scope="module")
def st_losses():
    return pytest.importorskip("sentence_transformers.sentence_transformer.losses")


def test_equal_to_sentence_transformers_multiple_negatives_ranking(st_losses):
    a, p, n1, n2 = (vectors(6, 12, seed=s).float() for s in (1, 2, 3, 4))
    model = GivenVectors(12)
    for scale in (20.0, 9.0):
        loss = st_losses.MultipleNegativesRankingLoss(model, scale=scale)
        assert multiple_negatives_ranking_loss(a, p, scale=scale).item() == pytest.approx(
            st_loss(loss, [a, p]), abs=1e-5)
        assert multiple_negatives_ranking_loss(
            a, p, torch.stack([n1, n2], 1), scale=scale).item() == pytest.approx(
            st_loss(loss, [a, p, n1, n2]), abs=1e-5)
        symmetric = st_losses.MultipleNegativesRankingLoss(
            model, scale=scale, directions=("query_to_doc", "doc_to_query"),
            partition_mode="per_direction")
        assert multiple_negatives_ranking_loss(
            a, p, scale=scale, symmetric=True).item() == pytest.approx(
            st_loss(symmetric, [a, p]), abs=1e-5)


def test_equal_to_sentence_transformers_cosent_and_cosine_mse(st_losses):
    a, b = vectors(8, 12, seed=5).float(), vectors(8, 12, seed=6).float()
    scores = torch.tensor([0.1, 0.8, 0.8, 0.3, 1.0, 0.0, 0.45, 0.6])
    model = GivenVectors(12)
    assert cosent_loss(a, b, scores).item() == pytest.approx(
        st_loss(st_losses.CoSENTLoss(model), [a, b], scores), abs=1e-5)
    assert cosent_loss(a, b, scores, scale=4).item() == pytest.approx(
        st_loss(st_losses.CoSENTLoss(model, scale=4), [a, b], scores), abs=1e-5)
    assert cosine_mse_loss(a, b, scores).item() == pytest.approx(
        st_loss(st_losses.CosineSimilarityLoss(model), [a, b], scores), abs=1e-6)


def test_equal_to_sentence_transformers_matryoshka(st_losses):
    a, b = vectors(8, 16, seed=7).float(), vectors(8, 16, seed=8).float()
    scores = torch.linspace(0, 1, 8)
    model = GivenVectors(16)
    dims, weights = (16, 8, 4), (1.0, 0.5, 0.25)
    mnrl = st_losses.MatryoshkaLoss(model, st_losses.MultipleNegativesRankingLoss(model),
                                    list(dims), list(weights))
    assert matryoshka_loss(multiple_negatives_ranking_loss, [a, b], dims,
                           weights).item() == pytest.approx(st_loss(mnrl, [a, b]), abs=1e-5)
    cosent = st_losses.MatryoshkaLoss(model, st_losses.CoSENTLoss(model), list(dims))
    assert matryoshka_loss(lambda x, y: cosent_loss(x, y, scores), [a, b],
                           dims).item() == pytest.approx(st_loss(cosent, [a, b], scores),
                                                          abs=1e-4)
