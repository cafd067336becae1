"""The rest of the word2vec lecture: CBOW, the full softmax, analogies, the 2-D picture, and
one word's contextual vectors in two texts (`bertkit similarity`)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import bertkit.cli.main as cli
from bertkit.embeddings.embedder import Embedder
from bertkit.files import UserError
from bertkit.senses.static import (SOFTMAX_MAX_VOCAB, Corpus, SkipGramConfig, StaticVectors,
                                   Tokenization, analogy, analogy_accuracy, cbow_contexts,
                                   cbow_hidden, context_similarity, parse_span, pca_2d,
                                   plot_words, read_analogies, softmax_gradients, softmax_loss,
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


def _toy_vectors() -> StaticVectors:
    words = {"king": [1, 0, 1], "man": [1, 0, 0], "woman": [0, 1, 0], "queen": [0, 1, 1],
             "apple": [0, 0, -1], "prince": [0.9, 0.1, 0.9]}
    return StaticVectors(list(words), np.ones(len(words)), np.array(list(words.values()),
                                                                    dtype=np.float32),
                         Tokenization())


def test_analogy_answers_and_leaves_the_inputs_out():
    vectors = _toy_vectors()
    assert analogy(vectors, "king", "man", "woman")[0][0] == "queen"
    # king - prince + woman is nearly woman itself: the inputs may never be the answer.
    answers = [w for w, _ in vectors.analogy("king", "prince", "woman", k=5)]
    assert {"king", "prince", "woman"}.isdisjoint(answers) and answers[0] == "queen"
    cos = vectors.analogy("king", "man", "woman")[0][1]
    target = sum(v / np.linalg.norm(v) * s for v, s in
                 ((vectors.vector("king"), 1), (vectors.vector("man"), -1),
                  (vectors.vector("woman"), 1)))
    q = vectors.vector("queen")
    assert cos == pytest.approx(target @ q / np.linalg.norm(target) / np.linalg.norm(q),
                                abs=1e-6)


def test_analogy_file_and_accuracy(tmp_path):
    path = tmp_path / "analogies.txt"
    path.write_text("# a - b + c = d\nking man woman queen\nqueen woman man apple\n"
                    "king man woman zebra\n", encoding="utf-8")
    report = analogy_accuracy(_toy_vectors(), read_analogies(path))
    assert (report["correct"], report["answered"], report["skipped"]) == (1, 2, 1)
    assert report["accuracy"] == 0.5
    path.write_text("king man woman\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"analogies.txt:1: expected four words"):
        read_analogies(path)


def test_pca_keeps_the_main_directions():
    rng = np.random.default_rng(0)
    t = rng.normal(size=20)
    s = rng.normal(size=20) * 0.1
    basis = np.linalg.qr(rng.normal(size=(6, 2)))[0].T  # two orthonormal directions in 6-D
    points = pca_2d(np.outer(t, basis[0]) + np.outer(s, basis[1]) + 3.0)
    # distances in the plane are those of the data, which lies in a plane
    d_plane = np.linalg.norm(points[:, None] - points[None], axis=-1)
    d_data = np.hypot(t[:, None] - t[None], s[:, None] - s[None])
    assert np.allclose(d_plane, d_data, atol=1e-9)
    assert np.abs(points[:, 0]).std() > np.abs(points[:, 1]).std()


def test_plot_words(tmp_path):
    out = tmp_path / "words.png"
    points = plot_words(_toy_vectors(), ["king", "queen", "man", "woman"], out)
    assert points.shape == (4, 2) and out.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(UserError, match="at least three"):
        plot_words(_toy_vectors(), ["king", "queen"], out)
    with pytest.raises(UserError, match="not in the vocabulary"):
        plot_words(_toy_vectors(), ["king", "queen", "zebra"], tmp_path / "other.png")
    assert not (tmp_path / "other.png").exists()


def test_spans():
    assert parse_span("we sat on the river bank .", "bank") == (20, 24)
    assert parse_span("we sat on the river bank .", "3:6") == (3, 6)
    with pytest.raises(UserError, match="outside"):
        parse_span("short", "2:40")
    with pytest.raises(UserError, match="does not occur"):
        parse_span("short", "bank")


def test_similarity_equals_a_hand_computation(bank_bert):
    embedder = Embedder.load(bank_bert)
    t1, t2 = "we sat on the river bank .", "the bank raised rates ."
    s1, s2 = parse_span(t1, "bank"), parse_span(t2, "bank")
    cosines = context_similarity(embedder, t1, s1, t2, s2)
    assert len(cosines) == embedder.config.num_layers + 1
    # by hand: the hidden states of the encoder at the piece "bank" in each text
    ids = [embedder.tokenizer.encode(t).ids for t in (t1, t2)]
    rows = [i.index(embedder.tokenizer.get_vocab()["bank"]) for i in ids]
    with torch.no_grad():
        states = [embedder.encoder(torch.tensor([i]), output_hidden_states=True).hidden_states
                  for i in ids]
    for layer, cos in enumerate(cosines):
        a, b = states[0][layer][0, rows[0]], states[1][layer][0, rows[1]]
        assert cos == pytest.approx(torch.nn.functional.cosine_similarity(a, b, 0).item(),
                                    abs=1e-5)
    assert all(c < 0.9999 for c in cosines)  # other positions, other contexts
    # "unbelievable" is three pieces: their mean
    t3 = "unbelievable money"
    three = context_similarity(embedder, t3, parse_span(t3, "unbelievable"), t3, (0, 12))
    assert three == pytest.approx([1.0] * 3, abs=1e-6)


def test_cli(bank_bert, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    rng = np.random.default_rng(0)
    corpus.write_text("".join(" ".join(rng.choice(["king", "man", "woman", "queen", "apple",
                                                   "pear"], 6)) + "\n" for _ in range(200)),
                      encoding="utf-8")
    out = tmp_path / "vec"
    assert cli.main(["static", "train", "--input", str(corpus), "--architecture", "cbow",
                     "--loss", "softmax", "--dim", "8", "--epochs", "1", "--min-count", "1",
                     "--subsample", "0", "--out", str(out), "--quiet"]) == 0
    assert "words x 8 dimensions" in capsys.readouterr().out
    assert StaticVectors.load(out).config.architecture == "cbow"
    assert cli.main(["static", "analogy", "--vectors", str(out), "--top-k", "2",
                     "king", "man", "woman"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("king - man + woman = ") and "king " not in line.split("=")[1]
    assert cli.main(["static", "analogy", "--vectors", str(out), "king", "man"]) == 2
    assert "give three words" in capsys.readouterr().err
    questions = tmp_path / "q.txt"
    questions.write_text("king man woman queen\n", encoding="utf-8")
    assert cli.main(["static", "analogy", "--vectors", str(out), "--input", str(questions),
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["answered"] == 1
    assert cli.main(["static", "plot", "--vectors", str(out), "--out", str(tmp_path / "p.png"),
                     "king", "queen", "man", "woman"]) == 0
    assert (tmp_path / "p.png").is_file()
    capsys.readouterr()
    assert cli.main(["similarity", "we sat on the river bank .", "bank",
                     "the bank raised rates .", "bank", "--model", str(bank_bert),
                     "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["layers"]) == 3
    assert cli.main(["similarity", "we sat", "bank", "the bank", "bank", "--model",
                     str(bank_bert)]) == 2
    assert "does not occur" in capsys.readouterr().err
