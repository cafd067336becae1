"""word2vec's variants: CBOW and the full softmax, each checked against its formula, and each
of the four (skip-gram/CBOW x negative sampling/softmax) learning planted groups."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bertkit.embeddings.static import StaticVectors, Tokenization
from bertkit.files import UserError
from bertkit.road.word2vec import (SOFTMAX_MAX_VOCAB, Corpus, SkipGramConfig, cbow_contexts,
                                   cbow_hidden, softmax_gradients, softmax_loss,
                                   train_skipgram)


def test_softmax_loss_is_the_explicit_formula():
    h = torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=torch.float64)
    U = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 2.0]], dtype=torch.float64)
    targets = torch.tensor([2, 0])
    expected = 0.0
    for row, o in zip(h.tolist(), targets.tolist()):
        scores = [row[0] * u[0] + row[1] * u[1] for u in U.tolist()]
        expected -= math.log(math.exp(scores[o]) / sum(math.exp(s) for s in scores))
    assert softmax_loss(h, U, targets).item() == pytest.approx(expected, rel=1e-12)
    loss, d_h, d_u = softmax_gradients(h, U, targets)
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    leaves = [h.clone().requires_grad_(), U.clone().requires_grad_()]
    softmax_loss(leaves[0], leaves[1], targets).backward()
    assert torch.allclose(d_h, leaves[0].grad) and torch.allclose(d_u, leaves[1].grad)


def test_cbow_averages_the_context_vectors():
    vectors = torch.tensor([[1.0, 0.0], [0.0, 2.0], [4.0, 4.0], [-2.0, 6.0]])
    contexts = torch.tensor([[0, 1, -1, -1], [2, 3, 1, -1], [3, -1, -1, -1]])
    h, count = cbow_hidden(vectors, contexts)
    assert count.flatten().tolist() == [2, 3, 1]
    assert torch.allclose(h, torch.stack([vectors[[0, 1]].mean(0), vectors[[2, 3, 1]].mean(0),
                                          vectors[3]]))


def test_cbow_windows_stay_on_the_line_around_their_center():
    n, window = 5_000, 3
    positions = torch.arange(n)  # ids are the positions: a context id says where it was
    lines = positions // 7
    contexts, centers = cbow_contexts(positions, lines, window, torch.Generator().manual_seed(0))
    known = contexts >= 0
    distance = (contexts - centers[:, None]).abs()
    assert torch.all(distance[known] >= 1) and torch.all(distance[known] <= window)
    assert torch.all(lines[contexts.clamp(min=0)][known] == lines[centers[:, None]
                                                                   .expand_as(contexts)][known])
    # word2vec's shrinking window: a line's middle word (3 words each side) has its full
    # window of 2W words only when b = W was drawn, a third of the time.
    middle = centers % 7 == 3
    full = (known.sum(1) == 2 * window)[middle].float().mean().item()
    assert abs(full - 1 / 3) < 0.06, full
    assert known.any(1).all()


def _groups_corpus(lines: int = 1500, groups: int = 8, seed: int = 0) -> Corpus:
    """Filler lines holding one planted group {aK, bK, cK} side by side, in a random order:
    aK and bK share their context cK, so their vectors meet."""
    rng = np.random.default_rng(seed)
    tokens = [f"{x}{k}" for x in "abc" for k in range(groups)] + [f"f{i}" for i in range(30)]
    ids, line_of = [], []
    for line in range(lines):
        row = list(rng.integers(3 * groups, len(tokens), size=6))
        k = int(rng.integers(groups))
        at = int(rng.integers(len(row) + 1))
        row[at:at] = list(rng.permutation([k, groups + k, 2 * groups + k]))
        ids += row
        line_of += [line] * len(row)
    ids = np.array(ids, dtype=np.int64)
    return Corpus(tokens, np.bincount(ids, minlength=len(tokens)), ids,
                  np.array(line_of, dtype=np.int64))


@pytest.mark.parametrize("architecture,loss", [("cbow", "negative"), ("skipgram", "softmax"),
                                               ("cbow", "softmax")])
def test_each_variant_learns_planted_groups(architecture, loss, one_thread):
    corpus = _groups_corpus()
    config = SkipGramConfig(architecture=architecture, loss=loss, dim=16, window=2, epochs=5,
                            min_count=1, subsample=0.0, lr=0.05 if loss == "negative" else 0.02,
                            batch_size=256)
    inp, out, stats = train_skipgram(corpus, config, progress=False)
    assert stats.epoch_losses[-1] < stats.epoch_losses[0]
    ix = {t: i for i, t in enumerate(corpus.tokens)}
    if loss == "negative":
        vectors = StaticVectors(corpus.tokens, corpus.counts, inp, Tokenization())
        hits = sum(vectors.neighbors(f"{x}{k}", 1)[0][0][1:] == str(k) for x in "abc"
                   for k in range(8))
        assert hits >= 22, (architecture, hits)
        return
    # What the softmax itself learns: P(cK | aK) = softmax(v_aK . U)[cK], far above
    # P(cJ | aK) for another group J.
    p = torch.softmax(torch.from_numpy(inp @ out.T), -1).numpy()
    partner = np.mean([p[ix[f"a{k}"], ix[f"c{k}"]] for k in range(8)])
    other = np.mean([p[ix[f"a{k}"], ix[f"c{j}"]] for k in range(8) for j in range(8) if j != k])
    assert partner > 5 * other, (architecture, partner, other)


def test_softmax_is_refused_for_a_large_vocabulary():
    V = SOFTMAX_MAX_VOCAB + 1
    corpus = Corpus([f"w{i}" for i in range(V)], np.ones(V, dtype=np.int64),
                    np.arange(V, dtype=np.int64), np.zeros(V, dtype=np.int64))
    with pytest.raises(UserError, match="--loss softmax .* more than 10,000"):
        train_skipgram(corpus, SkipGramConfig(loss="softmax", min_count=1), progress=False)
    with pytest.raises(ValueError, match="architecture"):
        SkipGramConfig(architecture="glove")
